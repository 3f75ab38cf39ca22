"""The Ray token and a node's own ports and temp dir, without starting Ray (the clusters that use them:
test_ray_cluster.py, test_shared_host.py, test_cluster_faults.py)."""

from __future__ import annotations

import os
import re
import shutil
import socket
import stat
import subprocess
import sys

import pytest
import yaml

from npu_rl.cluster import rayauth, rayports
from npu_rl.errors import UserError
from npu_rl.paths import project_root
from npu_rl.recipe import load_recipe
from npu_rl.render.k8s import K8sOptions, render_text


def test_a_new_token_is_owner_only_and_256_bits(tmp_path):
    path = rayauth.new_token(tmp_path)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert re.fullmatch(r"[0-9a-f]{64}", path.read_text())
    assert rayauth.new_token(tmp_path.joinpath("x").mkdir() or tmp_path / "x").read_text() != path.read_text()


def test_the_token_comes_from_the_environment_as_a_value_or_an_owner_only_file(tmp_path):
    assert rayauth.given({}) is None
    assert rayauth.given({"RAY_AUTH_TOKEN": "abc"}) == {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": "abc"}
    path = rayauth.new_token(tmp_path)
    assert rayauth.given({"RAY_AUTH_TOKEN_PATH": str(path)}) == {
        "RAY_AUTH_MODE": "token",
        "RAY_AUTH_TOKEN_PATH": str(path),
    }
    path.chmod(0o644)
    with pytest.raises(UserError, match="readable by others .*chmod 600"):
        rayauth.given({"RAY_AUTH_TOKEN_PATH": str(path)})
    with pytest.raises(UserError, match="No such file"):
        rayauth.given({"RAY_AUTH_TOKEN_PATH": str(tmp_path / "missing")})
    (tmp_path / "empty").write_text("\n")
    (tmp_path / "empty").chmod(0o600)
    with pytest.raises(UserError, match="is empty"):
        rayauth.given({"RAY_AUTH_TOKEN_PATH": str(tmp_path / "empty")})


def _npu_rl(*args: str, env: dict) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "npu_rl", *args], env=env, capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize(
    "args",
    [
        ("ray", "worker", "--address", "127.0.0.1:1", "--devices", "1", "--ifname", "lo"),
        ("ray", "head", "--nodes", "2", "--devices", "1", "--ifname", "lo", "--", "true"),
        ("ray", "wait", "--address", "127.0.0.1:1", "--nodes", "2", "--devices", "1"),
    ],
)
def test_a_node_of_a_cluster_refuses_to_start_without_the_jobs_token(args):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RAY_", "NPU_RL_", "VC_"))}
    out = _npu_rl(*args, env=env)
    assert out.returncode == 2, out.stderr
    (line,) = out.stderr.strip().splitlines()
    assert line.startswith("npu-rl: error:") and "needs" in line and "RAY_AUTH_TOKEN_PATH" in line, line


def test_a_node_takes_free_ports_of_its_own_below_the_ephemeral_range_and_a_private_temp_dir(tmp_path):
    env = {rayports.TMPDIR_ENV: str(tmp_path)}
    a, b = rayports.layout(head=True, environ=env), rayports.layout(head=True, environ=env)
    ports = [*a.ports.values(), *a.env.values(), *b.ports.values(), *b.env.values()]
    assert len(a.ports) == len(rayports.NODE_PORT_FLAGS) + len(rayports.HEAD_PORT_FLAGS)
    assert set(a.env) == set(rayports.HEAD_PORT_ENV)
    assert all(20000 <= int(p) < rayports.ephemeral_low() for p in ports)
    for port in ports:
        with socket.socket() as s:
            s.bind(("", int(port)))  # free
    assert a.temp_dir != b.temp_dir and a.temp_dir is not None and a.temp_dir.parent == tmp_path
    assert stat.S_IMODE(a.temp_dir.stat().st_mode) == 0o700
    argv = a.argv()
    assert f"--temp-dir={a.temp_dir}" in argv and "--min-worker-port=0" in argv and "--max-worker-port=0" in argv
    worker = rayports.layout(head=False, environ=env)
    assert set(worker.ports) == set(rayports.NODE_PORT_FLAGS) and worker.env == {}


def test_the_users_own_ray_options_and_a_port_range_are_kept(tmp_path):
    given = ["--node-manager-port=7000", "--temp-dir", str(tmp_path), "--min-worker-port=40000"]
    node = rayports.layout(head=False, extra=given, port_range=(30000, 30099))
    assert "--node-manager-port" not in node.ports and node.temp_dir is None and node.worker_ports == ()
    assert all(30000 <= p <= 30099 for p in node.ports.values())
    with pytest.raises(UserError, match="bad Ray port range"):
        rayports.parse_range("30000")
    with pytest.raises(UserError, match="only 1 of the"):
        rayports.choose_ports(3, (30000, 30000))


