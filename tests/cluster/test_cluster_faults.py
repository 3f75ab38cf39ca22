"""Faults of a 2-node CPU job run from its rendered Volcano pods, and the restarts Volcano's RestartJob
makes of them: the same pods run again, resuming from the newest complete checkpoint.

One workspace goes through, in order: a preflight refusal naming two mistakes at once (a variable set
on one node only; a checkpoint directory that is not shared), a worker pod killed at step 2, a hung
FSDP rank (one worker process SIGSTOPped) at step 3, every pod killed at once at step 4, a frozen
worker pod (every process SIGSTOPped) at step 5, and a last restart that finishes. Every step, resumed or
not, must train on the batch verl's own data pipeline gives that step in a run that never stopped
(tests/cluster/sampled_batches.py).

The last restart is also the job's clean finish on two nodes, as the rendered head command runs it: the patches
active in both nodes' workers and in the TaskRunner, the old_log_prob pass skipped in the remote workers, the
worker pod stopped by SIGTERM once the head has exited, nothing left; and while the frozen start trains, the
ports Ray's processes listen on are read and checked against docs/clusters.md.
"""

from __future__ import annotations

import json
import re
import shutil
import signal
import time

import pytest
from console_steps import shown_steps
from pods import STEPS, WORKER_IP, prepared_pods
from sampled_batches import sampled_fingerprints

from npu_rl import run_files
from npu_rl.exit_codes import Exit
from npu_rl.patches.batch_fingerprint import METRIC

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(2400)]

# Ray's node health check (its defaults in src/ray/common/ray_config_def.h: a check every 3 s, 10 s timeout,
# dead after 5 failures) and verl's own exit; the head must be out within this after a node was killed or
# frozen.
NODE_FAULT_EXIT_S = 90
# The hung start's watchdog floor (the recipe's is 90 s, above Ray's ~65 s node detection, for the frozen pod).
HUNG_FLOOR_S = 45


def _error_lines(log: str) -> list[str]:
    return [ln for ln in log.splitlines() if ln.startswith("npu-rl: error:")]


