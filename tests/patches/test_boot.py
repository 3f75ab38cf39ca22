"""The boot hook and the patch helper every patch is built on (guard.Patch)."""

from __future__ import annotations

import os
import subprocess
import sys
import types

import pytest

from npu_rl.patches import BOOT_DIR, cpu_platform, env_for, guard


def _python(code: str, env_extra: dict[str, str]) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("NPU_RL_PATCHES")}
    env.update(env_extra)
    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)


def test_installing_the_cpu_patch_imports_neither_torch_nor_verl():
    code = (
        "import sys; print('torch' in sys.modules, 'verl' in sys.modules)\n"
        "import torch; print(torch.cpu.memory_allocated(), torch.cpu.empty_cache())\n"
    )
    proc = _python(code, env_for(["cpu"]))
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.split() == ["False", "False", "0", "None"]  # patched once torch is imported


def test_the_interpreters_own_sitecustomize_still_runs(tmp_path):
    other = tmp_path / "site"
    other.mkdir()
    (other / "sitecustomize.py").write_text("import os\nos.environ['CHAINED'] = __name__\n")
    env = env_for(["cpu"])
    env["PYTHONPATH"] = os.pathsep.join([env["PYTHONPATH"], str(other)])
    proc = _python("import os, sitecustomize; print(os.environ.get('CHAINED'), sitecustomize.__file__)", env)
    assert proc.returncode == 0, proc.stderr[-2000:]
    chained, ours = proc.stdout.split()
    assert chained == "sitecustomize" and ours == str(BOOT_DIR / "sitecustomize.py")


def test_a_patch_that_cannot_install_is_reported_and_strict_mode_exits_2():
    env = {**env_for(["cpu"]), "NPU_RL_PATCHES": "no_such_patch"}
    lenient = _python("print('ran')", env)
    assert lenient.returncode == 0 and lenient.stdout.strip() == "ran"
    assert lenient.stderr.strip().startswith("npu-rl: could not install verl patches: unknown npu-rl patch")
    strict = _python("print('ran')", {**env, "NPU_RL_PATCHES_STRICT": "1"})
    assert strict.returncode == 2 and strict.stdout == ""
    assert strict.stderr.strip().startswith("npu-rl: error: could not install verl patches")


def test_a_patch_function_refuses_a_changed_module_before_touching_it(tmp_path):
    original = guard.module_file("verl.utils.device")
    copy = tmp_path / "device.py"
    copy.write_text(original.read_text().replace('return "hccl"', 'return "hccl2"'))
    stock = lambda: "nccl"  # noqa: E731
    changed = types.SimpleNamespace(__file__=str(copy), get_nccl_backend=stock)
    with pytest.raises(guard.PatchVersionError, match="get_nccl_backend changed"):
        cpu_platform._patch_device(changed)
    assert changed.get_nccl_backend is stock

    unchanged = types.SimpleNamespace(__file__=str(original), get_nccl_backend=stock)
    cpu_platform._patch_device(unchanged)
    patched = unchanged.get_nccl_backend
    cpu_platform._patch_device(unchanged)  # a second application does not wrap again
    assert patched() == "gloo" and unchanged.get_nccl_backend is patched


def test_a_fingerprinted_module_no_function_patches_is_checked_when_imported(tmp_path, monkeypatch):
    (tmp_path / "npu_rl_guard_probe.py").write_text("def relied_on():\n    return 1\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    patch = guard.Patch("probe", {guard.installed_verl_version(): {"npu_rl_guard_probe:relied_on": "0" * 16}})
    patch.install()
    with pytest.raises(guard.PatchVersionError, match="relied_on changed"):
        import npu_rl_guard_probe  # noqa: F401
    assert "npu_rl_guard_probe" not in sys.modules  # the failed import left nothing half-patched
