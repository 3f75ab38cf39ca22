"""Launcher logic without Ray processes: placement, interface choice, shortfall messages, command lines, CLI errors."""

from __future__ import annotations

import json
import os
import shlex
import socket
import threading
import time

import pytest

from npu_rl.cli import main
from npu_rl.cluster import network, rayports
from npu_rl.cluster.membership import Expectation, Node, shortfall
from npu_rl.cluster.placement import detect
from npu_rl.cluster.probe import Address, Deadline, backoff, free_port, port_open, wait_for_port
from npu_rl.cluster.raynode import NodeSpec, head_argv, kuberay_argv, worker_argv
from npu_rl.errors import UserError

# --- placement -----------------------------------------------------------------------------------------------

VOLCANO = {
    "VC_TASK_INDEX": "2",
    "VC_HEAD_HOSTS": "job-head-0.job",
    "VC_HEAD_NUM": "1",
    "VC_WORKER_HOSTS": "job-worker-0.job,job-worker-1.job,job-worker-2.job",
    "VC_WORKER_NUM": "3",
}


def test_volcano_worker_rank_follows_the_head_task():
    p = detect(VOLCANO, role="worker")
    assert (p.launcher, p.rank, p.nnodes, p.head_host, p.is_head) == ("volcano", 3, 4, "job-head-0.job", False)
    assert detect(VOLCANO, role="head").rank == 0
    assert detect(VOLCANO).rank is None  # both tasks count from 0: the index alone is ambiguous


def test_volcano_single_task_makes_index_zero_the_head():
    env = {"VK_TASK_INDEX": "0", "VC_NODE_HOSTS": "j-node-0.j,j-node-1.j", "VC_NODE_NUM": "2"}
    p = detect(env)
    assert (p.rank, p.nnodes, p.head_host, p.is_head) == (0, 2, "j-node-0.j", True)
    assert detect({**env, "VK_TASK_INDEX": "1"}).is_head is False


def test_kuberay_role_and_head_come_from_the_generated_command():
    worker = detect(
        {
            "KUBERAY_GEN_RAY_START_CMD": "ray start --address=rc-head-svc.ns.svc.cluster.local:6379 --block",
            "FQ_RAY_IP": "rc-head-svc.ns.svc.cluster.local",
        }
    )
    assert (worker.launcher, worker.is_head, worker.head_host) == ("kuberay", False, "rc-head-svc.ns.svc.cluster.local")
    head = detect({"KUBERAY_GEN_RAY_START_CMD": "ray start --head --block"})
    assert (head.is_head, head.rank) == (True, 0)


def test_mindcluster_counts_nodes_from_world_sizes():
    p = detect(
        {"MINDX_TASK_ID": "uid", "MASTER_ADDR": "10.0.0.1", "RANK": "5", "WORLD_SIZE": "256", "LOCAL_WORLD_SIZE": "16"}
    )
    assert (p.launcher, p.rank, p.nnodes, p.devices_per_node, p.head_host, p.is_head) == (
        "mindcluster",
        5,
        16,
        16,
        "10.0.0.1",
        False,
    )
    assert detect({"MINDX_TASK_ID": "uid", "RANK": "3", "REPLICA_TYPE": "Master"}).is_head is True


def test_plain_variables_and_nothing():
    p = detect({"NODE_RANK": "0", "MASTER_ADDR": "h0", "NNODES": "2"})
    assert (p.launcher, p.rank, p.nnodes, p.head_host, p.is_head) == ("env", 0, 2, "h0", True)
    assert detect({}).launcher == "none"


def test_malformed_rank_names_the_variable():
    with pytest.raises(UserError, match="NODE_RANK='x'"):
        detect({"NODE_RANK": "x"})


# --- network -------------------------------------------------------------------------------------------------


def test_the_interface_follows_the_route_to_the_head_and_says_so():
    iface = network.select_interface("127.0.0.1", environ={})
    assert (iface.name, iface.ip) == ("lo", "127.0.0.1")
    assert "route to the head 127.0.0.1" in iface.why and "no --ifname" in iface.why


def test_an_interface_named_by_flag_or_socket_variable_wins_over_the_route_and_an_unknown_flag_is_refused():
    assert "--ifname" in network.select_interface("127.0.0.1", ifname="lo").why
    named = network.select_interface("10.255.255.1", environ={"HCCL_SOCKET_IFNAME": "lo"})
    assert named.name == "lo" and "HCCL_SOCKET_IFNAME=lo" in named.why
    # A prefix, a list or an exclusion (HCCL and Gloo take them) names no interface of this host: the route decides.
    for value in ("nope0", "^docker", "lo,eth0"):
        routed = network.select_interface("127.0.0.1", environ={"GLOO_SOCKET_IFNAME": value})
        assert routed.name == "lo" and "route to the head" in routed.why, value
    with pytest.raises(UserError, match="'nope0' not found"):
        network.select_interface(ifname="nope0")


