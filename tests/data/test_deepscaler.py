"""DeepScaleR-Preview (deepscaler.json) -> verl parquet, through the CLI and the recipe's prepare step."""

from __future__ import annotations

import json

import pyarrow.parquet as pq
import pytest

from npu_rl.cli import main
from npu_rl.launcher.prepare import prepare_data
from npu_rl.recipe import load_recipe
from npu_rl.reward.math import compute_score


def _items(n: int) -> list[dict]:
    # Our own problems in the dataset's schema (problem, answer, solution).
    return [
        {"problem": f"What is ${k} + {k}$?", "answer": str(2 * k), "solution": f"${k}+{k}={2 * k}$"}
        for k in range(1, n + 1)
    ]


def test_cli_splits_in_file_order_with_raw_prompts(tmp_path):
    (tmp_path / "raw").mkdir()
    (tmp_path / "raw" / "deepscaler.json").write_text(json.dumps(_items(20)), encoding="utf-8")
    assert main(["data", "deepscaler", "--from", str(tmp_path / "raw"), "--out", str(tmp_path / "out")]) == 0
    train = pq.read_table(tmp_path / "out" / "train.parquet").to_pylist()
    test = pq.read_table(tmp_path / "out" / "test.parquet").to_pylist()
    assert [r["prompt"][0]["content"] for r in train] == [i["problem"] for i in _items(18)]
    assert [r["reward_model"]["ground_truth"] for r in test] == ["38", "40"]
    assert {r["data_source"] for r in train + test} == {"deepscaler"}
    # the ground truth is what the recipe's reward grades a boxed answer against
    assert (
        compute_score("deepscaler", "<answer>\\boxed{40}</answer>", test[-1]["reward_model"]["ground_truth"])["acc"]
        == 1.0
    )


def test_deepseek_recipe_prepares_deepscaler(tmp_path, monkeypatch):
    monkeypatch.setenv("NPU_RL_WORKSPACE", str(tmp_path))
    recipe = load_recipe("deepseek_r1_671b_a3")
    assert recipe.data.format == "deepscaler"
    raw = tmp_path / recipe.data.source_dir
    raw.mkdir(parents=True)
    (raw / "deepscaler.json").write_text(json.dumps(_items(10) + [{"problem": "", "answer": "1"}]), encoding="utf-8")
    prepare_data(recipe)
    train = pq.read_table(tmp_path / recipe.data.train_files[0]).to_pylist()
    val = pq.read_table(tmp_path / recipe.data.val_files[0]).to_pylist()
    assert (len(train), len(val)) == (9, 1)  # int(11 * 0.9) = 9 by position; the empty problem is skipped


@pytest.mark.parametrize(
    "content, message",
    [
        ("{}", "expected a JSON list"),
        ("not json", "not a JSON file"),
        (json.dumps([{"problem": "p"}] * 5), "no usable row"),
        (json.dumps([1, "x", None, {"problem": "p", "answer": ["1"]}] * 3), "no usable row"),
    ],
)
def test_bad_input_is_one_error_line(tmp_path, capsys, content, message):
    (tmp_path / "deepscaler.json").write_text(content, encoding="utf-8")
    assert main(["data", "deepscaler", "--from", str(tmp_path / "deepscaler.json"), "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("npu-rl: error:") and message in err[0]
    assert not (tmp_path / "o" / "train.parquet").exists()


@pytest.mark.parametrize("ratio", ["0", "1", "nan", "1.5", "abc"])
def test_bad_train_ratio_names_the_flag(tmp_path, capsys, ratio):
    with pytest.raises(SystemExit) as exit_:  # argparse's usage error; `npu-rl` exits with its code
        main(["data", "deepscaler", "--train-ratio", ratio, "--out", str(tmp_path / "o")])
    assert exit_.value.code == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.startswith("npu-rl: error:") and "--train-ratio" in line


def test_opencompass_eval_of_a_deepscaler_recipe_says_how_to_point_it_at_math(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("NPU_RL_WORKSPACE", str(tmp_path))
    for d in ("models/DeepSeek-R1-bf16", "m"):
        (tmp_path / d).mkdir(parents=True)
    code = main(
        [
            "eval",
            "--recipe",
            "deepseek_r1_671b_a3",
            "--backend",
            "opencompass",
            "--dry-run",
            "--model",
            str(tmp_path / "m"),
            "--baseline",
            "none",
        ]
    )
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and "--set data.format=math-lighteval" in err[0], err