def _docs(recipe: str, target: str) -> list[dict]:
    return [d for d in yaml.safe_load_all(render_text(load_recipe(recipe), target)) if d]


def test_volcano_pods_mount_the_jobs_token_from_a_secret_and_kuberay_asks_for_token_auth():
    (_, job) = _docs("deepseek_r1_671b_a3", "volcano")
    for task in job["spec"]["tasks"]:
        spec = task["template"]["spec"]
        (container,) = spec["containers"]
        env = {e["name"]: e for e in container["env"]}
        assert env["RAY_AUTH_TOKEN_PATH"]["value"] == "/etc/npu-rl-ray/token" and "RAY_AUTH_TOKEN" not in env
        (volume,) = [v for v in spec["volumes"] if v["name"] == "ray-token"]
        assert volume["secret"]["secretName"] == "npu-rl-deepseek-r1-671b-a3-ray-token"
        assert volume["secret"]["defaultMode"] == 0o400
        assert {"name": "ray-token", "mountPath": "/etc/npu-rl-ray", "readOnly": True} in container["volumeMounts"]
    (_, rayjob) = _docs("deepseek_r1_671b_a3", "kuberay")
    assert rayjob["spec"]["rayClusterSpec"]["authOptions"] == {"mode": "token"}


def test_no_rendered_file_holds_a_token_or_a_secret_value():
    files = [*project_root().joinpath("k8s").glob("*.yaml"), *project_root().joinpath("compose").iterdir()]
    assert len(files) > 4
    for path in files:
        if path.is_file():
            text = path.read_text()
            assert not re.search(r"\b[0-9a-f]{64}\b", text), path  # a token (64 hex, as npu-rl and Ray make them)
            assert not re.search(r"name: RAY_AUTH_TOKEN\s+value:", text), path  # only the file's path is named


def test_each_job_gets_a_gcs_port_of_its_own_unless_told():
    ports = {
        _docs(r, "volcano")[1]["spec"]["tasks"][0]["template"]["spec"]["containers"][0]["args"][8]
        for r in ("deepseek_r1_671b_a3", "qwen2_5_1_5b_math_a2_4card")
    }
    assert len(ports) == 2 and all(6400 <= int(p) <= 7999 for p in ports), ports
    text = render_text(load_recipe("deepseek_r1_671b_a3"), "volcano", options=K8sOptions(ray_port=6379))
    assert "--port\n" not in text and '"6379"' in text


def test_a_recipe_holding_a_secret_is_refused_in_one_line():
    with pytest.raises(UserError, match=r"env holds HF_TOKEN, SWANLAB_API_KEY, which look like secrets"):
        load_recipe("tiny_math_cpu", {"env.HF_TOKEN": "x", "env.SWANLAB_API_KEY": "y"})
    assert load_recipe("tiny_math_cpu", {"env.TOKENIZERS_PARALLELISM": "false"}).env["TOKENIZERS_PARALLELISM"]


def test_the_token_file_is_named_not_shown_in_the_command_line(tmp_path):
    # What `npu-rl ray head` starts: the token's variables reach Ray through the environment only.
    from npu_rl.cluster.raynode import NodeSpec, head_argv

    layout = rayports.layout(head=True, environ={rayports.TMPDIR_ENV: str(tmp_path)})
    token = rayauth.new_token(rayauth.token_dir())
    argv = " ".join(head_argv(NodeSpec(npus=1, node_ip="127.0.0.1", layout=layout), 6379))
    assert token.read_text() not in argv and "auth" not in argv and str(token.parent) not in argv
    shutil.rmtree(token.parent)


def test_a_kuberay_node_takes_its_own_ports_after_the_operators_and_the_users_last():
    from npu_rl.cluster.raynode import kuberay_argv

    generated = "ray start --address=h:6379 --metrics-export-port=8080 --dashboard-agent-listen-port=52365"
    node = rayports.layout(head=False, environ={})
    argv = kuberay_argv(generated, "10.0.0.9", node, ["--metrics-export-port=9100"])
    # click keeps an option's last value: the node's own agent port, the user's metrics port
    last = {a.split("=")[0]: a.split("=")[1] for a in argv if a.startswith("--") and "=" in a}
    assert last["--dashboard-agent-listen-port"] == str(node.ports["--dashboard-agent-listen-port"])
    assert last["--metrics-export-port"] == "9100"
    assert node.temp_dir is not None
    shutil.rmtree(node.temp_dir)


def test_the_gcs_port_is_never_chosen_again(tmp_path, monkeypatch):
    # A claims directory of its own, and a few ports of a range each time (a port of it that anything else
    # here binds or claims is rightly skipped: the whole range once failed make test).
    monkeypatch.setattr(rayports, "CLAIMS", tmp_path / "claims")
    for _ in range(20):
        assert 20500 not in rayports.choose_ports(3, (20495, 20505), avoid=(20500,))
