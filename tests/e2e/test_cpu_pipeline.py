"""The CPU pipeline end to end with real verl and real Ray: train 2 steps, resume to 4, merge, load."""

from __future__ import annotations

import re

import pytest
import torch

from npu_rl.cli import main
from npu_rl.launcher import run_files
from npu_rl.recipe import load_recipe
from npu_rl.report.scalars import load_run

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(1200)]

EXPERIMENT = "e2e"


def _train(steps: int) -> int:
    return main(["train", "--recipe", "tiny_math_cpu", "--set", f"algorithm.total_training_steps={steps}",
                 "--set", f"logging.experiment={EXPERIMENT}"])


def test_train_checkpoint_resume_merge_load(tmp_path, monkeypatch, capfd, tiny_model):
    monkeypatch.setenv("NPU_RL_WORKSPACE", str(tmp_path))
    recipe = load_recipe("tiny_math_cpu", {"logging.experiment": EXPERIMENT})
    tiny_model(run_files.model_dir(recipe), steps=100)
    assert main(["data", "math", "--from", "sample", "--out", str(tmp_path / "data" / "math-sample")]) == 0

    assert _train(2) == 0
    assert run_files.latest_step(recipe) == 2
    assert run_files.saved_steps(recipe) == [2]
    first = capfd.readouterr().out

    assert _train(4) == 0
    second = capfd.readouterr().out
    assert "resuming e2e from global_step_2" in second
    # verl continued at step 3: the resumed run logs steps 3 and 4 only
    assert re.findall(r"\bstep:(\d+) - ", first) and set(re.findall(r"\bstep:(\d+) - ", first)) == {"1", "2"}
    assert set(re.findall(r"\bstep:(\d+) - ", second)) == {"3", "4"}
    assert run_files.saved_steps(recipe) == [2, 4]

    scalars = load_run(run_files.log_root(recipe))
    assert list(scalars["timing_s/step"].steps) == [1, 2, 3, 4]
    for tag in ("actor/pg_loss", "actor/kl_loss", "critic/score/mean", "response_length/mean"):
        assert tag in scalars, tag

    assert main(["merge", "--recipe", "tiny_math_cpu", "--set", f"logging.experiment={EXPERIMENT}"]) == 0
    merged = run_files.merged_model_dir(recipe, 4)
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(merged)
    tok = AutoTokenizer.from_pretrained(merged)
    base = AutoModelForCausalLM.from_pretrained(run_files.model_dir(recipe))
    assert model.config.model_type == "qwen2"
    assert set(model.state_dict()) == set(base.state_dict())
    prompt = tok.apply_chat_template([{"role": "user", "content": "What is $2 + 3$?"}], add_generation_prompt=True,
                                     return_tensors="pt")
    out = model.generate(prompt, max_new_tokens=8, do_sample=False, pad_token_id=tok.pad_token_id)
    assert out.shape[1] > prompt.shape[1]
    assert torch.isfinite(model.model.embed_tokens.weight).all()
