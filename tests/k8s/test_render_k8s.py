"""Rendered Volcano Jobs and KubeRay RayJobs: schema-valid, gang-sized, NPU-requesting, unprivileged."""

from __future__ import annotations

import shlex
from pathlib import Path

import kubernetes_validate
import pytest
import yaml

from npu_rl import defaults
from npu_rl.cli import build_parser, main
from npu_rl.errors import UserError
from npu_rl.recipe import load_recipe, parse_recipe
from npu_rl.render import k8s
from npu_rl.render.committed import render_all

QWEN = "qwen2_5_1_5b_math_a2_4card"


def a3_recipe(nnodes: int = 16):
    """An A3 recipe of the DeepSeek-R1 shape (16 nodes x 16 NPUs) that does not depend on its file."""
    data = load_recipe(QWEN).model_dump(mode="json", exclude_unset=True)
    data["name"] = "a3_shape_test"
    data["resources"] = {"platform": "npu-a3", "nnodes": nnodes, "devices_per_node": 16}
    return parse_recipe(data, "a3 test recipe")


# (recipe, target, nodes): the committed renderings plus multi-node shapes of both platforms.
CASES = [(name, target, nodes) for name, target, nodes in k8s.COMMITTED] + [
    (QWEN, "volcano", 2),
    (QWEN, "kuberay", 2),
    ("a3", "volcano", None),
    ("a3", "kuberay", None),
]


def _recipe(name: str):
    return a3_recipe() if name == "a3" else load_recipe(name)


def _render(name: str, target: str, nodes: int | None):
    recipe = _recipe(name)
    docs = list(yaml.safe_load_all(k8s.render_text(recipe, target, nodes)))
    return recipe, [d for d in docs if d is not None]


def _job(docs):
    (job,) = [d for d in docs if d["kind"] in ("Job", "RayJob")]
    return job


SANDBOX_TASK = "sandbox"  # a recipe's sandbox pods, beside the training pods (tests/k8s/test_render_sandbox.py)


def _pod_templates(job, sandbox: bool = False) -> list[tuple[str, int, dict]]:
    """(role, replicas, pod template) of every training pod group of the job (``sandbox``: the sandbox's too)."""
    if job["kind"] == "Job":
        tasks = [t for t in job["spec"]["tasks"] if sandbox or t["name"] != SANDBOX_TASK]
        return [(t["name"], t["replicas"], t["template"]) for t in tasks]
    spec = job["spec"]["rayClusterSpec"]
    groups = [("head", 1, spec["headGroupSpec"]["template"])]
    groups += [(g["groupName"], g["replicas"], g["template"]) for g in spec.get("workerGroupSpecs", [])]
    return groups


def _case_id(case) -> str:
    name, target, nodes = case
    return f"{name}-{target}" + (f"-{nodes}n" if nodes else "")


@pytest.fixture(params=CASES, ids=_case_id)
def rendered(request):
    name, target, nodes = request.param
    recipe, docs = _render(name, target, nodes)
    assert _nodes_of(docs) == (nodes or recipe.resources.nnodes)
    return recipe, target, docs


def test_gang_size_equals_pod_count(rendered):
    recipe, target, docs = rendered
    job = _job(docs)
    pods = sum(replicas for _, replicas, _ in _pod_templates(job))
    assert pods == _nodes_of(docs)
    if target == "volcano":
        # The gang holds the sandbox's pods too: a job whose tool calls have nowhere to run does not start.
        assert job["spec"]["minAvailable"] == sum(replicas for _, replicas, _ in _pod_templates(job, sandbox=True))
        assert job["spec"]["schedulerName"] == "volcano"
    else:
        assert job["metadata"]["labels"]["ray.io/scheduler-name"] == "volcano"
        assert "volcano.sh/queue-name" in job["metadata"]["labels"]
        for g in job["spec"]["rayClusterSpec"].get("workerGroupSpecs", []):
            # KubeRay's PodGroup counts minReplicas: all workers or none.
            assert g["minReplicas"] == g["replicas"] == g["maxReplicas"]


