"""The reshard patch on verl 0.9.0: one weight sync through verl's own engine worker, megatron engine, rollout
adapter and vLLM worker extension, on gloo CPU ranks in the cann9.1-verl0.9 line's CPU environment (its verl
0.9.0 and megatron-core 0.16.0; tests/reshard/verl09_sync.py says what stands in for what).

Each case's rollout parameters start as NaN: a sync leaves every one bit-equal to the rollout shard the plan
cuts from the same full weights, or the case fails. The faults: a disaggregated rollout (a checkpoint engine
sends to replicas elsewhere, which the rank-paired plan does not describe) and a rollout parameter the plan
has no value for each stop the sync with one line instead of leaving a stale or unwritten weight.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from needs import missing_setup

from npu_rl.paths import project_root

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

LINE = "cann9.1-verl0.9"
SCRIPT = Path(__file__).with_name("verl09_sync.py")


CLEAN = ["deepseek_v3", "qwen3_moe", "qwen3_moe_8"]
FAULTS = ["qwen3_moe:disaggregated", "deepseek_v3:unplanned_parameter"]


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
