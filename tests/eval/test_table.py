"""The result table: Markdown and CSV in the recipe's shape, deltas against the baseline."""

from __future__ import annotations

import pytest

from npu_rl.eval.table import ResultTable, Row


def _table():
    return ResultTable(
        [
            Row("base", 0, "MATH-lighteval", "accuracy", 40.0, baseline=True),
            Row("base", 0, "MATH-lighteval", "reward", 0.30, baseline=True),
            Row("base-rl-20", 20, "MATH-lighteval", "accuracy", 45.0),
            Row("base-rl-20", 20, "MATH-lighteval", "reward", 0.45),
            Row("base-rl-40", 40, "MATH-lighteval", "accuracy", 38.0),
        ]
    )


def test_deltas_pair_rows_by_dataset_and_metric():
    deltas = {(d.step, d.metric): d for d in _table().deltas()}
    assert set(deltas) == {(20, "accuracy"), (20, "reward"), (40, "accuracy")}
    assert deltas[(40, "accuracy")].points == pytest.approx(-2.0)
    assert deltas[(20, "accuracy")].relative == pytest.approx(12.5)


def test_no_baseline_means_no_deltas():
    assert ResultTable([Row("m", 5, "d", "accuracy", 1.0)]).deltas() == []
    assert (
        ResultTable([Row("b", 0, "d", "accuracy", 0.0, True), Row("m", 5, "d", "accuracy", 1.0)]).deltas()[0].relative
        is None
    )


def test_markdown_and_csv(tmp_path):
    table = _table()
    md = table.to_markdown().splitlines()
    assert md[0] == "| model | step | dataset | metric | score |"
    assert md[4] == "| base-rl-20 | 20 | MATH-lighteval | accuracy | 45.00 |"
    assert "- MATH-lighteval accuracy: 40.00 -> 38.00 at step 40 (-2.00 points, -5.0%)" in md
    csv_lines = table.to_csv().splitlines()
    assert csv_lines[0] == "model,step,dataset,metric,score,baseline,delta"
    assert csv_lines[1] == "base,0,MATH-lighteval,accuracy,40.00,1,"
    assert csv_lines[3] == "base-rl-20,20,MATH-lighteval,accuracy,45.00,0,+5.00"
    md_path, csv_path = table.write(tmp_path)
    back = ResultTable.read_csv(csv_path)
    assert back.rows == table.rows and md_path.read_text() == table.to_markdown()
