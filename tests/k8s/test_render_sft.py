"""An SFT recipe on Kubernetes: verl's SFT trainer runs under torchrun on one node without Ray, so its Volcano Job
is one `trainer` pod whose `npu-rl train --merge` trains and then merges the checkpoint its RL recipe starts from;
KubeRay, a Ray cluster nothing would use, is refused. The committed renderings (k8s.COMMITTED) also pass
test_render_k8s.py's checks: the CRD's and Kubernetes' schemas, the NPU requests, the ConfigMap's recipe."""

from __future__ import annotations

import jsonschema
import kubernetes_validate
import pytest
import yaml

from npu_rl import exit_codes, run_files
from npu_rl.cli import build_parser, main
from npu_rl.errors import UserError
from npu_rl.launcher.train import TrainResult
from npu_rl.recipe import load_recipe, parse_recipe
from npu_rl.render import k8s

# (SFT recipe, the RL recipe whose model.path is its merged checkpoint)
STAGES = [
    ("qwen3_4b_retool_sft_a3", "qwen3_4b_retool_dapo_a3"),
    ("qwen3_1_7b_code_toolcall_sft_a2", "qwen3_1_7b_code_toolcall_a2"),
]
SFT = [sft for sft, _ in STAGES]


def _docs(recipe) -> list[dict]:
    return [d for d in yaml.safe_load_all(k8s.render_text(recipe, "volcano")) if d]


def _one(docs, kind: str) -> dict:
    (doc,) = [d for d in docs if d["kind"] == kind]
    return doc


@pytest.mark.parametrize("name", SFT)
def test_the_sft_stages_volcano_job_is_committed(name):
    assert (name, "volcano", None) in k8s.COMMITTED


@pytest.mark.parametrize("name", SFT)
def test_one_trainer_pod_trains_and_merges_without_ray(name, crd_schemas):
    recipe = load_recipe(name)
    docs = _docs(recipe)
    assert sorted(d["kind"] for d in docs) == ["ConfigMap", "Job"]
    job = _one(docs, "Job")
    jsonschema.validate(job, crd_schemas[(job["apiVersion"], "Job")], cls=jsonschema.Draft7Validator)
    spec = job["spec"]
    (task,) = spec["tasks"]
    assert (task["name"], task["replicas"], spec["minAvailable"]) == ("trainer", 1, 1)
    version = kubernetes_validate.latest_version()
    kubernetes_validate.validate(_one(docs, "ConfigMap"), version, strict=True)
    pod = {"apiVersion": "v1", "kind": "PodTemplate", "metadata": {"name": "trainer"}, "template": task["template"]}
    kubernetes_validate.validate(pod, version, strict=True)
    (container,) = task["template"]["spec"]["containers"]
    resource = k8s._accelerator(recipe).resource
    devices = recipe.resources.devices_per_node
    assert container["resources"]["requests"][resource] == container["resources"]["limits"][resource] == devices
    step = k8s.next_stage(recipe).step
    recipe_path = f"{k8s.RECIPE_DIR}/{k8s.RECIPE_FILE}"
    assert container["args"] == ["npu-rl", "train", "--recipe", recipe_path, "--prepare", "--merge", str(step)]
    assert build_parser().parse_args(container["args"][1:]).merge == step
    # No Ray: no Ray command, token or variable, and no Volcano Service for Ray's peers to find each other.
    assert not [a for a in container["args"] if "ray" in a.lower()]
    assert not [e for e in container["env"] if e["name"].startswith("RAY_")]
    assert "ray-token" not in {v["name"] for v in task["template"]["spec"]["volumes"]}
    assert "plugins" not in spec
    # Volcano's policies: the GRPO jobs' for the codes an SFT run can exit with (no Ray's, the node watch's,
    # the gate's or the sandbox's), the same events after them.
    grpo = _one(_docs(load_recipe("qwen3_4b_retool_dapo_a3")), "Job")["spec"]
    own = {int(c) for c in exit_codes.SFT}
    assert spec["policies"] == [p for p in grpo["policies"] if "exitCode" not in p or p["exitCode"] in own]
    assert {p["exitCode"] for p in spec["policies"] if "exitCode" in p} == own
    assert task["policies"] == grpo["tasks"][0]["policies"]
    mounted = parse_recipe(yaml.safe_load(_one(docs, "ConfigMap")["data"][k8s.RECIPE_FILE]), "configmap")
    assert mounted.sft is not None and mounted.model_dump() == recipe.model_dump()


