"""Get real weights into the workspace: from the hub (honours HF_ENDPOINT mirrors,
resumes partial downloads) or by copying a local directory."""

from __future__ import annotations

import shutil
from pathlib import Path

from ..errors import UserError
from .tokenizer_override import apply_override, resolve_override

REQUIRED_FILES = ("config.json",)


def check_model_dir(path: Path) -> None:
    if not path.is_dir():
        raise UserError(f"model directory not found: {path} (run `npu-rl model fetch` or `npu-rl model tiny`)")
    for name in REQUIRED_FILES:
        if not (path / name).is_file():
            raise UserError(f"{path}: not a Hugging Face model directory (no {name})")
    if not any(path.glob("*.safetensors")) and not any(path.glob("*.bin")):
        raise UserError(f"{path}: no weights (*.safetensors or *.bin) found")


def fetch(source: str, out: Path) -> Path:
    src = Path(source)
    if src.is_dir():
        check_model_dir(src)
        if src.resolve() != out.resolve():
            shutil.copytree(src, out, dirs_exist_ok=True)
        return out
    if source.startswith((".", "/")):
        raise UserError(f"model source {source!r} is not a directory")
    try:
        from huggingface_hub import snapshot_download  # lazy: huggingface_hub
        from huggingface_hub.errors import HfHubHTTPError, HFValidationError  # lazy: huggingface_hub
    except ImportError as err:  # pragma: no cover - huggingface_hub ships with transformers
        raise UserError(f"huggingface_hub is not installed ({err})") from None
    out.mkdir(parents=True, exist_ok=True)
    try:
        # snapshot_download resumes partial files and shows tqdm progress per file.
        snapshot_download(repo_id=source, local_dir=str(out))
    except (HfHubHTTPError, HFValidationError, OSError) as err:
        raise UserError(
            f"could not download {source!r}: {str(err).splitlines()[0]} "
            "(set HF_ENDPOINT to a mirror, or pass a local directory)"
        ) from None
    return out


def fetch_for_recipe(source: str, out: Path, tokenizer_config: str | None = None) -> Path:
    """Fetch ``source`` into ``out`` and apply a recipe's ``model.tokenizer_config`` override.

    Shared by `npu-rl model fetch` and `npu-rl prepare`, so both leave the same model directory.
    """
    # Resolved first: a wrong override path should fail before a long download, not after it.
    override = resolve_override(tokenizer_config)
    out = fetch(source, out)
    check_model_dir(out)
    if override is not None:
        apply_override(out, override)
        print(f"applied {override.name} to {out / 'tokenizer_config.json'}")
    elif not (out / "tokenizer_config.json").is_file():
        raise UserError(f"{out}: no tokenizer_config.json")
    print(f"model: {out}")
    return out
