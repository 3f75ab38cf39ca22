"""The tiny recipe trained on a 2-node CPU Ray cluster, run exactly as the rendered Volcano pods run it
(tests/cluster/pods.py says what a pod gets here that Kubernetes would give it)."""

from __future__ import annotations

import json
import signal

import pytest
from console_steps import shown_steps
from pods import STEPS

from npu_rl import run_files

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(900)]


@pytest.fixture(scope="module")
def pods(uninterrupted):
    p = uninterrupted["pods"]
    return {
        **uninterrupted,
        "recipe": p.recipe,
        "ws": p.ws,
        "head_rc": uninterrupted["codes"]["head"],
        "worker_rc": uninterrupted["codes"]["worker"],
        "head_args": p.head_args,
    }


def _in_ws(pods, fn):
    return pods["pods"].in_ws(fn)


def test_the_rendered_head_command_trains_on_two_nodes(pods):
    assert pods["head_args"][:3] == ["npu-rl", "ray", "head"] and "train" in pods["head_args"]
    assert pods["head_rc"] == 0, pods["head_log"][-4000:]
    assert "cluster ready: 2 nodes" in pods["head_log"]
    assert STEPS in shown_steps(pods["head_log"])
    assert _in_ws(pods, lambda: run_files.latest_step(pods["recipe"])) == STEPS


def test_patches_are_active_in_the_workers_of_both_nodes(pods):
    verdict = json.loads(_in_ws(pods, lambda: (run_files.log_root(pods["recipe"]) / "workers.json").read_text()))
    assert verdict["error"] is None
    assert len(verdict["workers"]) == 2 and len(verdict["nodes"]) == 2, verdict
    for w in verdict["workers"]:
        assert {"cpu", "old_log_prob", "attest", "batch_fingerprint"} <= set(w["patches"]), w
        assert {"cpu", "old_log_prob"} <= set(w["applied"]), w  # verl's worker code, changed there
    # verl's trainer code, changed in the TaskRunner
    assert {"attest", "batch_fingerprint", "file_logger", "old_log_prob", "reward_parts"} <= set(
        verdict["trainer"]["applied"]
    )


def test_old_log_prob_pass_is_skipped_in_the_remote_workers(pods):
    metrics = _in_ws(pods, lambda: run_files.metrics_file(pods["recipe"], 0)).read_text().splitlines()
    rows = [json.loads(line) for line in metrics]
    assert rows and all("timing_s/old_log_prob" not in r["data"] for r in rows), rows[:1]
    assert all("timing_s/update_actor" in r["data"] for r in rows)


def test_after_the_head_exits_no_process_of_the_cluster_is_left(pods):
    # The head's exit completes the job; Volcano deletes the worker pod, whose command stops its Ray node.
    assert pods["worker_rc"] == 128 + signal.SIGTERM
    assert "SIGTERM; stopping Ray" in pods["worker_log"]
    assert pods["left"] == []
