"""The job's sandbox pod as `npu-rl render k8s` writes it (tests/k8s/test_render_sandbox.py checks the rendering),
run here as a container of the image the manifest names, with the pod's settings and nothing else:
``hostUsers: false`` as a user namespace of its own (its root is host user 200000), ``procMount: Unmasked``,
the seccomp and AppArmor profiles unconfined, root with SETUID and SETGID alone and no privilege escalation, a
read-only root, its args, env and limits, no volume; its port published as its Service would reach it. The
hostile cases are contained there too (a first try found the pod's capabilities short of KILL: no execution
past its time limit could be ended); and without each runtime setting it needs, it refuses to serve in one
line that names the setting (and runs nothing).

What a kubelet does that this does not: the NetworkPolicy (nothing enforces it here; the jails have no network
of their own either way), the readiness probe (the test pings), and the node's AppArmor (Debian's kernel here
restricts no user namespace)."""

from __future__ import annotations

import shutil
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest
import yaml
from compose_run import require_compose
from sandbox_attacks import Client, contained_in_a_container

from npu_rl.cluster.probe import free_port
from npu_rl.image.build import build_variant
from npu_rl.image.spec import spec
from npu_rl.recipe import load_recipe
from npu_rl.render import k8s

REPO = Path(__file__).resolve().parents[2]
# The pod's user namespace: its users 0-65535 are the host's 200000 up (the kubelet picks a range of its own).
USERNS = "0:200000:65536"

pytestmark = [pytest.mark.image, pytest.mark.timeout(900)]


def _pod() -> dict:
    recipe = load_recipe("qwen2_5_1_5b_math_a2_4card", {"sandbox.enabled": True, "sandbox.slots": 2})
    docs = [d for d in yaml.safe_load_all(k8s.render_text(recipe, "volcano", nodes=2)) if d]
    (job,) = [d for d in docs if d["kind"] == "Job"]
    (task,) = [t for t in job["spec"]["tasks"] if t["name"] == "sandbox"]
    return task["template"]["spec"]


def _memory(quantity: str) -> str:
    assert quantity.endswith("Mi"), quantity
    return quantity[:-2] + "m"


def podman_args(pod: dict, port: int, without: str | None = None) -> list[str]:
    """``podman run`` of the pod's one container, each field of its spec mapped (an unmapped one fails here:
    a setting the template gains must be run too); ``without``: one runtime setting, or one capability, left
    out (a drill)."""
    assert set(pod) == {
        "restartPolicy", "hostUsers", "automountServiceAccountToken", "enableServiceLinks",
        "terminationGracePeriodSeconds", "containers",
    }, sorted(pod)  # fmt: skip
    assert pod["hostUsers"] is False and pod["automountServiceAccountToken"] is False
    (c,) = pod["containers"]
    assert set(c) == {
        "name", "image", "imagePullPolicy", "args", "env", "ports", "readinessProbe", "resources", "securityContext"
    }, sorted(c)  # fmt: skip
    sc = c["securityContext"]
    assert set(sc) == {
        "runAsUser", "runAsGroup", "allowPrivilegeEscalation", "readOnlyRootFilesystem", "capabilities",
        "procMount", "seccompProfile", "appArmorProfile",
    }, sorted(sc)  # fmt: skip
    unconfined = {k: sc[k]["type"] == "Unconfined" for k in ("seccompProfile", "appArmorProfile")}
    settings = {
        "hostUsers": ["--uidmap", USERNS, "--gidmap", USERNS],
        "procMount": ["--security-opt", "unmask=ALL"] if sc["procMount"] == "Unmasked" else [],
        "seccompProfile": ["--security-opt", "seccomp=unconfined"] if unconfined["seccompProfile"] else [],
        "capabilities": [a for cap in sc["capabilities"]["add"] if cap != without for a in ("--cap-add", cap)],
    }
    args = [
        "podman", "run", "--detach", "--runtime", "runc",
        # podman's own defaults exceed this machine's hard limits (tests/containers/conftest.py).
        "--ulimit", "nofile=16384:16384", "--ulimit", "nproc=16384:16384",
        "--user", f"{sc['runAsUser']}:{sc['runAsGroup']}",
        "--cap-drop", "ALL",
        "--security-opt", "apparmor=unconfined" if unconfined["appArmorProfile"] else "apparmor=default",
        "--cpus", c["resources"]["limits"]["cpu"], "--memory", _memory(c["resources"]["limits"]["memory"]),
        "--publish", f"127.0.0.1:{port}:{c['ports'][0]['containerPort']}",
    ]  # fmt: skip
    assert sc["capabilities"]["drop"] == ["ALL"]
    if sc["allowPrivilegeEscalation"] is False:
        args += ["--security-opt", "no-new-privileges"]
    if sc["readOnlyRootFilesystem"]:
        args += ["--read-only"]
    for name, flags in settings.items():
        if name != without:
            args += flags
    args += [a for e in c["env"] for a in ("--env", f"{e['name']}={e['value']}")]
    return [*args, c["image"], *c["args"]]