def _nodes_of(docs) -> int:
    (cm,) = [d for d in docs if d["kind"] == "ConfigMap"]
    return yaml.safe_load(cm["data"][k8s.RECIPE_FILE])["resources"]["nnodes"]


def test_every_pod_requests_the_nodes_npus_unprivileged_on_host_network(rendered):
    recipe, _, docs = rendered
    devices = _recipe_devices(docs)
    acc = k8s._accelerator(recipe)
    for role, _, tmpl in _pod_templates(_job(docs)):
        spec = tmpl["spec"]
        assert spec["hostNetwork"] is True, role
        assert spec["dnsPolicy"] == "ClusterFirstWithHostNet", role
        assert spec["nodeSelector"] == {"accelerator-type": acc.node_type}
        assert spec["restartPolicy"] == "Never"
        for c in spec["containers"]:
            assert c["resources"]["requests"][acc.resource] == devices
            assert c["resources"]["limits"][acc.resource] == devices
            assert not (c.get("securityContext") or {}).get("privileged", False), role
            mounts = {m["mountPath"]: m for m in c["volumeMounts"]}
            for path in k8s.K8S_HOST_MOUNTS:
                assert mounts[path].get("readOnly") is True, path
        volumes = {v["name"]: v for v in spec["volumes"]}
        assert volumes["dshm"]["emptyDir"]["medium"] == "Memory"
        assert "persistentVolumeClaim" in volumes["workspace"]


def _recipe_devices(docs) -> int:
    (cm,) = [d for d in docs if d["kind"] == "ConfigMap"]
    return yaml.safe_load(cm["data"][k8s.RECIPE_FILE])["resources"]["devices_per_node"]


def test_configmap_carries_the_recipe_the_head_trains(rendered):
    recipe, target, docs = rendered
    (cm,) = [d for d in docs if d["kind"] == "ConfigMap"]
    mounted = parse_recipe(yaml.safe_load(cm["data"][k8s.RECIPE_FILE]), "configmap")
    assert mounted.model_dump(exclude={"resources"}) == recipe.model_dump(exclude={"resources"})
    job = _job(docs)
    recipe_path = f"{k8s.RECIPE_DIR}/{k8s.RECIPE_FILE}"
    head = _pod_templates(job)[0][2]["spec"]
    assert {"name": "recipe", "configMap": {"name": cm["metadata"]["name"]}} in head["volumes"]
    if recipe.sft is not None:  # no Ray: the one pod trains (tests/k8s/test_render_sft.py)
        train = head["containers"][0]["args"]
    elif target == "volcano":
        args = head["containers"][0]["args"]
        assert args[:3] == ["npu-rl", "ray", "head"]
        train = args[args.index("--") + 1 :]
        assert args[args.index("--nodes") + 1] == str(mounted.resources.nnodes)
    else:
        entry = job["spec"]["entrypoint"]
        assert f"--nodes {mounted.resources.nnodes}" in entry
        wait, train_line = entry.split(" && ")
        assert shlex.split(wait)[:3] == ["npu-rl", "ray", "wait"]
        train = shlex.split(train_line)
    # The head prepares (fetch, data, weight conversion; skipped when present) and then trains the mounted recipe.
    assert train[0] == "npu-rl"
    parsed = build_parser().parse_args(train[1:])
    assert (parsed.command, parsed.recipe, parsed.prepare) == ("train", recipe_path, True)


def _volcano_action(policies: list[dict], event: str, exit_code: int) -> str | None:
    """Volcano's choice for a pod that ended with ``event`` and ``exit_code``: the first policy in list order
    whose event or exit code matches (volcano v1.12.4 job_controller_util.go applyPolicies, lines 244-268)."""
    for p in policies:
        events = [e for e in [p.get("event"), *p.get("events", [])] if e]
        if events and (event in events or "*" in events):
            return p["action"]
        if p.get("exitCode") is not None and p["exitCode"] == exit_code:
            return p["action"]
    return None


