"""The tiny recipe trained on a 2-node CPU Ray cluster, run exactly as the rendered Volcano pods run it
(tests/cluster/pods.py says what a pod gets here that Kubernetes would give it)."""

from __future__ import annotations

import json
import re
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
def test_ray_listens_where_the_docs_say(pods, task):
    from ray._private.services import resolve_ip_for_localhost

    options = _ray_start(pods[f"{task}_log"])
    if task == "head":
        options["--port"] = options.pop("--port", pods["head_args"][pods["head_args"].index("--port") + 1])
    node = options["--node-ip-address"]
    # Ray registers a node given as 127.0.0.1 under the host's outbound address (services.py
    # resolve_ip_for_localhost); on a cluster the address is the interface's own.
    own = {node, resolve_ip_for_localhost(node), "127.0.0.1"}
    listening = {port: {_plain(a) for a in e["addresses"]} for port, e in pods["listening"][task].items()}
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
    for port, entry in pods["listening"][task].items():
        if port not in chosen and {_plain(a) for a in entry["addresses"]} & WILDCARD:
            assert entry["processes"] <= {"python", "npu-rl"} | {p for p in entry["processes"] if p.startswith("ray::")}