@pytest.fixture(scope="module")
def chain(request, tiny_model):
    pods = prepared_pods("faults", tiny_model)
    out: dict = {"pods": pods}
    try:
        ckpt = pods.in_ws(lambda: run_files.checkpoint_root(pods.recipe))

        # 1-2. A job spec with two mistakes, both named at once: a variable set on one node and not on the
        # other, and a worker node that sees a disk of its own where the checkpoints go (a node-local volume).
        local = pods.work / "node-local"
        local.mkdir()
        ckpt.mkdir(parents=True, exist_ok=True)
        pods.start(env={"worker": {"HCCL_EXEC_TIMEOUT": "17"}}, mounts={"worker": {ckpt: local}})
        out["misconfigured"] = {
            "codes": pods.wait(),
            "log": pods.log("head"),
            "left": pods.left(),
            "steps": pods.in_ws(lambda: run_files.saved_steps(pods.recipe)),
        }

        # 3. The worker pod killed at step 2.
        pods.start()
        pods.wait_for_step(2)
        t0 = time.monotonic()
        pods.kill("worker")
        out["killed"] = {
            "codes": pods.wait(),
            "seconds": time.monotonic() - t0,
            "log": pods.log("head"),
            "left": pods.left(),
        }

        # 4. One FSDP rank hangs (its process stopped) after step 3; its node stays healthy. With one step seen
        # since the resume the watchdog's allowance is its floor: lowered for this start only (45 s of CI), as a
        # user's --set would; the frozen start below keeps the recipe's, which must exceed Ray's node detection.
        healthy = pods.recipe
        pods.recipe = healthy.model_copy(
            update={"watchdog": healthy.watchdog.model_copy(update={"floor_s": HUNG_FLOOR_S})}
        )
        pods.start()
        pods.wait_for_step(3)
        (rank,) = pods.worker_processes()
        t0 = time.monotonic()
        rank.send_signal(signal.SIGSTOP)
        out["hung"] = {
            "codes": pods.wait(),
            "seconds": time.monotonic() - t0,
            "log": pods.log("head"),
            "left": pods.left(),
            "pid": rank.pid,
            "dumps": sorted(pods.in_ws(lambda: run_files.log_root(pods.recipe)).glob("hang-*")),
            "watchdog": pods.recipe.watchdog,
        }
        pods.recipe = healthy

        # 5. Every pod killed at once after step 4 (a power cut, a job deleted with --force).
        pods.start()
        pods.wait_for_step(4)
        pods.kill("worker")
        pods.kill("head")
        out["all_killed"] = {"codes": pods.wait(), "left": pods.left()}

        # 6. The worker pod frozen after step 5: every process stopped, its ports still accept connections.
        pods.start()
        pods.wait_for_step(5)
        # Ray's sockets while it trains (the workers' processes are all up once a step is done).
        out["listening"] = {task: pods.listening(task) for task in ("head", "worker")}
        t0 = time.monotonic()
        pods.kill("worker", signal.SIGSTOP)
        head_rc = pods.procs["head"].wait(timeout=300)
        out["frozen"] = {"head_rc": head_rc, "seconds": time.monotonic() - t0, "log": pods.log("head")}
        out["frozen"]["worker_log"] = pods.log("worker")
        out["frozen"]["head_args"] = list(pods.head_args)  # each start's own GCS port
        pods.kill("worker", signal.SIGKILL)  # Volcano deletes the frozen pod when it restarts the job
        pods.wait()

        # 7. The last restart finishes the run.
        pods.start()
        out["finished"] = {"codes": pods.wait(), "log": pods.log("head"), "left": pods.left()}
        out["finished"]["worker_log"] = pods.log("worker")
        out["metrics"] = pods.metrics()
        out["workers"] = json.loads(pods.in_ws(lambda: run_files.log_root(pods.recipe) / "workers.json").read_text())
        # The measured times, for whoever reads the run afterwards (`pytest --cache-show 'npu_rl/*'`).
        request.config.cache.set(
            "npu_rl/cluster_faults",
            {
                "killed_worker_to_head_exit_s": round(out["killed"]["seconds"], 1),
                "hung_rank_to_head_exit_s": round(out["hung"]["seconds"], 1),
                "frozen_worker_to_head_exit_s": round(out["frozen"]["seconds"], 1),
                "hung_watchdog_floor_s": out["hung"]["watchdog"].floor_s,
                "resumed_from": [
                    int(m)
                    for m in re.findall(
                        r"resuming faults from global_step_(\d+)",
                        "".join(
                            pods.work.joinpath(f"head-{i}.log").read_text(errors="replace")
                            for i in range(1, pods.runs + 1)
                        ),
                    )
                ],
            },
        )
        yield out
    finally:
        pods.cleanup()
        shutil.rmtree(pods.work, ignore_errors=True)


def _id(text: str, ip: str) -> str:
    (node,) = re.findall(rf"on {re.escape(ip)} \((\w{{8}})\)", text) or [text]
    return node


def _head_ip(text: str) -> str:
    (ip,) = [ip for ip in re.findall(r"on (\S+) \(", text) if ip != WORKER_IP] or [text]
    return ip


def _refusal(chain) -> str:
    run = chain["misconfigured"]
    assert run["codes"]["head"] == Exit.BAD_INPUT, run["log"][-3000:]
    assert shown_steps(run["log"]) == [] and run["steps"] == [] and run["left"] == []
    (line,) = _error_lines(run["log"])
    return line


def test_a_variable_set_on_one_node_only_is_refused_before_training(chain):
    line = _refusal(chain)
    # Each node by its address and id: the worker pod's own address, the head's as Ray registers 127.0.0.1.
    (values,) = re.findall(r"HCCL_EXEC_TIMEOUT: ([^|]*) \| ", line) or [line]
    assert sorted(values.split("; ")) == sorted(
        [
            f"'17' on {WORKER_IP} ({_id(values, WORKER_IP)})",
            f"unset on {_head_ip(values)} ({_id(values, _head_ip(values))})",
        ]
    )


def test_a_checkpoint_directory_that_is_not_shared_is_refused_before_training(chain):
    line = _refusal(chain)
    assert re.search(r"\| checkpoint directory \S+ is not shared: node \S+ \(\w{8}\) does not see what", line), line
    assert line.endswith("mount the same ReadWriteMany volume on every node"), line


def test_a_killed_worker_pod_is_named_and_the_head_exits_to_be_restarted(chain):
    run = chain["killed"]
    assert run["codes"]["head"] == Exit.NODE_LOST, run["log"][-3000:]
    assert run["seconds"] < NODE_FAULT_EXIT_S
    (line,) = _error_lines(run["log"])
    assert re.match(r"npu-rl: error: node \S+ \([0-9a-f]{56}\) left the cluster at step 2; ", line), line
    assert run["left"] == []


