"""The SFT rehearsal's own checks, without verl: the batch layout it reads off the world torchrun gives, and
the other ranks' records the launcher requires (the rehearsal itself: tests/launch/test_rehearsal_on_lines.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from npu_rl.launcher.rehearsal import _last_error, _other_ranks
from npu_rl.launcher.spec import build_launch
from npu_rl.patches.rehearse import RANKS_LEAVE_ENV, REPORT_ENV, rank_file, sft_layout
from npu_rl.recipe import load_recipe


def test_the_retool_layout_is_upstreams():
    # 16 dies, sequence parallel 4: 4 data-parallel groups of 16 rows, two micro-batches of 8.
    assert sft_layout(rows=1984, world=16, sp=4, batch=64, micro=8, dynamic=False) == (
        None,
        {"world": 16, "sp": 4, "dp": 4, "per_dp": 16, "steps_per_epoch": 31},
    )


@pytest.mark.parametrize(
    ("kwargs", "why"),
    [
        ({"world": 6, "sp": 4}, "no multiple of ulysses_sequence_parallel_size 4"),
        ({"batch": 66}, "does not divide over 4 data-parallel groups"),
        ({"batch": 48}, "12 rows per data-parallel group are no multiple of the micro-batch 8"),
        ({"rows": 63}, "63 training rows make no batch of 64"),
    ],
)
def test_a_layout_verl_cannot_train_is_named(kwargs, why):
    args = {"rows": 1984, "world": 16, "sp": 4, "batch": 64, "micro": 8, "dynamic": False, **kwargs}
    error, _ = sft_layout(**args)
    assert error is not None and why in error


def test_packing_by_tokens_needs_no_whole_micro_batches():
    assert sft_layout(rows=1984, world=16, sp=4, batch=48, micro=8, dynamic=True)[0] is None


def test_a_rank_that_never_started_or_lacks_a_patch_fails_the_rehearsal(tmp_path, monkeypatch):
    monkeypatch.setenv("NPU_RL_WORKSPACE", str(tmp_path))
    recipe = load_recipe("qwen3_1_7b_code_toolcall_sft_a2")
    spec = build_launch(recipe, rehearse=True)
    assert spec.rehearsal_report is not None and "rehearse" in spec.patches
    spec.rehearsal_report.parent.mkdir(parents=True)
    for rank in range(1, 8):
        patches = sorted(spec.patches) if rank != 3 else ["rehearse"]
        if rank != 5:
            rank_file(spec.rehearsal_report, str(rank)).write_text(
                json.dumps({"rank": rank, "world_size": 8, "patches": patches})
            )
    report = {"complete": True, "checked": []}
    _other_ranks(recipe, spec, report)
    assert not report["complete"]
    assert "rank 3: " in report["error"] and "rank 5: never started" in report["error"]
    assert "rank 4" not in report["error"]


@pytest.mark.parametrize("sft_rehearsal", [True, False])
def test_only_an_sft_rehearsals_ranks_past_the_first_leave(sft_rehearsal, tmp_path):
    """A GRPO rehearsal's report variable reaches its Ray workers too: they must not leave."""
    report = tmp_path / "rehearsal.json"
    env = {**os.environ, "TORCHELASTIC_RUN_ID": "x", "RANK": "3", "WORLD_SIZE": "8", REPORT_ENV: str(report)}
    if sft_rehearsal:
        env[RANKS_LEAVE_ENV] = "1"
    code = "from npu_rl.patches.rehearse import _other_ranks_leave; _other_ranks_leave(); print('stayed')"
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert ("stayed" in out.stdout) is not sft_rehearsal
    assert rank_file(report, "3").is_file() is sft_rehearsal


def test_the_error_line_is_found_under_a_ray_actors_or_a_torchrun_ranks_prefix():
    log = "\n".join(
        [
            "(TaskRunner pid=41) ValueError: the first",
            "[rank0]: RuntimeError: npu-rl rehearse: the last",
            "[rank0]:   File 'x.py', line 1, in <module>",
        ]
    )
    assert _last_error(log) == "RuntimeError: npu-rl rehearse: the last"
    assert _last_error(log.rsplit("\n", 2)[0]) == "ValueError: the first"
