"""`python -m npu_rl.demo --rollout vllm` (`make demo ROLLOUT=vllm`) where vLLM's CPU build is not installed:
one line and exit 2 before anything is built (the cpu-vllm image runs it: tests/containers/test_vllm_rollout.py)."""

from __future__ import annotations

import json
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


def test_a_workspace_model_with_other_heads_is_made_again(tmp_path):
    # A workspace of an earlier release holds the vLLM model with one shared key/value head, which learns
    # less: the demo makes its model again rather than reuse it.
    from npu_rl.demo import VLLM_MODEL_ARGS, _same_heads

    (tmp_path / "config.json").write_text(json.dumps({"num_attention_heads": 2, "num_key_value_heads": 1}))
    assert not _same_heads(tmp_path, VLLM_MODEL_ARGS)
    (tmp_path / "config.json").write_text(json.dumps({"num_attention_heads": 2, "num_key_value_heads": 2}))
    assert _same_heads(tmp_path, VLLM_MODEL_ARGS)
    assert _same_heads(tmp_path, []) and not _same_heads(tmp_path / "none", [])
