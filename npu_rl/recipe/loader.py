"""Find, read and validate recipes; every failure is one line naming the field or file."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from ..errors import UserError
from ..paths import recipes_dir
from .schema import Recipe


def resolve_recipe_path(name_or_path: str | Path) -> Path:
    """A recipe is a path to a YAML file or the name of one in configs/recipes."""
    p = Path(name_or_path)
    if p.suffix in (".yaml", ".yml") or p.exists():
        if not p.is_file():
            raise UserError(f"recipe file not found: {p}")
        return p
    candidate = recipes_dir() / f"{name_or_path}.yaml"
    if candidate.is_file():
        return candidate
    known = ", ".join(sorted(x.stem for x in recipes_dir().glob("*.yaml"))) or "none"
    raise UserError(f"unknown recipe {str(name_or_path)!r} (known: {known})")


def _format_error(source: str, err: ValidationError) -> str:
    first = err.errors()[0]
    loc = ".".join(str(x) for x in first["loc"])
    kind = first["type"]
    if kind == "extra_forbidden":
        return f"{source}: unknown field {loc!r}"
    if kind == "missing":
        return f"{source}: missing required field {loc!r}"
    msg = first["msg"]
    if kind == "value_error":
        msg = msg.removeprefix("Value error, ")
        return f"{source}: {msg}" if not loc else f"{source}: {loc}: {msg}"
    got = first.get("input")
    shown = repr(got) if not isinstance(got, (dict, list)) else type(got).__name__
    return f"{source}: field {loc!r}: {msg} (got {shown})"


def parse_recipe(data: dict[str, Any], source: str = "recipe") -> Recipe:
    if not isinstance(data, dict):
        raise UserError(f"{source}: a recipe must be a YAML mapping, got {type(data).__name__}")
    try:
        return Recipe.model_validate(data)
    except ValidationError as err:
        raise UserError(_format_error(source, err)) from None


class _UniqueKeyLoader(yaml.SafeLoader):
    """safe_load that refuses a key given twice in one mapping (the second would silently win)."""

    def construct_mapping(self, node, deep=False):
        seen: set = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            if key in seen:
                raise yaml.constructor.ConstructorError(
                    None, None, f"duplicate key {key!r} (line {key_node.start_mark.line + 1})", key_node.start_mark
                )
            seen.add(key)
        return super().construct_mapping(node, deep=deep)


def _yaml_error(err: yaml.YAMLError) -> str:
    problem = getattr(err, "problem", None)
    return problem or str(err).splitlines()[0]


# A recipe may be another one with a few keys changed (the same run on another stack line): `extends: NAME`
# reads that recipe first and lays this file's keys over it, section by section; a key set to null there
# is taken out (an environment variable the other line does not know).
EXTENDS = "extends"


def _merged(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in over.items():
        if value is None:
            out.pop(key, None)
        elif isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = _merged(out[key], value)
        else:
            out[key] = value
    return out


def _read(path: Path, chain: tuple[Path, ...] = ()) -> Any:
    try:
        data = yaml.load(path.read_text(encoding="utf-8"), Loader=_UniqueKeyLoader)  # noqa: S506 - safe loader
    except UnicodeDecodeError:
        raise UserError(f"{path}: not UTF-8 text") from None
    except yaml.YAMLError as err:
        raise UserError(f"{path}: not valid YAML ({_yaml_error(err)})") from None
    if not isinstance(data, dict) or EXTENDS not in data:
        return data
    name = str(data.pop(EXTENDS))
    beside = path.parent / name
    try:
        # A path is read beside the file that names it; a name, from configs/recipes.
        parent = beside if beside.suffix in (".yaml", ".yml") and beside.is_file() else resolve_recipe_path(name)
    except UserError as err:
        raise UserError(f"{path}: extends: {err}") from None
    if parent.resolve() in {p.resolve() for p in (*chain, path)}:
        raise UserError(f"{path}: extends {parent.stem}, which extends it back")
    base = _read(parent, (*chain, path))
    if not isinstance(base, dict):
        raise UserError(f"{parent}: a recipe must be a YAML mapping, got {type(base).__name__}")
    return _merged(base, data)


def load_recipe(name_or_path: str | Path, overrides: dict[str, Any] | None = None) -> Recipe:
    """Load a recipe; ``overrides`` maps dotted recipe keys (``algorithm.lr``) to values."""
    path = resolve_recipe_path(name_or_path)
    data = _read(path)
    if overrides and not isinstance(data, dict):
        raise UserError(f"{path}: a recipe must be a YAML mapping, got {type(data).__name__}")
    for dotted, value in (overrides or {}).items():
        node = data
        parts = dotted.split(".")
        for part in parts[:-1]:
            node = node.setdefault(part, {})
            if not isinstance(node, dict):
                raise UserError(f"--set {dotted}: {part!r} is not a section")
        node[parts[-1]] = value
    return parse_recipe(data, str(path))


def parse_set_args(items: list[str] | None) -> dict[str, Any]:
    """``--set algorithm.lr=1e-5`` pairs; values are parsed as YAML scalars."""
    out: dict[str, Any] = {}
    for item in items or []:
        if "=" not in item:
            raise UserError(f"--set {item!r}: expected KEY=VALUE")
        key, value = item.split("=", 1)
        try:
            out[key.strip()] = yaml.safe_load(value)
        except yaml.YAMLError as err:
            raise UserError(f"--set {item!r}: the value is not a YAML scalar or list ({_yaml_error(err)})") from None
    return out