def _admissible(policies: list[dict]) -> None:
    """Volcano's admission rules for a policy list (v1.12.4 pkg/webhooks/admission/jobs/validate/util.go
    validatePolicies, lines 61-122): event xor exitCode, no exit code 0, no duplicate exit codes or events."""
    codes = [p["exitCode"] for p in policies if "exitCode" in p]
    events = [p["event"] for p in policies if "event" in p]
    assert all(("event" in p or "events" in p) != ("exitCode" in p) for p in policies), policies
    assert 0 not in codes and len(codes) == len(set(codes)) and len(events) == len(set(events)), policies


def test_volcano_policies_follow_the_exit_code_table():
    from npu_rl.exit_codes import ABORT, RESTART, Exit

    _, docs = _render(QWEN, "volcano", 2)
    spec = _job(docs)["spec"]
    policies = spec["policies"]
    _admissible(policies)
    # The code every bad input ends with (the CLI's one-line errors, the cross-node preflight) aborts.
    assert UserError("x").exit_code == Exit.BAD_INPUT and Exit.BAD_INPUT in ABORT
    for code in Exit:
        if code == Exit.OK:
            continue
        action = _volcano_action(policies, "PodFailed", int(code))
        want = "AbortJob" if code in ABORT else "RestartJob"
        assert action == want, (code.name, action)
    # The watchdog's, a lost node's and a frozen node's exits restart; an unknown crash or eviction does too.
    assert {Exit.HUNG, Exit.NODE_LOST} <= set(RESTART)
    assert _volcano_action(policies, "PodFailed", 137) == "RestartJob"
    assert _volcano_action(policies, "PodEvicted", 0) == "RestartJob"
    # Exit codes are only read from a Failed pod, which needs restartPolicy Never.
    for task in spec["tasks"]:
        assert task["template"]["spec"]["restartPolicy"] == "Never"
    assert spec["maxRetry"] == defaults.K8S_MAX_RETRY
    head = spec["tasks"][0]
    assert head["name"] == "head"
    assert {"event": "TaskCompleted", "action": "CompleteJob"} in head["policies"]
    assert {"svc", "env"} <= set(spec["plugins"])
    worker_args = spec["tasks"][1]["template"]["spec"]["containers"][0]["args"]
    assert worker_args[:3] == ["npu-rl", "ray", "worker"]


def test_kuberay_retries_a_failed_job_a_bounded_number_of_times():
    # KubeRay decides a retry from the Ray job's status, not an exit code (kuberay v1.3.2
    # ray-operator/controllers/ray/rayjob_controller.go checkBackoffLimitAndUpdateStatusIfNeeded, lines
    # 426-464): every failure, a bad recipe included, is retried up to backoffLimit times.
    _, docs = _render(QWEN, "kuberay", 2)
    assert _job(docs)["spec"]["backoffLimit"] == defaults.K8S_MAX_RETRY


def test_pods_may_read_other_processes_stacks():
    # py-spy (the watchdog's stack dump) needs CAP_SYS_PTRACE in a container.
    for target in ("volcano", "kuberay"):
        _, docs = _render(QWEN, target, 2)
        text = yaml.safe_dump(_job(docs))
        assert text.count("SYS_PTRACE") == 2, target


def test_kuberay_registers_npus_through_ray_start_params():
    _, docs = _render(QWEN, "kuberay", 2)
    job = _job(docs)
    assert job["metadata"]["annotations"]["ray.io/overwrite-container-cmd"] == "true"
    spec = job["spec"]["rayClusterSpec"]
    for params in [spec["headGroupSpec"]["rayStartParams"]] + [g["rayStartParams"] for g in spec["workerGroupSpecs"]]:
        # KubeRay pastes `--resources=<value>` into a shell command line.
        (arg,) = shlex.split(f"--resources={params['resources']}")
        assert yaml.safe_load(arg.split("=", 1)[1]) == {"NPU": 4}


