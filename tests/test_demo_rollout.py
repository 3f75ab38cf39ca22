"""`python -m npu_rl.demo --rollout vllm` (`make demo ROLLOUT=vllm`) where vLLM's CPU build is not installed:
one line and exit 2 before anything is built (the cpu-vllm image runs it: tests/containers/test_vllm_rollout.py)."""

from __future__ import annotations

import subprocess
import sys

from npu_rl.platform.doctor import cpu_vllm_missing


def test_the_vllm_demo_refuses_an_environment_without_vllms_cpu_build(tmp_path):
    assert cpu_vllm_missing(), "this environment has vLLM's CPU build: the test needs one without"
    workdir = tmp_path / "demo"
    out = subprocess.run(
        [sys.executable, "-m", "npu_rl.demo", "--rollout", "vllm", "--workdir", str(workdir)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 2, out.stderr
    assert out.stdout == ""
    assert out.stderr.splitlines() == [
        f"npu-rl: error: {cpu_vllm_missing()}; fix: run in the cpu-vllm image (`make image-cpu-vllm`), "
        "or sample with --set rollout.name=hf"
    ]
    assert not workdir.exists()
