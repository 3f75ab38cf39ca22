"""The 2-node CPU cluster runs shared by the multi-node tests: the tiny recipe on 2 nodes x 1 worker
process, started from the rendered Volcano pods (tests/cluster/pods.py)."""

from __future__ import annotations

import shutil

import pytest
from pods import prepared_pods


@pytest.fixture(scope="session")
def uninterrupted(tiny_model):
    """The reference: the job's pods run once, to the end."""
    pods = prepared_pods("two_nodes", tiny_model)
    try:
        pods.start()
        # Ray's sockets while it trains (the last worker processes start with the first step)
        pods.wait_for_step(1)
        listening = {task: pods.listening(task) for task in ("head", "worker")}
        codes = pods.wait(timeout=900)
        yield {
            "pods": pods,
            "codes": codes,
            "head_log": pods.log("head"),
            "worker_log": pods.log("worker"),
            "left": pods.left(),
            "listening": listening,
        }
    finally:
        pods.cleanup()
        shutil.rmtree(pods.work, ignore_errors=True)
