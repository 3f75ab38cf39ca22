"""A recipe whose policy's code runs in npu-rl's sandbox (``sandbox.enabled``), rendered for Volcano and KubeRay:
the sandbox runs as pods of its own beside the job's (docs/sandbox.md says why not a container in the training
pods), with nothing of the job mounted, root that is not the node's, the runtime settings each jail needs, and
limits; the training reaches it through the job's Service, named in its `npu-rl train` command."""

from __future__ import annotations

import shlex

import jsonschema
import kubernetes_validate
import pytest
import yaml

from npu_rl.recipe import load_recipe
from npu_rl.render import k8s

QWEN = "qwen2_5_1_5b_math_a2_4card"
SETS = {"sandbox.enabled": True, "sandbox.replicas": 2, "sandbox.slots": 6, "sandbox.memory_mb": 512}


def _docs(target: str, sets=SETS) -> list[dict]:
    text = k8s.render_text(load_recipe(QWEN, dict(sets)), target, nodes=2)
    return [d for d in yaml.safe_load_all(text) if d]


def _kinds(docs) -> dict[str, list[dict]]:
    out: dict[str, list[dict]] = {}
    for d in docs:
        out.setdefault(d["kind"], []).append(d)
    return out


def _sandbox_pod(target: str, docs) -> tuple[int, dict]:
    """(replicas, pod template) of the sandbox pods."""
    kinds = _kinds(docs)
    if target == "volcano":
        (task,) = [t for t in kinds["Job"][0]["spec"]["tasks"] if t["name"] == "sandbox"]
        return task["replicas"], task["template"]
    (deploy,) = kinds["Deployment"]
    return deploy["spec"]["replicas"], deploy["spec"]["template"]


def _train_args(target: str, docs) -> list[str]:
    kinds = _kinds(docs)
    if target == "volcano":
        (head,) = [t for t in kinds["Job"][0]["spec"]["tasks"] if t["name"] == "head"]
        args = head["template"]["spec"]["containers"][0]["args"]
        return args[args.index("--") + 1 :]
    return shlex.split(kinds["RayJob"][0]["spec"]["entrypoint"].split(" && ", 1)[1])


@pytest.mark.parametrize("target", k8s.TARGETS)
def test_the_sandbox_runs_in_pods_of_its_own_that_hold_nothing_of_the_job(target):
    docs = _docs(target)
    replicas, tmpl = _sandbox_pod(target, docs)
    spec = tmpl["spec"]
    assert replicas == 2
    assert tmpl["metadata"]["labels"]["npu-rl/role"] == "sandbox"
    assert "ring-controller.atlas" not in tmpl["metadata"]["labels"]  # no NPU topology: it holds none
    # Not on the host network, root that is an unprivileged user of the node, no token of the cluster's.
    assert not spec.get("hostNetwork") and spec["hostUsers"] is False
    assert spec["automountServiceAccountToken"] is False and spec["enableServiceLinks"] is False
    assert "volumes" not in spec and "nodeSelector" not in spec
    (c,) = spec["containers"]
    assert "volumeMounts" not in c and "envFrom" not in c
    assert [e["name"] for e in c["env"]] == ["NPU_RL_SANDBOX_PYTHON"]
    assert c["image"] == k8s.image_ref("cpu")  # bubblewrap, and the code's numpy and sympy
    assert c["args"][:3] == ["npu-rl", "sandbox", "serve"]
    assert c["args"][c["args"].index("--slots") + 1] == "6"
    assert c["args"][c["args"].index("--max-memory-mb") + 1] == "512"
    # A CPU per slot and the service's; each slot's memory and the service's half GiB; no NPU.
    limits = c["resources"]["limits"]
    assert limits["cpu"] == "7" and limits["memory"] == f"{6 * 512 + 512}Mi"
    assert c["resources"]["requests"] == {"cpu": "7", "memory": limits["memory"]}
    assert not any(k.startswith("huawei.com/") for k in limits)
    sc = c["securityContext"]
    assert sc["allowPrivilegeEscalation"] is False and sc["readOnlyRootFilesystem"] is True
    assert sc["capabilities"] == {"drop": ["ALL"], "add": ["SETUID", "SETGID", "KILL"]}
    # What each jail needs of the runtime (the compose service's systempaths and seccomp, in pod terms).
    assert sc["procMount"] == "Unmasked"
    assert sc["seccompProfile"] == {"type": "Unconfined"} and sc["appArmorProfile"] == {"type": "Unconfined"}
    assert c["readinessProbe"]["httpGet"]["path"] == "/v1/ping"


@pytest.mark.parametrize("target", k8s.TARGETS)
def test_the_training_reaches_the_sandbox_through_the_jobs_service(target):
    docs = _docs(target)
    kinds = _kinds(docs)
    (svc,) = kinds["Service"]
    (policy,) = kinds["NetworkPolicy"]
    _, tmpl = _sandbox_pod(target, docs)
    pod_labels = tmpl["metadata"]["labels"]
    assert all(pod_labels[k] == v for k, v in svc["spec"]["selector"].items())
    assert all(pod_labels[k] == v for k, v in policy["spec"]["podSelector"]["matchLabels"].items())
    assert policy["spec"]["egress"] == [] and "Egress" in policy["spec"]["policyTypes"]
    port = svc["spec"]["ports"][0]["port"]
    url = f"http://{svc['metadata']['name']}:{port}/run_code"
    args = _train_args(target, docs)
    assert args[:2] == ["npu-rl", "train"] and f"sandbox.url={url}" in args
    # The recipe the training reads (the ConfigMap) with that URL is the one the launch exports.
    (cm,) = kinds["ConfigMap"]
    data = yaml.safe_load(cm["data"][k8s.RECIPE_FILE])
    recipe = load_recipe(QWEN, {**{f"{k}": v for k, v in SETS.items()}, "sandbox.url": url})
    assert data["sandbox"]["enabled"] is True and recipe.sandbox.run_code_url == url
    if target == "volcano":
        # Gang-scheduled with the job, and ended with it.
        job = kinds["Job"][0]
        assert job["spec"]["minAvailable"] == 2 + 2


@pytest.mark.parametrize("target", k8s.TARGETS)
def test_sandbox_manifests_are_valid_kubernetes(target, crd_schemas):
    version = kubernetes_validate.latest_version()
    for doc in _docs(target):
        if doc["kind"] in ("Job", "RayJob"):
            jsonschema.validate(doc, crd_schemas[(doc["apiVersion"], doc["kind"])], cls=jsonschema.Draft7Validator)
        else:
            kubernetes_validate.validate(doc, version, strict=True)
    _, tmpl = _sandbox_pod(target, _docs(target))
    wrapped = {"apiVersion": "v1", "kind": "PodTemplate", "metadata": {"name": "sandbox"}, "template": tmpl}
    kubernetes_validate.validate(wrapped, version, strict=True)


@pytest.mark.parametrize("target", k8s.TARGETS)
def test_no_sandbox_pods_without_a_sandbox_or_with_a_url_of_ones_own(target):
    for sets in ({}, {"sandbox.enabled": True, "sandbox.url": "http://sandbox.example:8080/run_code"}):
        docs = _docs(target, sets)
        assert not [d for d in docs if d["kind"] in ("Service", "NetworkPolicy", "Deployment")]
        assert not [a for a in _train_args(target, docs) if a.startswith("sandbox.url=")]
