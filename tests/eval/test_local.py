"""The local backend on a tiny random Qwen2: counts, table shape, grading, batching."""

from __future__ import annotations

import shutil

import pytest
from eval_fixtures import DATA_SOURCE, PROBLEMS, build_tiny_qwen2, write_recipe, write_val_parquet

from npu_rl.cli import main
from npu_rl.errors import UserError
from npu_rl.eval import local
from npu_rl.eval.dataset import load_problems
from npu_rl.eval.grading import load_grader
from npu_rl.eval.table import ResultTable


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return build_tiny_qwen2(tmp_path_factory.mktemp("tiny"))


@pytest.fixture
def val(tmp_path):
    return write_val_parquet(tmp_path / "test.parquet")


def test_random_model_pipeline(tiny, val):
    result = local.evaluate(tiny, [val], limit=5, max_new_tokens=6, batch_size=2, progress=False, step=3)
    assert result.n == 5 and result.step == 3 and result.model == tiny.name
    assert [s.ground_truth for s in result.samples] == [a for _, a in PROBLEMS[:5]]
    assert all(isinstance(s.output, str) for s in result.samples)
    assert all(s.prompt.endswith("<|im_start|>assistant\n") for s in result.samples)
    rows = result.rows()
    assert [r.metric for r in rows] == ["accuracy", "reward", "boxed", "boxed accuracy"]
    assert {r.dataset for r in rows} == {"MATH-lighteval"}
    assert rows[0].score == pytest.approx(result.accuracy)
    boxed = [s for s in result.samples if s.boxed]
    assert rows[2].score == pytest.approx(100.0 * len(boxed) / result.n)


def test_batching_does_not_change_greedy_outputs(tiny):
    model, tok = local.load_model(tiny, "cpu")
    prompts = [
        tok.apply_chat_template([{"role": "user", "content": q}], add_generation_prompt=True, tokenize=False)
        for q, _ in PROBLEMS
    ]
    one = local.generate(model, tok, prompts, max_new_tokens=5, batch_size=1)
    many = local.generate(model, tok, prompts, max_new_tokens=5, batch_size=4)
    assert one == many
    assert any(one)


def test_correct_outputs_are_graded_correct(tiny, val, monkeypatch):
    # A "model" that answers every problem right: the grading path must count all of them.
    answers = {q: a for q, a in PROBLEMS}

    def perfect(model, tokenizer, prompts, **kw):
        return [f"Thus the answer is \\boxed{{{next(a for q, a in answers.items() if q in p)}}}." for p in prompts]

    monkeypatch.setattr(local, "generate", perfect)
    result = local.evaluate(tiny, [val], max_new_tokens=4, progress=False)
    assert (result.correct, result.n, result.accuracy) == (6, 6, 100.0)
    assert all(s.pred for s in result.samples)


def test_wrong_outputs_are_graded_wrong(tiny, val, monkeypatch):
    monkeypatch.setattr(local, "generate", lambda m, t, prompts, **kw: ["\\boxed{999}"] * len(prompts))
    result = local.evaluate(tiny, [val], max_new_tokens=4, progress=False)
    assert result.correct == 0 and result.accuracy == 0.0


def test_grader_is_the_training_reward():
    grader = load_grader()
    assert grader(DATA_SOURCE, "so \\boxed{\\frac{3}{4}}", "0.75")["acc"] == 1.0
    with pytest.raises(UserError, match="cannot be imported"):
        load_grader("npu_rl.reward.no_such_module")


def test_bad_inputs_fail_before_loading_a_model(tmp_path, val, tiny):
    with pytest.raises(UserError, match="validation file not found"):
        load_problems([tmp_path / "nope.parquet"])
    with pytest.raises(UserError, match="limit must be positive"):
        load_problems([val], limit=0)
    with pytest.raises(UserError, match="model directory not found"):
        local.evaluate(tmp_path / "nomodel", [val], progress=False)
    bad = tmp_path / "bad.parquet"
    bad.write_text("not parquet")
    with pytest.raises(UserError, match="not a readable parquet"):
        load_problems([bad])


def test_cli_local_eval_writes_the_table(tmp_path, tiny, monkeypatch, capfd, complete_checkpoint):
    """capfd: on the seeds' line the local eval runs itself again under its ISA pins (npu_rl.platform.cpu_isa),
    in a process whose output is this one's file descriptors."""
    ws = tmp_path / "ws"
    shutil.copytree(tiny, ws / "models" / "tiny")
    merged = complete_checkpoint(ws / "checkpoints" / "proj" / "exp" / "global_step_2", world=1)
    shutil.copytree(tiny, merged, dirs_exist_ok=True)
    write_val_parquet(ws / "data" / "test.parquet")
    recipe = write_recipe(tmp_path / "r.yaml")
    monkeypatch.setenv("NPU_RL_WORKSPACE", str(ws))

    assert main(["eval", "--recipe", str(recipe), "--limit", "3", "--batch-size", "3"]) == 0
    out_dir = ws / "logs" / "proj" / "exp" / "eval"
    table = ResultTable.read_csv(out_dir / "eval_table.csv")
    assert [(r.model, r.step, r.metric, r.baseline) for r in table.rows] == [
        ("tiny", 0, "accuracy", True),
        ("tiny", 0, "reward", True),
        ("tiny", 0, "boxed", True),
        ("tiny", 0, "boxed accuracy", True),
        ("tiny-rl-2", 2, "accuracy", False),
        ("tiny-rl-2", 2, "reward", False),
        ("tiny-rl-2", 2, "boxed", False),
        ("tiny-rl-2", 2, "boxed accuracy", False),
    ]
    # Same weights on both sides: the difference must be exactly zero.
    assert [d.points for d in table.deltas()] == [0.0, 0.0, 0.0, 0.0]
    assert len((out_dir / "samples" / "tiny-rl-2.jsonl").read_text().splitlines()) == 3
    assert "| model | step | dataset | metric | score |" in capfd.readouterr().out


def test_cli_names_what_is_missing(tmp_path, monkeypatch, capsys, complete_checkpoint):
    ws = tmp_path / "ws"
    ws.mkdir()
    recipe = write_recipe(tmp_path / "r.yaml")
    monkeypatch.setenv("NPU_RL_WORKSPACE", str(ws))
    assert main(["eval", "--recipe", str(recipe)]) == 2
    assert "no checkpoints under" in capsys.readouterr().err
    (ws / "checkpoints" / "proj" / "exp" / "global_step_6" / "actor").mkdir(parents=True)  # a husk: ignored
    complete_checkpoint(ws / "checkpoints" / "proj" / "exp" / "global_step_4", world=1)
    assert main(["eval", "--recipe", str(recipe)]) == 2
    assert "npu-rl merge --recipe tiny_test --step 4" in capsys.readouterr().err
