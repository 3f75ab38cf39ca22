"""Version and signature guards shared by every verl patch.

Each patch names the verl releases it supports and, for each, the source fingerprints of the verl
functions it replaces or relies on there (:class:`Patch`); applying it to any other verl fails loudly
instead of half-working. A stack line (configs/stacks/) pins one verl release: a patch runs on a line
once it has that release's fingerprints (:func:`unsupported`, which the launcher's preflight asks).
"""

from __future__ import annotations

import ast
import functools
import hashlib
import importlib.util
import sys
from collections.abc import Callable, Iterable
from importlib import metadata
from pathlib import Path
from typing import Any

# The releases by name, re-exported for the patches (their home is npu_rl.versions, below every layer).
from ..versions import VERL_0_6_1 as VERL_0_6_1
from ..versions import VERL_0_9_0 as VERL_0_9_0
from .hooks import when_imported
from .registry import PATCHES

# verl modules that several patches change or fingerprint.
RAY_TRAINER = "verl.trainer.ppo.ray_trainer"
# verl 0.9's trainer (trainer.use_v1, its default: verl v0.9.0 trainer/config/ppo_trainer.yaml:222).
TRAINER_BASE = "verl.trainer.ppo.v1.trainer_base"
RAY_BASE = "verl.single_controller.ray.base"
SFT_TRAINER = "verl.trainer.sft_trainer"  # verl 0.9's SFT entry (run as __main__ under torchrun)
METRIC_UTILS = "verl.trainer.ppo.metric_utils"
TRACKING = "verl.utils.tracking"
FSDP_WORKERS = "verl.workers.fsdp_workers"
MEGATRON_WORKERS = "verl.workers.megatron_workers"
VLLM_ROLLOUT = "verl.workers.rollout.vllm_rollout.vllm_rollout_spmd"


class PatchVersionError(RuntimeError):
    pass


def installed_verl_version() -> str:
    # verl's modules are patched while `import verl` runs, before its __version__ is set: then the
    # distribution's metadata says which release it is.
    verl = sys.modules.get("verl")
    return getattr(verl, "__version__", None) or _distribution_version()


@functools.cache
def _distribution_version() -> str:
    try:
        return metadata.version("verl")
    except metadata.PackageNotFoundError:
        return "unknown"


