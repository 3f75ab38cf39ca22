"""Version and signature guards shared by every verl patch.

Each patch names the verl version it was written for and the functions it
replaces; applying it to anything else fails loudly instead of half-working.
"""

from __future__ import annotations

import ast
import hashlib
import importlib.util
from pathlib import Path

from .. import versions


class PatchVersionError(RuntimeError):
    pass


def installed_verl_version() -> str:
    import verl

    return getattr(verl, "__version__", "unknown")


def pinned_verl_version() -> str:
    return str(versions.get("verl.version"))


def require_verl(patch_name: str, written_for: str | None = None) -> None:
    want = written_for or pinned_verl_version()
    have = installed_verl_version()
    if have != want:
        raise PatchVersionError(
            f"npu_rl patch {patch_name!r} was written for verl {want} but verl {have} is installed; "
            f"install verl=={want} (configs/versions.yaml) or port the patch"
        )


def module_file(module_name: str) -> Path:
    """A module's source file, found without importing it (megatron/vllm modules do not import on CPU)."""
    top, *rest = module_name.split(".")
    spec = importlib.util.find_spec(top)  # only the top package: parents may import vllm or megatron
    if spec is None or spec.origin is None:
        raise PatchVersionError(f"module {module_name} not found")
    base = Path(spec.origin).parent.joinpath(*rest)
    for path in (base.with_suffix(".py"), base / "__init__.py"):
        if path.is_file():
            return path
    raise PatchVersionError(f"module {module_name} not found")


def static_source(path: Path, qualname: str) -> str:
    """Source of ``Class.method`` / ``function`` in ``path``, read with ast (no import)."""
    src = path.read_text(encoding="utf-8")
    nodes: list[ast.AST] = [ast.parse(src)]
    node: ast.AST | None = None
    for part in qualname.split("."):
        node = next(
            (n for parent in nodes for n in getattr(parent, "body", [])
             if isinstance(n, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and n.name == part),
            None,
        )
        if node is None:
            raise PatchVersionError(f"{qualname} not found in {path}")
        nodes = [node]
    return ast.get_source_segment(src, node, padded=True) or ""


def fingerprint(target: str, path: Path | None = None) -> str:
    """sha256 (first 16 hex) of ``"pkg.module:Class.attr"``'s source, to detect upstream changes."""
    module_name, _, qualname = target.partition(":")
    source = static_source(path or module_file(module_name), qualname)
    return hashlib.sha256(source.encode()).hexdigest()[:16]


def changed_fingerprints(fingerprints: dict[str, str], paths: dict[str, Path] | None = None) -> dict[str, tuple[str, str]]:
    """Targets whose source no longer matches: {target: (expected, actual)}.

    ``paths`` maps a module name to the file to read instead (an imported module's
    ``__file__``, or a modified copy in tests).
    """
    changed = {}
    for target, expected in fingerprints.items():
        module_name = target.partition(":")[0]
        try:
            actual = fingerprint(target, (paths or {}).get(module_name))
        except PatchVersionError:
            actual = "missing"
        if actual != expected:
            changed[target] = (expected, actual)
    return changed


def require_unchanged(patch_name: str, fingerprints: dict[str, str], paths: dict[str, Path] | None = None) -> None:
    changed = changed_fingerprints(fingerprints, paths)
    if changed:
        raise PatchVersionError(
            f"npu_rl patch {patch_name!r}: verl's {', '.join(sorted(changed))} changed since the patch was "
            "written; port the patch"
        )


def require_module_unchanged(patch_name: str, fingerprints: dict[str, str], module_name: str,
                             path: Path | None = None) -> None:
    """``require_unchanged`` for the fingerprints of one module (``"<module>:<qualname>"`` keys), checked
    when that module is imported: ``path`` is its file, or it is located without importing it."""
    mine = {t: fp for t, fp in fingerprints.items() if t.startswith(module_name + ":")}
    require_unchanged(patch_name, mine, {module_name: path} if path else None)
