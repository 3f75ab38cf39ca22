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
        codes = pods.wait(timeout=900)
        yield {
            "pods": pods,
            "codes": codes,
            "head_log": pods.log("head"),
            "worker_log": pods.log("worker"),
            "left": pods.left(),
        }
    finally:
        pods.cleanup()
        shutil.rmtree(pods.work, ignore_errors=True)
