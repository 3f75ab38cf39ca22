"""Workers say which patches they installed; one that lacks a selected patch is named."""

from __future__ import annotations

import os
from types import SimpleNamespace

import pytest

from npu_rl.launcher.ray_local import LocalRayHead
from npu_rl.patches import env_for
from npu_rl.patches.attest import attest

pytestmark = pytest.mark.timeout(300)


def test_a_worker_started_without_the_runs_runtime_env_is_named(monkeypatch):
    import ray

    selected = ["file_logger", "attest"]
    with LocalRayHead(port=None, num_cpus=2, npus=0, env={}) as head:
        monkeypatch.setenv("NPU_RL_PATCHES", ",".join(selected))  # what the trainer's process was asked for
        ray.init(address=head.address, logging_level="ERROR", log_to_driver=False)
        try:

            @ray.remote(num_cpus=0)
            class Worker:
                def pid(self):
                    return os.getpid()

            patched = Worker.options(runtime_env={"env_vars": env_for(selected)}).remote()
            bare = Worker.options(runtime_env={"env_vars": {"NPU_RL_PATCHES": ""}}).remote()
            trainer = SimpleNamespace(
                actor_rollout_wg=SimpleNamespace(workers=[patched, bare]),
                ref_policy_wg=SimpleNamespace(workers=[patched]),
            )  # shared actors count once
            verdict = attest(trainer)
            bare_pid = ray.get(bare.pid.remote())
        finally:
            ray.shutdown()
    assert len(verdict["workers"]) == 2
    by_pid = {w["pid"]: w for w in verdict["workers"]}
    assert by_pid[bare_pid]["patches"] == []
    (good,) = [w for pid, w in by_pid.items() if pid != bare_pid]
    assert good["patches"] == ["file_logger", "attest"]
    assert verdict["error"].startswith("patch(es) attest, file_logger not active in 1 of 2 Ray workers")
    assert f"pid {bare_pid}" in verdict["error"]


def test_a_patch_installed_everywhere_that_changed_nothing_is_named(monkeypatch):
    import ray

    selected = ["file_logger", "attest"]
    with LocalRayHead(port=None, num_cpus=2, npus=0, env={}) as head:
        monkeypatch.setenv("NPU_RL_PATCHES", ",".join(selected))
        ray.init(address=head.address, logging_level="ERROR", log_to_driver=False)
        try:

            @ray.remote(num_cpus=0)
            class Worker:
                def use_tracking(self):
                    import verl.utils.tracking  # noqa: F401 - file_logger's module: its patch applies

            idle = Worker.options(runtime_env={"env_vars": env_for(selected)}).remote()
            idle_verdict = attest(SimpleNamespace(actor_rollout_wg=SimpleNamespace(workers=[idle])))
            busy = Worker.options(runtime_env={"env_vars": env_for(selected)}).remote()
            ray.get(busy.use_tracking.remote())
            busy_verdict = attest(SimpleNamespace(actor_rollout_wg=SimpleNamespace(workers=[busy])))
        finally:
            ray.shutdown()
    # Nothing imported verl's tracking or trainer: both patches are hooks that never fired.
    assert idle_verdict["workers"][0]["patches"] == selected and idle_verdict["workers"][0]["applied"] == {}
    assert idle_verdict["error"].startswith("patch(es) file_logger, attest installed but applied to none")
    (worker,) = busy_verdict["workers"]
    assert worker["applied"] == {"file_logger": ["verl.utils.tracking:_patch"]}
    assert busy_verdict["error"].startswith("patch(es) attest installed but applied to none"), busy_verdict
