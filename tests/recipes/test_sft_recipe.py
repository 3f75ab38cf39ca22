"""An SFT recipe (``sft:``) through the launch a user runs: `npu-rl train --recipe X` builds verl 0.9's SFT
trainer under torchrun from it, and what the SFT trainer cannot run is refused in one line before anything
starts. The run itself, its stop and its resume: tests/e2e/test_agent_run.py."""

from __future__ import annotations

import pytest

from npu_rl import run_files
from npu_rl.cli import main
from npu_rl.launcher.preflight import sft_total_steps
from npu_rl.launcher.spec import build_launch, hydra_args
from npu_rl.recipe import load_recipe

SFT_RECIPES = ["tiny_agent_sft_cpu", "qwen3_4b_retool_sft_a3", "qwen3_1_7b_code_toolcall_sft_a2"]


@pytest.mark.parametrize("name", SFT_RECIPES)
def test_the_launch_is_verls_sft_trainer_under_torchrun(name, tmp_path, monkeypatch):
    monkeypatch.setenv("NPU_RL_WORKSPACE", str(tmp_path))
    recipe = load_recipe(name)
    spec = build_launch(recipe)
    argv = list(spec.argv)
    n = recipe.resources.devices_per_node
    assert argv[1:8] == ["-m", "torch.distributed.run", "--standalone", "--nnodes=1", f"--nproc_per_node={n}",
                         "-m", "verl.trainer.sft_trainer"]  # fmt: skip
    config, overrides = hydra_args(argv)
    keys = dict(o.split("=", 1) for o in overrides)
    assert config == "sft_trainer_engine"
    assert keys["data.train_batch_size"] == str(recipe.algorithm.train_batch_size)
    assert keys["data.micro_batch_size_per_gpu"] == str(recipe.sft.micro_batch_size_per_device)
    assert keys["trainer.default_local_dir"] == str(run_files.checkpoint_root(recipe))
    assert not any(o.startswith("+ray_kwargs") for o in overrides)  # no Ray: torchrun's ranks inherit the env
    assert spec.attest_file is None
    want = ("sft_resume", "cpu", "file_logger") if recipe.resources.platform == "cpu" else ("sft_resume",)
    assert spec.patches == want


def test_a_resumed_launch_names_the_newest_complete_checkpoint(tmp_path, monkeypatch):
    monkeypatch.setenv("NPU_RL_WORKSPACE", str(tmp_path))
    recipe = load_recipe("tiny_agent_sft_cpu")
    root = run_files.checkpoint_root(recipe)
    for step, complete in ((80, True), (160, False)):
        d = root / f"global_step_{step}"
        d.mkdir(parents=True)
        for kind in ("model", "optim", "extra_state"):
            (d / f"{kind}_world_size_1_rank_0.pt").write_bytes(b"x")
        if complete:
            (d / "data_0.pt").write_bytes(b"x")  # the SFT trainer's dataloader state, written after the shards
    spec = build_launch(recipe)
    _, overrides = hydra_args(spec.argv)
    assert spec.start_step == 80
    assert f"trainer.resume_from_path={root / 'global_step_80'}" in overrides
    assert "trainer.resume_mode=resume_path" in overrides
    assert spec.notes == ("skipping damaged global_step_160: no data_0.pt (the save did not finish)",)
    assert run_files.merged_model_dir(recipe, 80) == root / "global_step_80" / "huggingface"


@pytest.mark.parametrize(
    "sets, says",
    [
        ({"algorithm.rollout_n": 8}, "algorithm.rollout_n is an RL setting and this is an SFT recipe"),
        ({"stack": "cann8.2-verl0.6"}, "npu-rl runs SFT through verl 0.9's SFT trainer"),
        ({"resources.nnodes": 2}, "npu-rl runs SFT on one node under torchrun"),
        ({"actor.strategy": "megatron", "resources.platform": "npu-a3"}, "sft trains with FSDP"),
        ({"sandbox.enabled": True}, "sandbox.enabled is for GRPO rollouts and this is an SFT recipe"),
        ({"sft.ulysses_sequence_parallel_size": 3, "model.use_remove_padding": True}, "does not divide the 2 devices"),
        ({"sft.ulysses_sequence_parallel_size": 2}, "needs model.use_remove_padding: true"),
        ({"checkpoint.save_freq": 0}, "checkpoint.save_freq 0 in an SFT recipe"),
        ({"resources.devices_per_node": 3}, "not divisible by the 3 data-parallel ranks"),
        ({"sft.use_dynamic_bsz": False, "sft.micro_batch_size_per_device": 5}, "does not divide the per-rank batch"),
    ],
)
def test_what_the_sft_trainer_cannot_run_is_refused_in_one_line(sets, says, capsys):
    base = {"resources.devices_per_node": 2}
    argv = ["train", "--recipe", "tiny_agent_sft_cpu", "--dry-run"]
    argv += [a for k, v in {**base, **sets}.items() for a in ("--set", f"{k}={v}")]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("npu-rl: error: ") and len(err.strip().splitlines()) == 1 and says in err, err


def test_steps_past_the_epochs_are_refused_before_the_trainer_would_stop_unsaved(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("NPU_RL_WORKSPACE", str(tmp_path))
    assert main(["data", "arithmetic", "--out", str(tmp_path / "data" / "arithmetic")]) == 0
    model = tmp_path / "models" / "tiny-qwen2-agent-base"
    assert main(["model", "tiny", "--recipe", "tiny_agent_sft_cpu", "--out", str(model)]) == 0
    capsys.readouterr()
    # 512 transcripts, 16 a step: 32 steps an epoch, 45 epochs.
    assert main(["train", "--recipe", "tiny_agent_sft_cpu", "--set", "algorithm.total_training_steps=1450"]) == 2
    err = capsys.readouterr().err
    assert err.strip() == (
        "npu-rl: error: algorithm.total_training_steps 1450 is past the 1440 steps of algorithm.total_epochs 45 "
        "(32 per epoch over 512 rows): verl's SFT trainer would stop there without saving its last step; set "
        "algorithm.total_epochs to 46 or more"
    )
    assert not (tmp_path / "logs").exists()  # nothing started


@pytest.mark.parametrize("name", SFT_RECIPES)
def test_a_dumped_sft_recipe_loads_again(name):
    # The rendered pods' copy of a recipe and `npu-rl recipe show` are its dump: the RL batch fields the SFT
    # section fills are in it.
    from npu_rl.recipe.schema import Recipe

    recipe = load_recipe(name)
    assert Recipe.model_validate(recipe.model_dump(exclude_unset=True)) == recipe


def test_an_epoch_bound_sft_run_knows_its_last_step_from_its_rows(tmp_path, monkeypatch):
    # A finished run re-run (a restarted pod) is then a no-op, not torchrun on every device training nothing.
    monkeypatch.setenv("NPU_RL_WORKSPACE", str(tmp_path))
    recipe = load_recipe("tiny_agent_sft_cpu", {"algorithm.total_training_steps": None, "algorithm.total_epochs": 3})
    assert sft_total_steps(recipe) is None  # no data yet
    assert main(["data", "arithmetic", "--out", str(tmp_path / "data" / "arithmetic")]) == 0
    assert sft_total_steps(recipe) == 3 * 32  # 512 transcripts, 16 a step
    assert sft_total_steps(load_recipe("tiny_agent_sft_cpu")) == 1440
