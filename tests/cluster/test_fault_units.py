"""The pieces of fault handling that need no cluster: the watchdog's allowance, what a stack dump
names, what the cross-node preflight compares, how a departure reads."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import psutil
import pytest
from test_ray_cluster import wait_until

from npu_rl.cluster import crossnode, stacks
from npu_rl.cluster.nodewatch import Departure
from npu_rl.launcher.watchdog import StepClock, Watchdog
from npu_rl.recipe.schema import WatchdogSpec


class Clock:
    def __init__(self):
        self.t = 1000.0

    def __call__(self):
        return self.t


def test_the_first_step_gets_its_own_allowance_then_the_floor_then_the_median():
    spec = WatchdogSpec(stall_factor=10, floor_s=60, first_step_s=180)
    now = Clock()
    clock = StepClock(spec, now)
    now.t += 179
    assert not clock.overdue()
    now.t += 2
    assert clock.overdue() and "first-step allowance 180s" in clock.describe()
    clock.step(1)
    assert clock.allowance() == 60  # one step seen: no step time yet
    for k in range(2, 6):
        now.t += 10
        clock.step(k)
        clock.step(k)  # a step's line seen twice is one step
    assert clock.allowance() == 100  # 10 x median 10 s
    now.t += 101
    assert clock.overdue()
    assert clock.describe().startswith("step 6 did not complete in 101s after step 5 (allowance 100s")


def test_a_resumed_run_counts_from_its_own_start():
    now = Clock()
    clock = StepClock(WatchdogSpec(first_step_s=50), now)
    now.t += 40
    clock.begin()  # the run's process starts after the preflight
    now.t += 40
    assert not clock.overdue()


def test_the_watchdog_trips_once_and_only_when_enabled():
    tripped = []
    now = Clock()
    clock = StepClock(WatchdogSpec(first_step_s=5), now)
    with Watchdog(clock, lambda: tripped.append(1), poll=0.01) as dog:
        now.t += 6
        time.sleep(0.3)
    dog.join()
    assert tripped == [1] and "no training step completed" in dog.tripped
    off = StepClock(WatchdogSpec(enabled=False, first_step_s=5), now)
    with Watchdog(off, lambda: tripped.append(2), poll=0.01):
        now.t += 60
        time.sleep(0.1)
    assert tripped == [1]


def _proc(pid, title, status="sleeping", stack="", error=None):
    return stacks.ProcessStack(pid, title, status, stack, error)


WAITING = 'Thread 1 (idle): "MainThread"\n    all_gather_into_tensor (torch/distributed/distributed_c10d.py:3800)\n'
COMPUTING = 'Thread 1 (active): "MainThread"\n    forward (transformers/models/qwen2/modeling_qwen2.py:300)\n'


def test_a_dump_names_stopped_silent_and_straying_processes():
    nodes = [
        stacks.NodeStacks(
            "10.0.0.1",
            "a" * 20,
            [_proc(11, "ray::WorkerDict", stack=WAITING), _proc(12, "ray::WorkerDict", stack=COMPUTING)],
        ),
        stacks.NodeStacks(
            "10.0.0.2",
            "b" * 20,
            [
                _proc(21, "ray::WorkerDict", "stopped", WAITING),
                # Its stack unread (py-spy found no interpreter state once in CI): still named as stopped.
                _proc(
                    22, "ray::WorkerDict.update_actor", "stopped", error="Error: Failed to find a python interpreter"
                ),
            ],
        ),
        stacks.NodeStacks("10.0.0.3", "c" * 20, error="did not answer (GetTimeoutError)"),
    ]
    named = stacks.suspects([_proc(5, "python", error="py-spy did not answer within 20s")], nodes)
    assert any("node 10.0.0.3" in n and "did not answer" in n for n in named)
    assert any(n.startswith("pid 21 ray::WorkerDict on 10.0.0.2 is stopped") for n in named)
    assert (
        "pid 22 ray::WorkerDict.update_actor on 10.0.0.2 is stopped: Error: Failed to find a python interpreter"
        in named
    )
    assert any(n.startswith("pid 12 ") and "not in the collective" in n for n in named)
    assert any(n.startswith("pid 5 ") and "did not answer" in n for n in named)
    assert not any(n.startswith("pid 11 ") for n in named)


def test_py_spy_reads_a_stopped_process_without_waiting_for_it():
    proc = subprocess.Popen([sys.executable, "-c", "import time\ndef parked():\n    time.sleep(600)\nparked()"])
    try:
        time.sleep(0.5)
        os.kill(proc.pid, signal.SIGSTOP)
        wait_until(lambda: psutil.Process(proc.pid).status() == psutil.STATUS_STOPPED, 10, "the stop")
        (dump,) = stacks.local_stacks([proc.pid], timeout=20)
        assert dump.status == "stopped" and dump.error is None and "parked" in dump.stack, dump
    finally:
        proc.kill()
        proc.wait()


def test_a_gone_process_is_reported_not_waited_for():
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    (dump,) = stacks.local_stacks([proc.pid], timeout=5)
    assert dump.error and dump.status == "gone"


def _facts(ip, node_id, env, **versions):
    return crossnode.NodeFacts(ip, node_id, {"verl": "0.6.1", "torch": "2.5.1", **versions}, env)


def test_nodes_that_differ_in_a_variable_or_a_version_are_named_with_their_values():
    facts = [
        _facts("10.0.0.1", "aaaaaaaa1", {"HCCL_CONNECT_TIMEOUT": "360"}),
        _facts("10.0.0.2", "bbbbbbbb2", {"HCCL_CONNECT_TIMEOUT": "360", "HCCL_EXEC_TIMEOUT": "17"}, torch="2.6.0"),
    ]
    found = crossnode.mismatches(facts)
    assert found == [
        "torch: '2.5.1' on 10.0.0.1 (aaaaaaaa); '2.6.0' on 10.0.0.2 (bbbbbbbb)",
        "HCCL_EXEC_TIMEOUT: unset on 10.0.0.1 (aaaaaaaa); '17' on 10.0.0.2 (bbbbbbbb)",
    ]
    assert crossnode.mismatches(facts[:1] * 2) == []


def test_only_the_variables_that_must_agree_are_collected(monkeypatch):
    monkeypatch.setenv("HCCL_EXEC_TIMEOUT", "360")
    monkeypatch.setenv("HCCL_IF_IP", "10.0.0.9")  # the node's own address
    monkeypatch.setenv("GLOO_SOCKET_IFNAME", "eth0")
    monkeypatch.setenv("NPU_RL_RAY_ARGS", "--node-manager-port 1")
    monkeypatch.setenv("NPU_RL_PATCHES", "cpu")
    monkeypatch.setenv("HOME", "/root")
    facts = crossnode.local_facts("10.0.0.9", "n", exclude=frozenset({"NPU_RL_PATCHES"}))
    # Each node names its own NIC: only whether the socket variables are set is compared.
    assert facts.env == {"HCCL_EXEC_TIMEOUT": "360", "GLOO_SOCKET_IFNAME": "(set)"}
    assert facts.versions["verl"] and "CANN" in facts.versions and "driver" in facts.versions


def test_a_departure_reads_as_one_line():
    d = Departure("10.0.0.2", "f" * 56, 3, "Ray: health check failed")
    assert d.line() == f"node 10.0.0.2 ({'f' * 56}) left the cluster at step 3; Ray: health check failed"
    assert "before the first step" in Departure("10.0.0.2", "x", None, "gone").line()


def test_a_step_that_validates_or_saves_gets_the_checkpoint_allowance():
    now = Clock()
    clock = StepClock(WatchdogSpec(stall_factor=10, floor_s=60, checkpoint_s=500), now, heavy_every=(50, 10))
    for k in (7, 8):
        now.t += 10
        clock.step(k)
    assert clock.allowance() == 100  # step 9: an ordinary one
    now.t += 10
    clock.step(9)
    assert clock.allowance() == 600 and "+ 500s for a step that validates or saves" in clock.describe()


def test_the_watchdog_needs_verls_console_lines():
    from npu_rl.recipe import load_recipe

    with pytest.raises(Exception, match="watchdog.enabled needs 'console'"):
        load_recipe("tiny_math_cpu", {"logging.backends": ["tensorboard"]})
    assert load_recipe("tiny_math_cpu", {"logging.backends": ["tensorboard"], "watchdog.enabled": False})


def test_the_first_departure_stops_the_run_once(monkeypatch):
    # verl 0.9 does not stop when a node goes (its request to the lost node's rollout server waits on): the
    # node watch stops the run itself, once, and says so (tests/cluster/test_multinode_line.py runs it).
    import subprocess
    import sys

    import ray

    from npu_rl.cluster import nodewatch

    node = {"NodeID": "n" * 56, "NodeManagerAddress": "10.0.0.2", "NodeManagerPort": 1, "Alive": True}
    table = [dict(node)]
    monkeypatch.setattr(ray, "nodes", lambda: table)
    watch = nodewatch.NodeWatch(lambda: 2)
    watch._members = {node["NodeID"]: node}
    monkeypatch.setattr(nodewatch, "port_open", lambda *a, **k: True)
    run = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], start_new_session=True)
    stops = []
    real_stop = nodewatch.proctree.stop
    monkeypatch.setattr(nodewatch.proctree, "stop", lambda p, grace: stops.append(p) or real_stop(p, grace=grace))
    watch.ends(run)
    watch.check()
    assert run.poll() is None and not watch.ended  # alive and answering: nothing stopped
    table[0]["Alive"] = False
    watch.check()
    assert watch.ended and run.wait(timeout=10) != 0 and stops == [run]
    assert watch.departures()[0].line().startswith(f"node 10.0.0.2 ({'n' * 56}) left the cluster at step 2; Ray:")
    watch.check()
    assert stops == [run]  # once
