"""The reshard patch on verl 0.9.0: one weight sync through verl's own engine worker, megatron engine, rollout
adapter and vLLM worker extension, on gloo CPU ranks in the cann9.1-verl0.9 line's CPU environment (its verl
0.9.0 and megatron-core 0.16.0; tests/reshard/verl09_sync.py says what stands in for what).

Each case's rollout parameters start as NaN: a sync leaves every one bit-equal to the rollout shard the plan
cuts from the same full weights, or the case fails. The faults: a disaggregated rollout (a checkpoint engine
sends to replicas elsewhere, which the rank-paired plan does not describe) and a rollout parameter the plan
has no value for each stop the sync with one line instead of leaving a stale or unwritten weight; a name the
rollout model lacks fails its bucket on the rollout side, and the sync still ends (verl's sender waits for
each bucket's acknowledgement with no timeout) and raises it.

The rollout's names are vLLM 0.23's: its parameters fuse some of the planner's (Qwen3's q, k and v in
``qkv_proj``, DeepSeek's MLA down projections in ``fused_qkv_a_proj``), which the harness's stand-in of the
vLLM model takes from ``ROW_FUSED`` and this test checks against vLLM 0.23's own load_weights.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from needs import missing_setup

from npu_rl.paths import project_root
from npu_rl.reshard.verl_sync import ROW_FUSED

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

LINE = "cann9.1-verl0.9"
SCRIPT = Path(__file__).with_name("verl09_sync.py")


CLEAN = ["deepseek_v3", "qwen3_moe", "qwen3_moe_8"]
FAULTS = ["qwen3_moe:disaggregated", "deepseek_v3:unplanned_parameter", "deepseek_v3:renamed_parameter"]


@pytest.fixture(scope="module")
def syncs() -> dict[str, list[dict]]:
    """Every case's results by rank, from one process (verl 0.9 and vLLM are imported once)."""
    python = project_root() / f".venv-{LINE}" / "bin" / "python"
    if not python.is_file():
        missing_setup(f"the {LINE} CPU environment", f"make venv STACK={LINE}")
    out = subprocess.run(
        [str(python), str(SCRIPT), *CLEAN, *FAULTS], capture_output=True, text=True, timeout=500, cwd=project_root()
    )
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("case", CLEAN)
def test_verl_0_9_sync_lands_every_rollout_shard_bit_exact(case, syncs):
    for rank, result in enumerate(syncs[case]):
        assert "error" not in result, f"rank {rank}: {result}"
        assert result["params"] > 0 and result["bad"] == [], f"rank {rank}: {result['bad'][:5]}"
        # verl's own bookkeeping after a full sync ran (engine_workers.py update_weights at v0.9.0).
        assert result["base_sync_done"] is True


def test_the_fused_rollout_parameters_are_vllm_0_23s(syncs):
    # vLLM's stacked-parameter mappings ((fused, part, shard id) in its models' load_weights), in vLLM's order.
    vllm = syncs["vllm_fusions"]
    for fused, parts in ROW_FUSED.items():
        name = fused.split(".")[-2]
        assert vllm.get(name) == [part.split(".")[-2] for part in parts], (fused, vllm)


def test_a_disaggregated_rollout_is_refused_before_anything_is_sent(syncs):
    for result in syncs["qwen3_moe:disaggregated"]:
        assert result["error"].startswith("PatchVersionError: reshard syncs colocated training and rollout only")
        assert "'nccl'" in result["error"] and "reshard.enabled false" in result["error"]


def test_a_rollout_parameter_without_a_planned_value_fails_the_sync(syncs):
    # Without the patch's check the sync ends well and the parameter keeps its start-up value (seen so).
    for result in syncs["deepseek_v3:unplanned_parameter"]:
        assert result["error"] == (
            "ReshardLayoutError: reshard: 1 rollout parameter(s) got no value from the sync, "
            "e.g. model.layers.0.mlp.extra.weight"
        )


def test_a_name_the_rollout_model_lacks_fails_the_sync_after_its_last_bucket(syncs):
    # Raised on the rollout side in one bucket, kept until the transport's last acknowledgement: the trainer
    # gets the error instead of waiting on a bucket nobody acknowledges (the harness's 240 s limit).
    for result in syncs["deepseek_v3:renamed_parameter"]:
        assert result["error"] == (
            "ReshardLayoutError: reshard: the rollout model has no parameter 'model.layers.1.self_attn.o_proj.weight'"
        ), result