def _ping(url: str) -> bool:
    try:
        with urllib.request.urlopen(url + "/v1/ping", timeout=5) as r:
            return r.read() == b"pong"
    except OSError:
        return False


@pytest.fixture(scope="module")
def image():
    require_compose()
    if shutil.which("podman") is None:
        pytest.skip("the pod runs under podman's own command (a user namespace of its own)")
    build_variant("cpu", root=REPO, log=lambda _: None)  # cached layers: seconds when built
    pod = _pod()
    # The CPU image under the name the manifest gives it, as a registry serves it.
    subprocess.run(["podman", "tag", spec("cpu").tag, pod["containers"][0]["image"]], check=True)
    return pod


def _start(pod: dict, without: str | None = None) -> tuple[str, Client]:
    port = free_port()
    run = subprocess.run(podman_args(pod, port, without), capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    return run.stdout.strip(), Client(f"http://127.0.0.1:{port}")


def _stop(cid: str) -> str:
    logs = subprocess.run(["podman", "logs", cid], capture_output=True, text=True, timeout=60)
    subprocess.run(["podman", "rm", "--force", "--time", "30", cid], capture_output=True, timeout=120)
    return logs.stdout + logs.stderr


def test_the_rendered_sandbox_pod_serves_and_contains_the_attacks(image):
    cid, sandbox = _start(image)
    try:
        deadline = time.monotonic() + 120
        while not _ping(sandbox.url):
            assert time.monotonic() < deadline, _stop(cid)[-3000:]
            time.sleep(1)
        contained_in_a_container(sandbox)
        # The code's users are the pod's, so the node's 200000 up: none of the node's own.
        uid = sandbox.run("import os; print(os.getuid(), open('/proc/self/uid_map').read().split())")
        assert uid["run_result"]["stdout"].startswith("65534 "), uid
    finally:
        logs = _stop(cid)
    assert "npu-rl sandbox: serving http://0.0.0.0:8080/run_code" in logs, logs[-3000:]
    assert "Traceback" not in logs


@pytest.mark.parametrize(
    "without, says",
    [
        ("procMount", "Can't mount proc"),
        ("seccompProfile", "seccompProfile.type: Unconfined"),
        ("capabilities", "CAP_SETUID and CAP_SETGID"),
        ("KILL", "needs CAP_KILL"),  # the one capability alone: executions could not be ended at their limit
    ],
)
def test_without_each_runtime_setting_the_pod_refuses_in_one_line(image, without, says):
    cid, _ = _start(image, without)
    deadline = time.monotonic() + 120
    while subprocess.run(["podman", "inspect", "--format", "{{.State.Running}}", cid], capture_output=True,
                         text=True).stdout.strip() == "true":  # fmt: skip
        assert time.monotonic() < deadline, _stop(cid)[-3000:]
        time.sleep(1)
    logs = _stop(cid)
    errors = [ln for ln in logs.splitlines() if ln.startswith("npu-rl: error:")]
    assert len(errors) == 1 and "Traceback" not in logs, logs[-3000:]
    assert "no execution can be isolated here, so none is run" in errors[0] and says in errors[0], errors[0]