def test_a_hung_rank_is_caught_by_the_watchdog_with_every_stack(chain):
    run = chain["hung"]
    log = run["log"]
    assert run["codes"]["head"] == Exit.HUNG, log[-3000:]
    spec = run["watchdog"]
    assert spec.floor_s == HUNG_FLOOR_S
    (line,) = _error_lines(log)
    # Detected within the allowance (the floor: one step seen since the resume), give or take the poll...
    waited, allowed = map(
        int,
        re.search(
            r"run hung: step 4 did not complete in (\d+)s after step 3 "
            r"\(allowance (\d+)s",
            line,
        ).groups(),
    )
    assert allowed == spec.floor_s and allowed <= waited <= allowed + 5, line
    # ...and out after the dump and the stop of verl (its grace, then SIGKILL) on 2 loaded cores.
    assert run["seconds"] < spec.floor_s + 90, run["seconds"]
    assert f"pid {run['pid']} ray::WorkerDict" in line and "is stopped" in line, line
    (dump,) = run["dumps"]
    assert str(dump) in line
    summary = json.loads((dump / "summary.json").read_text())
    workers = [p for n in summary["nodes"] for p in n["processes"] if p["title"].startswith("ray::WorkerDict")]
    assert len(workers) == 2 and all(p["stack"] and not p["error"] for p in workers), workers
    stopped = [p for p in workers if p["pid"] == run["pid"]]
    assert stopped and stopped[0]["status"] == "stopped"
    # The rank that still runs waits in a collective; its frames are in the dump. Which one depends on
    # where in step 4 its peer was stopped: a c10d call (all_reduce, barrier) or the weight sync's
    # DTensor.full_tensor, which waits in torch's functional collectives (seen in CI).
    other = [p for p in workers if p["pid"] != run["pid"]]
    assert re.search(r"torch/distributed/(distributed_c10d|_functional_collectives)\.py", other[0]["stack"]), other[0][
        "stack"
    ][:2000]
    assert any(p["title"].startswith("ray::TaskRunner") for n in summary["nodes"] for p in n["processes"])
    assert summary["driver"] and "main_ppo" in summary["driver"][0]["stack"] + summary["driver"][0]["title"]
    assert run["left"] == []


def test_killing_every_pod_at_once_leaves_nothing_running(chain):
    assert chain["all_killed"]["left"] == []


def test_a_frozen_worker_pod_is_named_once_rays_health_check_gives_up(chain):
    run = chain["frozen"]
    assert run["head_rc"] == Exit.NODE_LOST, run["log"][-3000:]
    assert run["seconds"] < NODE_FAULT_EXIT_S
    (line,) = _error_lines(run["log"])
    assert re.match(r"npu-rl: error: node \S+ \([0-9a-f]{56}\) left the cluster at step 5; ", line), line


def test_every_restart_resumes_and_trains_on_the_batches_of_a_run_that_never_stopped(chain):
    run = chain["finished"]
    assert run["codes"]["head"] == 0, run["log"][-3000:]
    assert "resuming faults from global_step_5" in run["log"]
    assert STEPS in shown_steps(run["log"]) and run["left"] == []
    resumed = chain["metrics"]
    reference = sampled_fingerprints(chain["pods"], STEPS)
    assert sorted(resumed) == sorted(reference) == list(range(1, STEPS + 1))
    # Steps 1-2 ran from scratch: the reference is the run's own order, not merely some order.
    assert [resumed[s][METRIC] for s in (1, 2)] == [reference[s] for s in (1, 2)]
    # Each restart began where the checkpoint of the step before left off, on that step's batch.
    for step in range(3, STEPS + 1):
        assert resumed[step][METRIC] == reference[step], step
    assert len(set(reference.values())) == STEPS  # the batches differ from step to step


# The job's clean finish on two nodes (the last restart), as the rendered head command runs it.


def test_the_rendered_head_command_finishes_on_two_nodes(chain):
    pods, run = chain["pods"], chain["finished"]
    assert pods.head_args[:3] == ["npu-rl", "ray", "head"] and "train" in pods.head_args
    assert run["codes"]["head"] == 0, run["log"][-4000:]
    assert "cluster ready: 2 nodes" in run["log"]
    assert pods.in_ws(lambda: run_files.latest_step(pods.recipe)) == STEPS