def test_network_env_pins_every_library_but_keeps_values_set_by_the_operator():
    env = network.network_env(network.Interface("eth1", "10.1.2.3"), {"HCCL_SOCKET_IFNAME": "ib0"})
    assert env["HCCL_IF_IP"] == "10.1.2.3"
    assert env["GLOO_SOCKET_IFNAME"] == env["TP_SOCKET_IFNAME"] == "eth1"
    assert env["HCCL_SOCKET_IFNAME"] == "ib0"
    assert env["RAY_EXPERIMENTAL_NOSET_ASCEND_RT_VISIBLE_DEVICES"] == "1"


# --- membership ----------------------------------------------------------------------------------------------


def test_shortfall_names_missing_nodes_npus_and_short_nodes():
    want = Expectation(nnodes=4, npus_per_node=16)
    assert shortfall([Node(f"10.0.0.{i}", 16) for i in range(4)], want) is None
    msg = shortfall([Node("10.0.0.1", 16), Node("10.0.0.2", 16), Node("10.0.0.3", 8)], want)
    assert "2 of 4 nodes missing" in msg
    assert "24 of 64 NPUs missing" in msg
    assert "10.0.0.3 has 8" in msg


# --- probes and command lines --------------------------------------------------------------------------------


def test_address_parsing():
    assert Address.parse("head.svc", 6379) == Address("head.svc", 6379)
    assert Address.parse("10.0.0.1:7000", 6379) == Address("10.0.0.1", 7000)
    with pytest.raises(ValueError):
        Address.parse("h:port", 6379)


def test_backoff_grows_to_its_cap():
    delays = backoff(initial=0.5, factor=2, cap=3)
    assert [next(delays) for _ in range(5)] == [0.5, 1.0, 2.0, 3, 3]


def test_a_free_port_comes_from_below_the_ephemeral_range_and_binds():
    first, last = rayports.default_range()
    ports = {free_port() for _ in range(5)}
    assert all(first <= p <= last for p in ports), ports
    for port in ports:
        with socket.socket() as s:
            s.bind(("127.0.0.1", port))