@pytest.mark.parametrize("sft, rl", STAGES)
def test_the_pod_merges_the_step_its_rl_recipe_starts_from(sft, rl):
    # The code agent's RL stage starts from step 50 of its SFT stage's 20 epochs, not from the last step.
    stage = k8s.next_stage(load_recipe(sft))
    assert stage is not None and stage.recipe == rl
    assert run_files.model_dir(load_recipe(rl)) == run_files.merged_model_dir(load_recipe(sft), stage.step)
    header = k8s.render_text(load_recipe(sft), "volcano").split("\n---\n", 1)[0]
    assert "SFT stage" in header and "no Ray" in header and f"the RL recipe {rl}" in header


def test_an_sft_recipe_no_rl_recipe_reads_merges_its_newest_checkpoint():
    recipe = load_recipe("qwen3_4b_retool_sft_a3", {"logging.experiment": "elsewhere"})
    assert k8s.next_stage(recipe) is None
    (task,) = _one(_docs(recipe), "Job")["spec"]["tasks"]
    assert task["template"]["spec"]["containers"][0]["args"][-2:] == ["--prepare", "--merge"]


def test_kuberay_is_refused_for_an_sft_recipe_in_one_line(tmp_path, capsys):
    argv = ["render", "k8s", "--recipe", SFT[0], "--target", "kuberay", "--out", str(tmp_path)]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("npu-rl: error: ") and len(err.strip().splitlines()) == 1, err
    assert "without Ray" in err and "--target volcano" in err
    assert not list(tmp_path.iterdir())


# --- the pod's command: `npu-rl train --merge` -----------------------------------------------------------------


@pytest.mark.parametrize("flag", ["--dry-run", "--rehearse"])
def test_train_refuses_merge_where_nothing_trains(flag, capsys):
    assert main(["train", "--recipe", SFT[0], flag, "--merge"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("npu-rl: error: --merge") and len(err.strip().splitlines()) == 1, err


@pytest.mark.parametrize(
    "code, args, merged",
    [(0, ["--merge"], [None]), (0, ["--merge", "50"], [50]), (0, [], []), (1, ["--merge"], []), (143, ["--merge"], [])],
)
def test_train_merges_after_a_clean_finish_only(code, args, merged, tmp_path, monkeypatch, capsys):
    import npu_rl.launcher.merge
    import npu_rl.launcher.train

    monkeypatch.setenv("NPU_RL_WORKSPACE", str(tmp_path))
    result = TrainResult(code, 1.0, None, None, tmp_path / "console.log", error="failed" if code == 1 else None)
    monkeypatch.setattr(npu_rl.launcher.train, "run_training", lambda recipe, **_: result)
    calls = []

    def merge(recipe, step=None):
        calls.append((recipe.name, step))
        return tmp_path / "huggingface"

    monkeypatch.setattr(npu_rl.launcher.merge, "merge", merge)
    assert main(["train", "--recipe", SFT[1], *args]) == code
    assert calls == [(SFT[1], step) for step in merged]
    assert ("merged model: " in capsys.readouterr().out) == bool(merged)


@pytest.mark.parametrize(
    ("sets", "why"),
    [
        ({"checkpoint.save_freq": 40}, "checkpoint.save_freq 40 never saves it"),
        ({"checkpoint.max_to_keep": 2}, "rotation may remove it"),
    ],
)
def test_a_step_the_sft_run_would_not_keep_is_refused_when_rendering(sets, why):
    # Else the pod would train the whole run and then fail its merge, aborting the job without the RL model.
    with pytest.raises(UserError) as err:
        k8s.render_text(load_recipe("qwen3_1_7b_code_toolcall_sft_a2", sets), "volcano")
    assert "recipe qwen3_1_7b_code_toolcall_a2 starts from global_step_50" in str(err.value)
    assert why in str(err.value)
