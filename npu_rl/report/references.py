"""The facts the throughput card reads from data files: what one device of a platform is
(``hardware.yaml``) and the published throughput figures (``published.yaml``), each with its
source in the file, not in code."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import Any, get_args

import yaml
from pydantic import Field, ValidationError

from ..errors import UserError
from ..recipe.schema import Platform, Strict

HARDWARE = Path(__file__).with_name("hardware.yaml")
PUBLISHED = Path(__file__).with_name("published.yaml")


class Hardware(Strict):
    card: str  # what a card is called
    device: str  # what verl counts as one device (one worker) on it
    dies_per_card: int = Field(gt=0)


class Published(Strict):
    name: str
    value: float = Field(gt=0)
    unit: str
    source: str
    # Conditions (keys of throughput.conditions) the figure was measured under; all must match.
    when: dict[str, Any] = Field(min_length=1)


def _read(path: Path) -> Any:
    try:
        return yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as err:
        raise UserError(f"{path}: unreadable ({str(err).splitlines()[0]})") from None


def _validated(model: type[Strict], data: Any, where: str) -> Any:
    try:
        return model.model_validate(data)
    except ValidationError as err:
        first = err.errors()[0]
        raise UserError(f"{where}: {'.'.join(map(str, first['loc']))}: {first['msg']}") from None


@lru_cache(maxsize=1)
def hardware() -> dict[str, Hardware]:
    data = _read(HARDWARE) or {}
    missing = sorted(set(get_args(Platform)) - set(data))
    if missing:
        raise UserError(f"{HARDWARE}: no entry for platform(s) {', '.join(missing)}")
    return {name: _validated(Hardware, entry, f"{HARDWARE} {name}") for name, entry in data.items()}


def platform(name: str) -> Hardware:
    return hardware()[name]


@lru_cache(maxsize=1)
def published() -> tuple[Published, ...]:
    data = _read(PUBLISHED) or []
    if not isinstance(data, list):
        raise UserError(f"{PUBLISHED}: expected a list of published figures")
    return tuple(_validated(Published, entry, f"{PUBLISHED} [{i}]") for i, entry in enumerate(data))


def matching(conditions: dict[str, Any]) -> list[Published]:
    """The published figures measured under ``conditions`` (every condition they name is equal)."""
    return [p for p in published() if all(conditions.get(k) == v for k, v in p.when.items())]