def test_a3_job_has_sixteen_pods_of_sixteen_npus():
    _, docs = _render("a3", "volcano", None)
    job = _job(docs)
    assert job["spec"]["minAvailable"] == 16
    assert [(r, n) for r, n, _ in _pod_templates(job)] == [("head", 1), ("worker", 15)]
    spec = _pod_templates(job)[1][2]["spec"]
    assert spec["containers"][0]["resources"]["limits"]["huawei.com/Ascend910"] == 16
    # The recipe's documented hardware: Atlas 900 A3 SuperPoD nodes, as MindCluster labels them.
    assert spec["nodeSelector"]["accelerator-type"] == "module-a3-16-super-pod"
    assert _pod_templates(job)[1][2]["metadata"]["labels"]["ring-controller.atlas"] == "ascend-910b"


@pytest.mark.parametrize("cluster,label", [("box", "module-a3-16"), ("superpod-900", "module-a3-16-super-pod")])
def test_a3_node_label_follows_the_cluster_type(cluster, label):
    recipe = load_recipe("deepseek_r1_671b_a3", {"resources.cluster": cluster})
    docs = list(yaml.safe_load_all(k8s.render_text(recipe, "volcano")))
    for _, _, tmpl in _pod_templates(_job(docs)):
        assert tmpl["spec"]["nodeSelector"] == {"accelerator-type": label}


def test_a3_superpod_9000_nodes_hold_eight_npus():
    recipe = load_recipe("deepseek_r1_671b_a3", {"resources.cluster": "superpod-9000"})
    with pytest.raises(UserError, match="exceeds the 8 NPUs of a superpod-9000 node"):
        k8s.render_text(recipe, "volcano")
    with pytest.raises(UserError, match="is an Atlas A3 setting"):
        load_recipe(QWEN, {"resources.cluster": "box"})


def test_nodes_override_is_revalidated():
    with pytest.raises(UserError, match="not divisible"):
        k8s.render_text(load_recipe(QWEN), "volcano", nodes=3)


def test_cpu_recipe_renders_pods_that_ask_for_no_device():
    # The 2-node CPU training test runs these pods' commands (tests/cluster/test_cluster_faults.py).
    recipe = load_recipe("tiny_math_cpu", {"resources.nnodes": 2, "resources.devices_per_node": 1})
    docs = [d for d in yaml.safe_load_all(k8s.render_text(recipe, "volcano")) if d]
    job = next(d for d in docs if d["kind"] == "Job")
    for task in job["spec"]["tasks"]:
        pod = task["template"]["spec"]
        (container,) = pod["containers"]
        assert "nodeSelector" not in pod and "resources" not in container
        assert not [m for m in container["volumeMounts"] if m["mountPath"].startswith("/usr/local")]
        assert container["args"][container["args"].index("--devices") + 1] == "1"
    assert job["spec"]["minAvailable"] == 2


@pytest.mark.parametrize("kind", ["volcano", "kuberay"])
def test_a_cpu_recipe_sampling_with_vllm_runs_the_image_that_has_vllm(kind):
    # The cpu image has no vLLM: its pods would fail at the rollout's first import.
    sets = {"resources.nnodes": 2, "resources.devices_per_node": 1}
    images = {}
    for rollout in ("hf", "vllm"):
        text = k8s.render_text(load_recipe("tiny_math_cpu", {**sets, "rollout.name": rollout}), kind)
        job = _job([d for d in yaml.safe_load_all(text) if d])
        images[rollout] = {c["image"] for _, _, t in _pod_templates(job) for c in t["spec"]["containers"]}
    assert images["hf"] == {k8s.default_image(load_recipe("tiny_math_cpu"))}, images
    assert images["hf"] == {k8s.image_ref("cpu")}, images
    assert images["vllm"] == {k8s.image_ref("cpu-vllm")}, images


