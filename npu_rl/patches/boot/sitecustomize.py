# Put on PYTHONPATH by the npu-rl launcher so that every Python process of a run
# (the verl driver, Ray's raylet-spawned workers) applies the same verl patches.
# It only registers import hooks; verl and torch are not imported here.
#
# It never breaks a Python process: a patch that cannot be installed is reported on
# stderr and the process goes on without it; in a training run the `attest` patch then
# stops the run before training, naming the worker that lacks it. NPU_RL_PATCHES_STRICT=1
# makes such a process exit (code 2) instead, where a failure must be seen at once.
#
# Being first on sys.path, this module hides the interpreter's own sitecustomize
# (Debian's /usr/lib/python3.X/sitecustomize.py, a virtualenv's): that one is run too.
import importlib.machinery as _machinery
import importlib.util as _util
import os as _os
import sys as _sys


def _install_patches() -> None:
    try:
        from npu_rl.patches import install_from_env  # lazy: only with NPU_RL_PATCHES

        install_from_env()
    except Exception as err:
        strict = _os.environ.get("NPU_RL_PATCHES_STRICT", "0") == "1"
        print(f"npu-rl: {'error: ' if strict else ''}could not install verl patches: {err}", file=_sys.stderr)
        if strict:
            # SystemExit while site imports us is a "Fatal Python error"; leave with the CLI's code.
            _sys.stderr.flush()
            _os._exit(2)


def _chain() -> None:
    """Run the next ``sitecustomize`` on sys.path after this one, as Python would have without us."""
    here = _os.path.dirname(_os.path.abspath(__file__))
    entries = [_os.path.abspath(p or _os.getcwd()) for p in _sys.path]
    after = entries[entries.index(here) + 1 :] if here in entries else [p for p in entries if p != here]
    spec = _machinery.PathFinder.find_spec("sitecustomize", after)
    if spec is None or spec.loader is None:
        return
    module = _util.module_from_spec(spec)
    spec.loader.exec_module(module)


try:
    _chain()
except Exception as _err:  # as site.py treats a failing sitecustomize: reported, never fatal
    print(f"npu-rl: the interpreter's sitecustomize failed: {_err}", file=_sys.stderr)
if _os.environ.get("NPU_RL_PATCHES"):
    _install_patches()
