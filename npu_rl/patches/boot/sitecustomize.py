# Put on PYTHONPATH by the npu-rl launcher so that every Python process of a run
# (the verl driver, Ray's raylet-spawned workers) applies the same verl patches.
# It only registers import hooks; verl and torch are not imported here.
import os as _os

if _os.environ.get("NPU_RL_PATCHES"):
    try:
        from npu_rl.patches import install_from_env as _install

        _install()
    except Exception as _err:  # never break an unrelated Python process
        import sys as _sys

        print(f"npu-rl: could not install verl patches: {_err}", file=_sys.stderr)
        if _os.environ.get("NPU_RL_PATCHES_STRICT", "1") == "1":
            raise