def test_a_port_that_opens_during_a_long_backoff_is_found_within_the_poll():
    """The backoff spaces the progress lines, not the tries: a head whose port opens 1 s into a 30 s pause is
    joined about a second later (the tries once followed the backoff, and a worker joined up to 15 s late)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        addr = Address("127.0.0.1", s.getsockname()[1])
        threading.Timer(1.0, s.listen).start()
        messages: list[str] = []
        start = time.monotonic()
        assert wait_for_port(addr, Deadline(60), backoff(initial=30, cap=30), messages.append, poll=0.2)
        assert time.monotonic() - start < 5
        assert len(messages) == 1 and "not reachable yet" in messages[0]


def test_wait_for_port_gives_up_at_the_deadline():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        closed = Address("127.0.0.1", s.getsockname()[1])  # bound, not listening: connections are refused
        messages: list[str] = []
        start = time.monotonic()
        assert not wait_for_port(closed, Deadline(0.6), backoff(initial=0.1, cap=0.2), messages.append)
        assert time.monotonic() - start < 5
        assert messages and "not reachable yet" in messages[0]
        assert not port_open(closed)


def test_ray_start_lines_register_npus_explicitly():
    spec = NodeSpec(npus=16, node_ip="10.0.0.2", dashboard=False, extra_args=("--num-cpus", "4"))
    head = head_argv(spec, 6380)
    assert head[1:4] == ["start", "--head", "--port=6380"]
    assert f"--resources={json.dumps({'NPU': 16})}" in head and "--block" in head
    assert "--include-dashboard=false" in head and head[-2:] == ["--num-cpus", "4"]
    worker = worker_argv(spec, Address("h", 6380))
    assert "--address=h:6380" in worker and "--node-ip-address=10.0.0.2" in worker


def test_kuberay_command_is_pinned_to_the_chosen_interface():
    argv = kuberay_argv('ray start --address=h:6379 --resources="{\\"NPU\\": 16}" --block', "10.0.0.9")
    assert argv[:2] == ["ray", "start"]
    assert '--resources={"NPU": 16}' in argv
    assert argv.count("--block") == 1 and "--node-ip-address=10.0.0.9" in argv
    assert kuberay_argv("ray start --node-ip-address=1.2.3.4", "10.0.0.9").count("--node-ip-address=1.2.3.4") == 1
    assert shlex.join(argv)  # stays a valid command line


# --- CLI -----------------------------------------------------------------------------------------------------


@pytest.fixture
def clean_env(monkeypatch):
    for k in (
        "VC_TASK_INDEX",
        "VK_TASK_INDEX",
        "KUBERAY_GEN_RAY_START_CMD",
        "MINDX_TASK_ID",
        "NODE_RANK",
        "MASTER_ADDR",
        "NNODES",
        "NPU_RL_RAY_PORT",
        "RAY_ADDRESS",
    ):
        monkeypatch.delenv(k, raising=False)
    return monkeypatch


@pytest.mark.parametrize(
    "argv, message",
    [
        (["ray", "worker", "--devices", "2"], "no head address"),
        (["ray", "head", "--devices", "0"], "--devices must be >= 1"),
        (["ray", "head", "--devices", "2", "--", "true"], "how many nodes"),
        (["ray", "wait", "--devices", "2"], "how many nodes"),
        (["ray", "worker", "--address", "h:x", "--devices", "2"], "--address: bad address"),
        (["ray", "head", "--recipe", "no_such_recipe", "--devices", "2"], "unknown recipe"),
    ],
)
def test_bad_input_is_one_line_exit_2(clean_env, capsys, argv, message):
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("npu-rl: error:") and message in err and "\n" not in err


def test_worker_refuses_to_run_on_the_head_node(clean_env, capsys):
    clean_env.setenv("NODE_RANK", "0")
    clean_env.setenv("MASTER_ADDR", "h0")
    assert main(["ray", "worker", "--devices", "2"]) == 2
    assert "run `npu-rl ray head`" in capsys.readouterr().err


def test_bad_port_variable_is_named(clean_env, capsys):
    clean_env.setenv("NPU_RL_RAY_PORT", "63x")
    assert main(["ray", "worker", "--address", "h", "--devices", "2"]) == 2
    assert "NPU_RL_RAY_PORT='63x'" in capsys.readouterr().err


def test_counts_come_from_the_recipe_when_not_given(clean_env):
    from argparse import Namespace

    from npu_rl.cluster.placement import Placement
    from npu_rl.commands.ray import resolve_counts

    args = Namespace(nodes=None, devices=None, recipe="deepseek_r1_671b_a3", set=None)
    assert resolve_counts(args, Placement("none")) == (16, 16)
    # The launcher's view of the job beats the recipe; flags beat both.
    assert resolve_counts(args, Placement("volcano", nnodes=2)) == (2, 16)
    assert resolve_counts(
        Namespace(nodes=3, devices=4, recipe="deepseek_r1_671b_a3", set=None), Placement("volcano", nnodes=2)
    ) == (3, 4)


def test_a_port_another_live_process_claimed_is_not_chosen(tmp_path, monkeypatch):
    """Two nodes starting on one host choose their ports seconds before Ray binds them: a port one of them
    claimed is never the other's (npu_rl.cluster.rayports.CLAIMS), and a claim whose process is gone is taken."""
    import subprocess
    import sys

    from npu_rl.cluster import rayports

    monkeypatch.setattr(rayports, "CLAIMS", tmp_path / "claims")
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        first, last = 40100, 40109
        for port in range(first, last):  # all but one claimed by another live process
            assert rayports.claim(port, pid=other.pid)
        assert rayports.choose_ports(1, (first, last)) == [last]
        with pytest.raises(UserError):
            rayports.choose_ports(2, (first, last))
    finally:
        other.kill()
        other.wait()
    # Its process gone, its claims are free to take (claimed directly: a port of this range may be bound by
    # whatever else runs here, which choose_ports rightly skips; make test once saw one).
    assert all(rayports.claim(port) for port in range(first, last))
    assert (tmp_path / "claims" / str(first)).read_text().split()[0] == str(os.getpid())


def test_a_claim_whose_pid_now_names_another_process_is_taken(tmp_path, monkeypatch):
    """Claims outlive a killed process, and its pid is given to another in time (a day of CI here left claims
    whose pids ran other processes, and a port range came up short): a claim names its process by pid and
    start time."""
    from npu_rl.cluster import rayports

    monkeypatch.setattr(rayports, "CLAIMS", tmp_path / "claims")
    (tmp_path / "claims").mkdir()
    (tmp_path / "claims" / "40200").write_text("1 1")  # pid 1 lives, but did not start at tick 1
    (tmp_path / "claims" / "40201").write_text(f"{os.getpid()}")  # a pid alone, of a live process
    assert rayports.claim(40200)
    assert not rayports.claim(40201, pid=1)  # a live process's claim in the old form stands


def test_a_process_withdraws_its_claims_as_it_exits(tmp_path):
    import subprocess
    import sys

    code = (
        "import sys; from pathlib import Path; from npu_rl.cluster import rayports; "
        "rayports.CLAIMS = Path(sys.argv[1]); print(rayports.choose_ports(3, (40200, 40299)))"
    )
    out = subprocess.run([sys.executable, "-c", code, str(tmp_path)], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and len(eval(out.stdout)) == 3, out.stderr
    assert list(tmp_path.iterdir()) == []
