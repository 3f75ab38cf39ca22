"""MATH-lighteval -> verl conversion, on the team's sample and on real MATH500 problems."""

from __future__ import annotations

import json

import pyarrow as pa
import pyarrow.parquet as pq

from npu_rl.cli import main
from npu_rl.data.math import (
    DATA_SOURCE,
    INSTRUCTION,
    convert_rows,
    extract_ground_truth,
    prepare,
)
from npu_rl.data.sample import sample_dir


def test_conversion_matches_verl_math_dataset_format():
    rows, skipped = convert_rows(
        [
            {
                "problem": "What is $1+1$?",
                "level": "Level 1",
                "type": "Algebra",
                "solution": "We have $1+1=\\boxed{2}$. Also \\boxed{\\frac{1}{2}} is last.",
            }
        ],
        "train",
    )
    assert skipped == 0
    assert rows == [
        {
            "data_source": DATA_SOURCE,
            "prompt": [{"role": "user", "content": f"What is $1+1$? {INSTRUCTION}"}],
            "ability": "math",
            "reward_model": {"style": "rule", "ground_truth": "\\frac{1}{2}"},
            "extra_info": {"split": "train", "index": 0},
        }
    ]


def test_rows_without_a_boxed_answer_are_skipped():
    rows, skipped = convert_rows([{"problem": "p", "solution": "no box here"}], "test")
    assert (rows, skipped) == ([], 1)


def test_math500_ground_truths_equal_their_answer_field(math500, tmp_path):
    raw = [json.loads(line) for line in math500.read_text().splitlines() if line.strip()]
    assert len(raw) == 500
    # lay the problems out as MATH-lighteval parquet splits, as a user's offline copy would be
    src = tmp_path / "MATH-lighteval" / "data"
    src.mkdir(parents=True)
    cols = {k: [r[k] for r in raw] for k in ("problem", "solution", "level")}
    cols["type"] = [r["subject"] for r in raw]
    pq.write_table(pa.table(cols), src / "test-00000-of-00001.parquet")
    pq.write_table(pa.table({k: v[:50] for k, v in cols.items()}), src / "train-00000-of-00001.parquet")

    assert main(["data", "math", "--from", str(tmp_path / "MATH-lighteval"), "--out", str(tmp_path / "out")]) == 0
    out = pq.read_table(tmp_path / "out" / "test.parquet").to_pylist()
    truths = {r["extra_info"]["index"]: r["reward_model"]["ground_truth"] for r in out}
    same = sum(truths.get(i) == r["answer"] for i, r in enumerate(raw))
    # PRM800K's answer is the solution's last boxed expression for all but a handful of rows.
    assert same >= 480, f"only {same}/500 ground truths equal the MATH500 answer"
    assert all(r["prompt"][0]["content"].endswith(INSTRUCTION) for r in out)
    assert len(pq.read_table(tmp_path / "out" / "train.parquet")) == 50


def test_missing_columns_and_missing_split_are_one_line_errors(tmp_path, capsys):
    src = tmp_path / "src"
    src.mkdir()
    good = pa.table({"problem": ["p"], "solution": ["\\boxed{1}"]})
    pq.write_table(good, src / "train-00000-of-00001.parquet")
    assert main(["data", "math", "--from", str(src), "--out", str(tmp_path / "o")]) == 2
    assert "no test parquet file found" in capsys.readouterr().err
    pq.write_table(pa.table({"question": ["x"]}), src / "test-00000-of-00001.parquet")
    assert main(["data", "math", "--from", str(src), "--out", str(tmp_path / "o")]) == 2
    assert "missing column(s) problem, solution" in capsys.readouterr().err


def test_extract_ground_truth_takes_the_last_box():
    assert extract_ground_truth("a \\boxed{1} b \\boxed{x^2}") == "x^2"
    assert extract_ground_truth("nothing") is None


def test_prepare_reports_counts(tmp_path):
    counts = prepare(tmp_path, sample_dir())
    assert counts == {"train": 256, "test": 64}


def test_null_and_numeric_cells_are_skipped_and_an_empty_split_is_refused(tmp_path, capsys):
    src = tmp_path / "src"
    src.mkdir()
    pq.write_table(
        pa.table({"problem": ["p", None, "q"], "solution": ["\\boxed{1}", "\\boxed{2}", None]}),
        src / "train-00000-of-00001.parquet",
    )
    pq.write_table(pa.table({"problem": [1, 2], "solution": [3, 4]}), src / "test-00000-of-00001.parquet")
    assert main(["data", "math", "--from", str(src), "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("npu-rl: error: test: none of the 2 rows has a text problem")
    assert not list((tmp_path / "o").glob("*.parquet"))  # nothing half-written
    pq.write_table(pa.table({"problem": ["r"], "solution": ["\\boxed{5}"]}), src / "test-00000-of-00001.parquet")
    assert main(["data", "math", "--from", str(src), "--out", str(tmp_path / "o")]) == 0
    assert "train: 2 row(s) without a text problem or a \\boxed answer skipped" in capsys.readouterr().out
    assert pq.read_table(tmp_path / "o" / "train.parquet").num_rows == 1