def require_verl(patch_name: str, supported: Iterable[str]) -> None:
    have = installed_verl_version()
    supported = sorted(supported)
    if have not in supported:
        raise PatchVersionError(
            f"npu_rl patch {patch_name!r} supports verl {', '.join(supported)} but verl {have} is installed; "
            "run the recipe's stack line (its image or environment) or port the patch"
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


@functools.lru_cache(maxsize=16)
def _parse(src: str) -> ast.Module:
    # Several fingerprints of one module are checked at its import: parse its source once.
    return ast.parse(src)


def static_source(path: Path, qualname: str) -> str:
    """Source of ``Class.method`` / ``function`` in ``path``, read with ast (no import)."""
    src = path.read_text(encoding="utf-8")
    nodes: list[ast.AST] = [_parse(src)]
    node: ast.AST | None = None
    for part in qualname.split("."):
        node = next(
            (
                n
                for parent in nodes
                for n in getattr(parent, "body", [])
                if isinstance(n, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and n.name == part
            ),
            None,
        )
        if node is None:
            raise PatchVersionError(f"{qualname} not found in {path}")
        nodes = [node]
    if node is None:  # not reached: split() gives at least one part, and a missing one raised above
        raise PatchVersionError(f"{qualname} not found in {path}")
    return ast.get_source_segment(src, node, padded=True) or ""


def fingerprint(target: str, path: Path | None = None) -> str:
    """sha256 (first 16 hex) of ``"pkg.module:Class.attr"``'s source, to detect upstream changes."""
    module_name, _, qualname = target.partition(":")
    source = static_source(path or module_file(module_name), qualname)
    return hashlib.sha256(source.encode()).hexdigest()[:16]


def changed_fingerprints(
    fingerprints: dict[str, str], paths: dict[str, Path] | None = None
) -> dict[str, tuple[str, str]]:
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


def require_module_unchanged(
    patch_name: str, fingerprints: dict[str, str], module_name: str, path: Path | None = None
) -> None:
    """``require_unchanged`` for the fingerprints of one module (``"<module>:<qualname>"`` keys), checked
    when that module is imported: ``path`` is its file, or it is located without importing it."""
    mine = {t: fp for t, fp in fingerprints.items() if t.startswith(module_name + ":")}
    require_unchanged(patch_name, mine, {module_name: path} if path else None)


# Attribute of a patched module: which patch functions it has had (wrapping twice would nest them).
_APPLIED = "_npu_rl_applied"
# What each patch has changed in this process: patch name -> "<module>:<function>" of every apply that
# ran (an installed patch whose modules are never imported has changed nothing; attest reports this).
APPLIED: dict[str, list[str]] = {}


def _module_path(module: Any) -> Path | None:
    file = getattr(module, "__file__", None)
    return Path(file) if file else None


class Patch:
    """One verl patch: for each verl release it supports, the source fingerprints of the verl code it
    replaces or relies on there (``supports``), and the functions that apply it to verl modules.

    A function registered with :meth:`applies_to` checks the fingerprints of its module (from the
    imported module's file) and of ``also`` (located without importing) before it changes anything,
    and patches a given module object once however often it is called; :meth:`wrap` is such a function
    for the common case, one function or method replaced by a wrapper of it.
    :meth:`install` hooks every such function to its module's import, checks the fingerprints of any
    other module they name when that module is imported, and the verl version when verl is.
    """

    def __init__(self, name: str, supports: dict[str, dict[str, str]], on_install: Callable[[], None] | None = None):
        self.name = name
        self.supports = supports
        # Run once the hooks are in place, before the process imports verl (the rehearsal's torchrun ranks
        # past the first leave there).
        self.on_install = on_install
        self.hooks: dict[str, list[Callable[[Any], None]]] = {}
        self._covered: set[str] = set()

    @property
    def fingerprints(self) -> dict[str, str]:
        """The fingerprints of the installed verl's release (refused when the patch does not support it)."""
        self.require_version()
        return self.supports[installed_verl_version()]

    def check(self, module_name: str, path: Path | None = None) -> None:
        """Refuse a verl module whose fingerprinted functions changed (``path``: its file, else found on sys.path)."""
        if not any(t.startswith(module_name + ":") for fps in self.supports.values() for t in fps):
            return  # nothing of it fingerprinted (torch's hooks): no need to import verl to ask its release
        require_module_unchanged(self.name, self.fingerprints, module_name, path)

    def require_version(self, _verl: Any = None) -> None:
        require_verl(self.name, self.supports)

    def applies_to(self, module_name: str, also: tuple[str, ...] = (), releases: tuple[str, ...] | None = None):
        """Decorator: ``fn(module)`` patches ``module_name``; the returned ``fn(module, check=True)`` first
        refuses changed sources (``check=False`` is for tests that hand in stand-in modules).

        ``releases``: the verl releases ``fn`` is for (default: every one the patch supports); under any
        other release it changes nothing, since that release's code is another's (attest lists what ran)."""

        def register(fn: Callable[[Any], None]):
            key = f"{self.name}:{fn.__name__}"

            @functools.wraps(fn)
            def apply(module: Any, check: bool = True) -> None:
                if releases is not None and installed_verl_version() not in releases:
                    return
                applied = getattr(module, _APPLIED, None)
                if applied is None:
                    applied = set()
                    setattr(module, _APPLIED, applied)
                if key in applied:
                    return
                if check:
                    self.check(module_name, _module_path(module))
                    for other in also:
                        self.check(other)
                fn(module)
                applied.add(key)
                APPLIED.setdefault(self.name, []).append(f"{module_name}:{fn.__name__}")

            self.hooks.setdefault(module_name, []).append(apply)
            self._covered.update((module_name, *also))
            return apply

        return register

    def wrap(
        self,
        module_name: str,
        qualname: str,
        also: tuple[str, ...] = (),
        name: str | None = None,
        releases: tuple[str, ...] | None = None,
    ):
        """Decorator: ``make(original) -> replacement`` wraps ``qualname`` (``"Class.method"`` or
        ``"function"``) of ``module_name``; the replacement takes the original's place with its name and
        attributes (``functools.wraps``: verl's ``@register`` dispatch attributes too).

        Returns the :meth:`applies_to` function (named ``name``, else after ``make``): it checks the
        fingerprints of the module, the target's among them, and of ``also`` before ``make`` sees the
        original, and wraps a module object once."""
        owner_path, _, attr = qualname.rpartition(".")

        def register(make: Callable[[Any], Any]):
            def replace(module: Any) -> None:
                owner = functools.reduce(getattr, owner_path.split("."), module) if owner_path else module
                original = getattr(owner, attr)
                setattr(owner, attr, functools.wraps(original)(make(original)))

            replace.__name__ = replace.__qualname__ = name or make.__name__
            replace.__module__, replace.__doc__ = make.__module__, make.__doc__
            return self.applies_to(module_name, also, releases)(replace)

        return register

    def wrap_each(
        self, make: Callable[[Any], Any], also: tuple[str, ...] = (), **targets: tuple[str, ...]
    ) -> tuple[Callable[..., None], ...]:
        """One wrapper for several targets (the FSDP and the Megatron worker class, or one verl release's
        trainer and another's): each keyword ``name=(module_name, qualname[, release])`` is :meth:`wrap` of that
        target (for that release only), named ``name``; returned in order."""
        return tuple(
            self.wrap(module, qualname, also=also, name=name, releases=tuple(release) or None)(make)
            for name, (module, qualname, *release) in targets.items()
        )

    def fingerprinted_modules(self) -> list[str]:
        # Every supported release's: a module is hooked before verl is imported, let alone known.
        return sorted({target.partition(":")[0] for fps in self.supports.values() for target in fps})

    def install(self) -> None:
        when_imported("verl", self.require_version)
        for module_name, fns in self.hooks.items():
            for fn in fns:
                when_imported(module_name, fn)
        for module_name in self.fingerprinted_modules():
            if module_name not in self._covered:
                when_imported(module_name, functools.partial(self._check_imported, module_name))
        if self.on_install is not None:
            self.on_install()

    def _check_imported(self, module_name: str, module: Any) -> None:
        self.check(module_name, _module_path(module))


def unsupported(names: Iterable[str], verl_version: str) -> list[str]:
    """The patches of ``names`` that have no fingerprints for ``verl_version`` (not ported to that release)."""
    return [n for n in names if verl_version not in importlib.import_module(PATCHES[n]).PATCH.supports]
