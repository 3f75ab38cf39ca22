"""`npu-rl recipe explain`: the recipe schema as documented by its own ``Field(description=...)``.

Everything printed comes from the pydantic models' ``model_fields``: there is no second list of fields.
"""

from __future__ import annotations

import difflib
import json
import types
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Literal, Union, get_args, get_origin

from pydantic import BaseModel
from pydantic_core import PydanticUndefined

from ..errors import UserError
from .schema import Recipe

_UNSET = object()  # a field under a section the recipe leaves null


@dataclass(frozen=True)
class Entry:
    name: str  # dotted: algorithm.lr
    depth: int
    type: str
    default: str  # "required" where the recipe must give it
    description: str
    section: bool  # a nested model: its fields follow
    value: Any = _UNSET  # the recipe's value (mode="json"), _UNSET without a recipe or under a null section


def _models(annotation: Any) -> list[type[BaseModel]]:
    """The pydantic models in an annotation (``X``, ``X | None``)."""
    return [a for a in (annotation, *get_args(annotation)) if isinstance(a, type) and issubclass(a, BaseModel)]


def type_name(annotation: Any) -> str:
    if annotation is type(None):
        return "None"
    origin, args = get_origin(annotation), get_args(annotation)
    if origin is Literal:
        return " | ".join(json.dumps(a) for a in args)
    if origin in (Union, types.UnionType):
        return " | ".join(type_name(a) for a in args)
    if origin is not None:
        return f"{getattr(origin, '__name__', str(origin))}[{', '.join(type_name(a) for a in args)}]"
    if annotation is Any:
        return "Any"
    return getattr(annotation, "__name__", str(annotation))


def _shown(value: Any) -> str:
    return json.dumps(value, default=str)


def _default(field: Any) -> str:
    if field.is_required():
        return "required"
    value = field.default_factory() if field.default is PydanticUndefined else field.default
    if isinstance(value, BaseModel):
        return "(section)"
    return _shown(value)


def entries(model: type[BaseModel] = Recipe, recipe: Any = _UNSET, prefix: str = "", depth: int = 0) -> Iterator[Entry]:
    """Every field of ``model`` and of the models nested in it, depth first; ``recipe`` is the value of
    ``model`` as a JSON-like dict (``Recipe.model_dump(mode="json")``) when a recipe is explained."""
    for key, field in model.model_fields.items():
        name = f"{prefix}{key}"
        value = recipe.get(key, _UNSET) if isinstance(recipe, dict) else _UNSET
        nested = _models(field.annotation)
        yield Entry(
            name, depth, type_name(field.annotation), _default(field), field.description or "", bool(nested), value
        )
        for sub in nested:
            yield from entries(sub, value if isinstance(value, dict) else _UNSET, f"{name}.", depth + 1)


def select(all_entries: list[Entry], field: str | None) -> list[Entry]:
    """The entries of ``field`` (a dotted name or section prefix) and below; a one-line error otherwise."""
    if not field:
        return all_entries
    chosen = [e for e in all_entries if e.name == field or e.name.startswith(f"{field}.")]
    if not chosen:
        close = difflib.get_close_matches(field, [e.name for e in all_entries], n=3)
        hint = f"; did you mean {', '.join(close)}?" if close else "; `npu-rl recipe explain` lists them all"
        raise UserError(f"recipe explain: unknown recipe field {field!r}{hint}")
    return chosen


def render(field: str | None = None, recipe: Recipe | None = None) -> str:
    """The documented schema as an indented tree, ``name  type  default D`` over the description; with
    ``recipe``, each field's value in it beside the default (``*`` where it differs, ``-`` under a null section)."""
    data = recipe.model_dump(mode="json") if recipe is not None else _UNSET
    chosen = select(list(entries(recipe=data)), field)
    base = min(e.depth for e in chosen)
    lines = []
    for e in chosen:
        pad = "  " * (e.depth - base)
        head = f"{pad}{e.name}  {e.type}"
        optional_section = e.section and e.default not in ("required", "(section)")  # default null
        if not e.section or optional_section:
            head += f"  default {e.default}"
        if recipe is not None and (not e.section or optional_section):
            if e.section and isinstance(e.value, dict):
                head += "  recipe set  *"  # its fields follow
            else:
                shown = "-" if e.value is _UNSET else _shown(e.value)
                changed = e.value is not _UNSET and e.default != "required" and shown != e.default
                head += f"  recipe {shown}" + ("  *" if changed else "")
        lines += [head, f"{pad}    {e.description}"]
    return "\n".join(lines)


__all__ = ["Entry", "entries", "render", "select", "type_name"]
