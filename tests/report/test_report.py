"""The report files (JSON, Markdown, PNGs, self-contained HTML) and the CLI's exit codes."""

from __future__ import annotations

import json
import math
import re

import pytest
from report_synth import VAL_ACC, VAL_REWARD, healthy_metrics, write_events

from npu_rl.cli import main
from npu_rl.errors import UserError
from npu_rl.eval.table import ResultTable, Row
from npu_rl.report import build_report

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def test_report_files_of_a_sick_run(tmp_path):
    metrics = healthy_metrics()
    metrics["actor/pg_loss"][17] = math.nan
    metrics["actor/grad_norm"][30] = 8.0
    run = write_events(tmp_path / "logs" / "tensorboard" / "proj" / "exp", metrics)
    report = build_report(tmp_path / "logs", tmp_path / "out")

    assert report.exit_code == 2 and report.status == "critical"
    data = json.loads(report.json.read_text())
    assert data["exit_code"] == 2 and data["steps"] == [1, 40]
    assert {(f["rule"], f["step"]) for f in data["findings"]} == {("non_finite", 17), ("grad_norm_spike", 30)}
    nan = next(f for f in data["findings"] if f["rule"] == "non_finite")
    assert nan["value"] is None and nan["value_text"] == "nan"

    titles = {p.title for p in report.plots}
    assert {"Entropy", "Gradient norm", "Policy-gradient loss", "Clip fraction"} <= titles
    assert any(t.startswith("Validation") for t in titles)
    for p in report.plots:
        assert p.path.read_bytes()[:8] == PNG_MAGIC and p.path.stat().st_size > 5000

    html = report.html.read_text()
    # Self-contained: every image is embedded, nothing is fetched.
    assert html.count("data:image/png;base64,") == len(report.plots)
    assert not re.search(r'(src|href)="(?!data:)', html)
    assert "non_finite" in html and "grad_norm_spike" in html
    assert "| critical | non_finite | actor/pg_loss | 17 | nan |" in report.markdown.read_text()
    assert run.is_dir()


def test_healthy_report_says_so(tmp_path):
    write_events(tmp_path / "run", healthy_metrics())
    report = build_report(tmp_path / "run")
    assert report.findings == [] and report.exit_code == 0
    assert report.out_dir == tmp_path / "run" / "report"
    assert "No findings" in report.html.read_text()


def test_eval_table_under_the_run_feeds_the_reward_check(tmp_path):
    metrics = healthy_metrics()
    del metrics[VAL_ACC]
    run = write_events(tmp_path / "logs" / "tb", metrics)
    table = ResultTable(
        [
            Row("tiny", 0, "MATH-lighteval", "accuracy", 12.0, baseline=True),
            Row("tiny-rl-40", 40, "MATH-lighteval", "accuracy", 11.0),
        ]
    )
    table.write(tmp_path / "logs" / "eval")
    report = build_report(tmp_path / "logs")
    assert [(f.rule, f.step) for f in report.findings] == [("reward_hacking_eval", 40)]
    assert "tiny-rl-40" in report.html.read_text()
    assert VAL_REWARD in {m for p in report.plots for m in p.metrics}
    assert run.is_dir()


@pytest.mark.parametrize(
    "inject, code",
    [
        (lambda m: None, 0),
        (lambda m: m["actor/grad_norm"].__setitem__(30, 8.0), 1),
        (lambda m: m["actor/pg_loss"].__setitem__(17, math.inf), 2),
    ],
    ids=["healthy", "warning", "critical"],
)
def test_cli_exit_codes(tmp_path, capsys, inject, code):
    metrics = healthy_metrics()
    inject(metrics)
    write_events(tmp_path / "run", metrics)
    assert main(["report", "--run", str(tmp_path / "run"), "--out", str(tmp_path / "out")]) == code
    out = capsys.readouterr().out
    assert "Training health" in out and str(tmp_path / "out" / "report.html") in out


def test_cli_bad_input_is_one_line(tmp_path, capsys):
    assert main(["report", "--run", str(tmp_path / "missing")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "run directory not found" in err
    (tmp_path / "empty").mkdir()
    with pytest.raises(UserError, match="no TensorBoard event files"):
        build_report(tmp_path / "empty")


def test_thresholds_file_from_the_cli(tmp_path):
    metrics = healthy_metrics()
    metrics["actor/grad_norm"][30] = 8.0
    write_events(tmp_path / "run", metrics)
    override = tmp_path / "t.yaml"
    override.write_text("grad_norm:\n  spike_factor: 50\n")
    assert main(["report", "--run", str(tmp_path / "run"), "--thresholds", str(override)]) == 0


def test_recipe_gives_the_run_dir_and_which_rules_apply(tmp_path, monkeypatch, capsys):
    import yaml

    recipe = {
        "name": "r",
        "model": {"path": "m"},
        "data": {"train_files": ["t"], "val_files": ["v"]},
        # One optimizer step per batch: on-policy, so a near-zero clip fraction is expected.
        "algorithm": {"train_batch_size": 4, "ppo_mini_batch_size": 4, "ppo_micro_batch_size_per_device": 1},
        "rollout": {"name": "hf"},
        "resources": {"platform": "cpu", "devices_per_node": 1},
        "logging": {"project": "p", "experiment": "e"},
    }
    path = tmp_path / "r.yaml"
    path.write_text(yaml.safe_dump(recipe))
    metrics = healthy_metrics()
    metrics["actor/pg_clipfrac"] = {s: 0.01 for s in metrics["actor/pg_clipfrac"]}
    write_events(tmp_path / "ws" / "logs" / "p" / "e" / "tensorboard", metrics)
    monkeypatch.setenv("NPU_RL_WORKSPACE", str(tmp_path / "ws"))
    assert main(["report", "--recipe", str(path)]) == 0
    assert "on-policy" in capsys.readouterr().out
    assert (tmp_path / "ws" / "logs" / "p" / "e" / "report" / "report.html").is_file()
    # Without the recipe the same curve is a warning.
    assert main(["report", "--run", str(tmp_path / "ws" / "logs" / "p" / "e")]) == 1
    assert main(["report"]) == 2