def test_too_many_devices_per_node_is_refused():
    data = load_recipe(QWEN).model_dump(mode="json", exclude_unset=True)
    data["resources"] = {"platform": "npu-a2", "nnodes": 1, "devices_per_node": 16}
    with pytest.raises(UserError, match="exceeds the 8 NPUs"):
        k8s.render_text(parse_recipe(data), "kuberay")


def test_cli_renders_a_volcano_job(tmp_path: Path, capsys):
    assert main(["render", "k8s", "--recipe", QWEN, "--target", "volcano", "--nodes", "2", "--out", str(tmp_path)]) == 0
    (path,) = tmp_path.iterdir()
    assert str(path) in capsys.readouterr().out
    assert _job(list(yaml.safe_load_all(path.read_text())))["spec"]["minAvailable"] == 2


# --- schemas (the CRDs' and Kubernetes' own: tests/k8s/conftest.py) -----------------------------------------


def test_custom_resources_match_their_crd(rendered, crd_schemas):
    import jsonschema

    job = _job(rendered[2])
    schema = crd_schemas[(job["apiVersion"], job["kind"])]
    jsonschema.validate(job, schema, cls=jsonschema.Draft7Validator)


def test_crd_check_catches_a_misspelled_field(crd_schemas):
    import jsonschema

    job = _job(_render(QWEN, "volcano", 2)[1])
    job["spec"]["minAvaliable"] = job["spec"].pop("minAvailable")
    with pytest.raises(jsonschema.ValidationError, match="minAvaliable"):
        jsonschema.validate(job, crd_schemas[("batch.volcano.sh/v1alpha1", "Job")], cls=jsonschema.Draft7Validator)


def test_builtin_kinds_and_pod_templates_are_valid_kubernetes(rendered):
    version = kubernetes_validate.latest_version()
    docs = rendered[2]
    for doc in docs:
        if doc["kind"] == "ConfigMap":
            kubernetes_validate.validate(doc, version, strict=True)
    for role, _, tmpl in _pod_templates(_job(docs)):
        wrapped = {"apiVersion": "v1", "kind": "PodTemplate", "metadata": {"name": role}, "template": tmpl}
        kubernetes_validate.validate(wrapped, version, strict=True)


# --- committed renderings ----------------------------------------------------------------------------------


def test_committed_renderings_are_up_to_date(repo_root: Path, tmp_path: Path):
    written = k8s.render_committed(tmp_path)
    assert written, "no committed renderings listed"
    for path in written:
        committed = repo_root / "k8s" / path.name
        assert committed.is_file(), f"k8s/{path.name} missing: run `npu-rl render all`"
        assert committed.read_text() == path.read_text(), f"k8s/{path.name} is stale: run `npu-rl render all`"
    stray = {p.name for p in (repo_root / "k8s").glob("*.yaml")} - {p.name for p in written}
    assert not stray, f"k8s/ has files no renderer writes: {sorted(stray)}"


def test_render_all_writes_the_k8s_directory(tmp_path: Path, monkeypatch):
    import npu_rl.render.committed as committed

    k8s_only = [(d, r) for d, r in committed.RENDERERS if d == "k8s"]
    assert k8s_only, "render_all does not render k8s/"
    monkeypatch.setattr(committed, "RENDERERS", k8s_only)
    assert {p.name for p in render_all(tmp_path)} == {k8s.output_name(_recipe(n), t) for n, t, _ in k8s.COMMITTED}


def test_the_readme_exit_code_table_is_the_exit_table(repo_root: Path):
    from npu_rl.exit_codes import Exit

    text = (repo_root / "docs" / "clusters.md").read_text(encoding="utf-8")
    section = text[text.index("## When a run fails on a cluster") :]
    rows = [line.split("|") for line in section.splitlines() if line.startswith("| ") and "`" in line]
    table = {cells[2].strip().strip("`"): int(cells[1]) for cells in rows if cells[1].strip().isdigit()}
    assert table == {code.name: int(code) for code in Exit}
