"""Two jobs whose hostNetwork pods share one node: one address (127.0.0.1), one /tmp, and nothing passed to
the pods but what the rendered Volcano manifest gives them (no NPU_RL_RAY_ARGS). Ray's ports, temp dirs
and token are the product's own (npu_rl.cluster.rayports, npu_rl.cluster.rayauth); left to Ray's defaults,
the second raylet on the node dies binding the first one's node manager port."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from console_steps import shown_steps
from pods import prepared_pods

from npu_rl import run_files

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(1800)]

STEPS = 2
SETS = {"algorithm.total_training_steps": STEPS, "checkpoint.save_freq": STEPS}


def _job(name: str, tiny_model):
    return prepared_pods(name, tiny_model, one_host=True, sets=SETS)


def _run(*jobs) -> list[dict]:
    for job in jobs:
        job.start()
    out = []
    for job in jobs:
        codes = job.wait(timeout=900)
        out.append(
            {
                "codes": codes,
                "head": job.log("head"),
                "worker": job.log("worker"),
                "left": job.left(),
                "steps": job.in_ws(lambda job=job: run_files.saved_steps(job.recipe)),
            }
        )
    return out


@pytest.fixture(scope="module")
def shared(tiny_model):
    a, b = _job("host_a", tiny_model), _job("host_b", tiny_model)
    try:
        # A job started again on its node (Volcano's restart) is the fault chain's, six starts whose pods
        # share this /tmp and its port claims too (tests/cluster/test_cluster_faults.py).
        yield {"beside": _run(a, b), "jobs": (a, b)}
    finally:
        for job in (a, b):
            job.cleanup()
            shutil.rmtree(job.work, ignore_errors=True)


def _trained(run: dict) -> None:
    assert run["codes"]["head"] == 0, run["head"][-4000:]
    assert "cluster ready: 2 nodes" in run["head"], run["head"][-3000:]
    assert STEPS in shown_steps(run["head"])
    assert run["steps"] == [STEPS]
    assert run["left"] == []


def test_two_jobs_on_one_node_train_side_by_side(shared):
    for run in shared["beside"]:
        _trained(run)


def test_no_pod_was_given_ray_options_of_the_harness(shared):
    for job in shared["jobs"]:
        for task in ("head", "worker"):
            text = job.log(task)
            assert "NPU_RL_RAY_ARGS" not in text
            (start,) = [ln for ln in text.splitlines() if "running: " in ln and "ray start " in ln][:1] or [text[:500]]
            # the node's own temp dir and ports, chosen by npu-rl ray
            assert "--temp-dir=/tmp/npu-rl-ray-" in start and "--node-manager-port=" in start, start


def test_the_token_appears_in_no_log(shared):
    for job in shared["jobs"]:
        token = (job.secret / "token").read_text().strip()
        logs = [job.work / f"{t}-{i}.log" for t in ("head", "worker") for i in range(1, job.runs + 1)]
        logs += [p for p in Path(job.ws).rglob("*") if p.is_file() and p.suffix in (".log", ".jsonl", ".json")]
        assert logs
        for path in logs:
            assert token not in path.read_text(errors="replace"), path
