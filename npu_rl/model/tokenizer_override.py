"""Apply a recipe's tokenizer_config override (chat template with the system prompt)."""

from __future__ import annotations

import json
from pathlib import Path

from ..errors import UserError
from ..paths import config_dir


def resolve_override(path: str | None) -> Path | None:
    if not path:
        return None
    p = Path(path)
    if not p.is_absolute():
        p = config_dir() / p
    if not p.is_file():
        raise UserError(f"model.tokenizer_config: file not found: {p}")
    return p


def load_override(path: Path) -> dict:
    data = json.loads(path.read_text(encoding="utf-8"))
    # Keys starting with "_" document the override and are not tokenizer settings.
    return {k: v for k, v in data.items() if not k.startswith("_")}


def apply_override(model_dir: Path, override: Path) -> Path:
    """Merge ``override`` into ``model_dir/tokenizer_config.json`` in place."""
    target = model_dir / "tokenizer_config.json"
    if not target.is_file():
        raise UserError(f"{model_dir}: no tokenizer_config.json to apply {override.name} to")
    config = json.loads(target.read_text(encoding="utf-8"))
    config.update(load_override(override))
    target.write_text(json.dumps(config, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    return target
