"""Apply patches to verl modules right after they are imported, in any process.

Patches must land before other verl modules copy names out of the patched ones
(``from verl.utils.device import get_torch_device``), and in every process Ray
starts. A post-import hook installed from ``sitecustomize`` (see boot/) does both
without importing verl or torch into processes that never use them.
"""

from __future__ import annotations

import importlib.abc
import importlib.util
import sys
import threading
from collections.abc import Callable

PatchFn = Callable[[object], None]

_pending: dict[str, list[PatchFn]] = {}
_lock = threading.RLock()


class _PostImportFinder(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname, path=None, target=None):
        if fullname not in _pending:
            return None
        # Let the normal finders locate the module, then wrap its loader.
        sys.meta_path.remove(self)
        try:
            spec = importlib.util.find_spec(fullname)
        finally:
            sys.meta_path.insert(0, self)
        if spec is None or spec.loader is None:
            return None
        loader = spec.loader
        original_exec = loader.exec_module

        def exec_module(module, _orig=original_exec, _name=fullname):
            _orig(module)
            _run(_name, module)

        loader.exec_module = exec_module  # type: ignore[method-assign]  # wrap this one loader instance
        return spec


_finder = _PostImportFinder()


def _run(name: str, module: object) -> None:
    with _lock:
        patches = _pending.pop(name, [])
    for fn in patches:
        fn(module)


def when_imported(module_name: str, fn: PatchFn) -> None:
    """Call ``fn(module)`` once ``module_name`` is imported (now, if it already is)."""
    with _lock:
        if _finder not in sys.meta_path:
            sys.meta_path.insert(0, _finder)
        module = sys.modules.get(module_name)
        if module is None:
            _pending.setdefault(module_name, []).append(fn)
            return
    fn(module)