def test_patches_are_active_in_the_workers_of_both_nodes(chain):
    verdict = chain["workers"]
    assert verdict["error"] is None
    assert len(verdict["workers"]) == 2 and len(verdict["nodes"]) == 2, verdict
    for w in verdict["workers"]:
        assert {"cpu", "old_log_prob", "attest", "batch_fingerprint"} <= set(w["patches"]), w
        assert {"cpu", "old_log_prob"} <= set(w["applied"]), w  # verl's worker code, changed there
    # verl's trainer code, changed in the TaskRunner
    assert {"attest", "batch_fingerprint", "file_logger", "old_log_prob", "reward_parts"} <= set(
        verdict["trainer"]["applied"]
    )


def test_old_log_prob_pass_is_skipped_in_the_remote_workers(chain):
    rows = list(chain["metrics"].values())
    assert rows and all("timing_s/old_log_prob" not in r for r in rows), rows[:1]
    assert all("timing_s/update_actor" in r for r in rows)


def test_after_the_head_exits_no_process_of_the_cluster_is_left(chain):
    # The head's end completes the job; Volcano deletes the worker pod, whose command stops its Ray node.
    run = chain["finished"]
    assert run["codes"]["worker"] == 128 + signal.SIGTERM
    assert "SIGTERM; stopping Ray" in run["worker_log"]
    assert run["left"] == []


# Where each Ray port of a node listens (docs/clusters.md "Who can reach the Ray cluster"): the Python agents
# and the client server take the node's address; the C++ daemons (GCS, raylet) and every core worker's gRPC
# server listen on every address, as Ray 2.60 has no option to bind them (src/ray/rpc/grpc_server.cc
# GrpcServer::Run binds 0.0.0.0 for any node address but 127.0.0.1), and so do the Prometheus exporters and
# the dashboard agent's gRPC port. The token is what keeps those closed (tests/cluster/test_ray_cluster.py).
ON_NODE_ADDRESS = ("--runtime-env-agent-port", "--dashboard-agent-listen-port", "--ray-client-server-port")
ON_EVERY_ADDRESS = ("--port", "--node-manager-port", "--object-manager-port", "--dashboard-agent-grpc-port",
                    "--metrics-export-port")  # fmt: skip
WILDCARD = {"0.0.0.0", "::"}


def _ray_start(log: str) -> dict[str, str]:
    (line,) = [ln for ln in log.splitlines() if "running: " in ln and "ray start " in ln]
    return dict(re.findall(r"(--[a-z-]+)=([^ ']+)", line))  # the last of a repeated option wins, as in Ray


def _plain(address: str) -> str:
    return address.removeprefix("::ffff:")


@pytest.mark.parametrize("task", ["head", "worker"])
def test_ray_listens_where_the_docs_say(chain, task):
    from ray._private.services import resolve_ip_for_localhost

    frozen = chain["frozen"]
    options = _ray_start(frozen["log"] if task == "head" else frozen["worker_log"])
    if task == "head":
        head_args = frozen["head_args"]
        options["--port"] = options.pop("--port", head_args[head_args.index("--port") + 1])
    node = options["--node-ip-address"]
    # Ray registers a node given as 127.0.0.1 under the host's outbound address (services.py
    # resolve_ip_for_localhost); on a cluster the address is the interface's own.
    own = {node, resolve_ip_for_localhost(node), "127.0.0.1"}
    listening = {port: {_plain(a) for a in e["addresses"]} for port, e in chain["listening"][task].items()}
    for flag in ON_NODE_ADDRESS:
        if flag in options:
            addresses = listening[int(options[flag])]
            assert addresses <= own and node in addresses | {"127.0.0.1"}, (flag, addresses, own)
    for flag in ON_EVERY_ADDRESS:
        if flag in options:
            assert listening[int(options[flag])] <= WILDCARD | own, (flag, listening[int(options[flag])])
    chosen = {int(options[f]) for f in (*ON_NODE_ADDRESS, *ON_EVERY_ADDRESS) if f in options}
    # Anything else on every address is a Ray process's own (a core worker's gRPC server, an exporter): no
    # process outside Ray's listens there.
    for port, entry in chain["listening"][task].items():
        if port not in chosen and {_plain(a) for a in entry["addresses"]} & WILDCARD:
            assert entry["processes"] <= {"python", "npu-rl"} | {p for p in entry["processes"] if p.startswith("ray::")}
