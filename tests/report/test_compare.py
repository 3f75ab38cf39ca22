"""`npu-rl report --compare BASE RUN`: the side-by-side table, the overlaid plots and the verdict
against the tolerances of thresholds.yaml; exit 0 within them, 1 with one line per metric that
failed, 2 with one error line on bad input."""

from __future__ import annotations

import json
import re

import pytest
import yaml
from report_synth import healthy_metrics, with_timing, write_events

from npu_rl import run_files
from npu_rl.cli import main
from npu_rl.recipe import load_recipe
from npu_rl.report.thresholds import DEFAULTS

TINY = "tiny_math_cpu"  # 2 devices, 8 x 8 sequences per step
TOL = yaml.safe_load(DEFAULTS.read_text())["compare"]


def _metrics(seed=0, **kw):
    return with_timing(healthy_metrics(seed), **({"sequences": 64, "devices": 2, "seed": seed} | kw))


def _slower(metrics, factor):
    """The same run with every step ``factor`` times as long (verl's throughput falls with it)."""
    out = {tag: dict(v) for tag, v in metrics.items()}
    for tag in [t for t in out if t.startswith("timing_s/")] + ["perf/time_per_step"]:
        out[tag] = {s: v * factor for s, v in out[tag].items()}
    out["perf/throughput"] = {s: v / factor for s, v in out["perf/throughput"].items()}
    return out


def _compare(tmp_path, capsys, base, run, *extra):
    b = write_events(tmp_path / "base", base)
    r = write_events(tmp_path / "run", run)
    code = main(["report", "--compare", str(b), str(r), "--recipe", TINY, "--out", str(tmp_path / "cmp"), *extra])
    return code, capsys.readouterr()


def _fails(out: str) -> list[str]:
    return [line for line in out.splitlines() if line.startswith("FAIL ")]


def test_same_run_twice_is_within_tolerance(tmp_path, capsys):
    code, cap = _compare(tmp_path, capsys, _metrics(), _metrics(seed=1))
    assert code == 0, cap.out
    assert "# Run comparison: within tolerance" in cap.out and _fails(cap.out) == []
    data = json.loads((tmp_path / "cmp" / "compare.json").read_text())
    assert [c["verdict"] for c in data["checks"]] == ["ok"] * 4
    html = (tmp_path / "cmp" / "compare.html").read_text()
    assert html.count("data:image/png;base64,") == len(data["plots"]) and not re.search(r'(src|href)="(?!data:)', html)
    titles = {p.split("/")[-1] for p in data["plots"]}
    assert {
        "step_time__run_base.png",
        "throughput__run_base.png",
        "peak_memory.png",
        "training_reward.png",
        "entropy.png",
        "response_length__mean.png",
    } <= titles
    assert any(t.startswith("validation_accuracy") for t in titles)
    # Each number beside what it was measured on.
    assert "| global batch | 8 | 8 |" in cap.out and "| devices verl counted | 2 | 2 |" in cap.out


def test_a_slower_run_fails_on_step_time_and_throughput(tmp_path, capsys):
    factor = 1 + 2 * TOL["step_time_rise"]
    code, cap = _compare(tmp_path, capsys, _metrics(), _slower(_metrics(), factor))
    assert code == 1
    fails = _fails(cap.out)
    assert len(fails) == 2 and fails[0].startswith("FAIL throughput") and fails[1].startswith("FAIL step time")
    ratio = float(re.search(r"RUN/BASE ([0-9.]+)", fails[1]).group(1))
    assert ratio == pytest.approx(factor, rel=0.01)


def test_a_slowdown_within_the_tolerance_passes(tmp_path, capsys):
    code, cap = _compare(tmp_path, capsys, _metrics(), _slower(_metrics(), 1 + TOL["step_time_rise"] / 3))
    assert code == 0 and _fails(cap.out) == []


def test_tolerances_come_from_the_thresholds(tmp_path, capsys):
    loose = tmp_path / "loose.yaml"
    loose.write_text("compare:\n  throughput_drop: 0.5\n  step_time_rise: 0.5\n")
    code, cap = _compare(tmp_path, capsys, _metrics(), _slower(_metrics(), 1.2), "--thresholds", str(loose))
    assert code == 0, cap.out


def test_more_peak_memory_fails_on_memory_alone(tmp_path, capsys):
    run = _metrics()
    run["perf/max_memory_allocated_gb"][20] += TOL["peak_memory_rise_gb"] + 0.5
    code, cap = _compare(tmp_path, capsys, _metrics(), run)
    assert code == 1
    assert [f.split(":")[0] for f in _fails(cap.out)] == ["FAIL peak memory (perf/max_memory_allocated_gb, max)"]


def test_reward_is_compared_over_its_window_only(tmp_path, capsys):
    first, last = TOL["reward_first_step"], TOL["reward_last_step"]
    inside = _metrics()
    for s in range(first, last + 1):
        inside["critic/score/mean"][s] += 2 * TOL["reward_mean_diff"]
    code, cap = _compare(tmp_path, capsys, _metrics(), inside)
    assert code == 1 and len(_fails(cap.out)) == 1 and _fails(cap.out)[0].startswith("FAIL reward")
    outside = _metrics()
    for s in outside["critic/score/mean"]:
        if s > last:
            outside["critic/score/mean"][s] += 1.0
    code, cap = _compare(tmp_path / "o", capsys, _metrics(), outside)
    assert code == 0, cap.out


def test_a_base_with_only_nan_rewards_shows_none_and_a_run_without_rewards_fails(tmp_path, capsys):
    base = _metrics()
    base["critic/score/mean"] = {s: float("nan") for s in base["critic/score/mean"]}
    run = _metrics()
    del run["critic/score/mean"]
    code, cap = _compare(tmp_path, capsys, base, run, "--learning")
    assert code == 1
    reward = json.loads((tmp_path / "cmp" / "compare.json").read_text())["checks"][0]
    assert (reward["base"], reward["run"], reward["verdict"]) == ("-", "-", "FAIL")
    assert reward["detail"] == "RUN logged none of the steps BASE has there"


def test_a_metric_run_stopped_logging_fails(tmp_path, capsys):
    run = _metrics()
    del run["perf/max_memory_allocated_gb"]
    code, cap = _compare(tmp_path, capsys, _metrics(), run)
    assert code == 1 and _fails(cap.out) == ["FAIL peak memory (perf/max_memory_allocated_gb, max): RUN did not log it"]


def _one_error_line(capsys, argv, match):
    try:
        code = main(argv)
    except SystemExit as exit:  # a usage error, reported by the CLI's parser
        code = exit.code
    assert code == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and err.startswith("npu-rl: error: ") and match in err, err


def test_bad_input_is_one_error_line(tmp_path, capsys):
    ok = str(write_events(tmp_path / "ok", _metrics()))
    _one_error_line(capsys, ["report", "--compare", str(tmp_path / "missing"), ok], "run directory not found")
    _one_error_line(capsys, ["report", "--compare", "no_such_recipe", ok], "neither a run directory nor a recipe")
    (tmp_path / "empty").mkdir()
    _one_error_line(capsys, ["report", "--compare", ok, str(tmp_path / "empty")], "has no metrics")
    bad = tmp_path / "bad.yaml"
    bad.write_text("compare:\n  reward_first_step: 20\n  reward_last_step: 10\n")
    _one_error_line(capsys, ["report", "--compare", ok, ok, "--thresholds", str(bad)], "reward_last_step")
    unknown = tmp_path / "unknown.yaml"
    unknown.write_text("compare:\n  throughput_dorp: 0.1\n")
    _one_error_line(capsys, ["report", "--compare", ok, ok, "--thresholds", str(unknown)], "compare.throughput_dorp")
    _one_error_line(capsys, ["report", "--compare", ok], "expected 2 arguments")
    _one_error_line(capsys, ["report", "--compare", ok, ok, "--run", ok], "not allowed with argument")
    _one_error_line(capsys, ["report", "--run", ok, "--force"], "--force goes with --compare")


def test_runs_of_different_recipes_need_force(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("NPU_RL_WORKSPACE", str(tmp_path))
    other = "qwen2_5_1_5b_math_a2_4card"
    for name in (TINY, other):
        r = load_recipe(name)
        seqs = r.algorithm.train_batch_size * r.algorithm.rollout_n
        write_events(run_files.tensorboard_dir(r), _metrics(sequences=seqs, devices=r.resources.world_size))
    _one_error_line(capsys, ["report", "--compare", TINY, other], f"different recipes ({TINY} and {other})")
    code = main(["report", "--compare", TINY, other, "--force"])
    out = capsys.readouterr().out
    assert code in (0, 1) and "compared with --force although the runs have different recipes" in out
    assert (run_files.log_root(load_recipe(other)) / "report" / "compare" / "compare.html").is_file()


def test_runs_that_logged_different_conditions_need_force(tmp_path, capsys):
    base = str(write_events(tmp_path / "b", _metrics()))
    run = str(write_events(tmp_path / "r", _metrics(devices=4)))
    _one_error_line(capsys, ["report", "--compare", base, run], "different devices verl counted (2 and 4)")
    assert main(["report", "--compare", base, run, "--force", "--out", str(tmp_path / "o")]) in (0, 1)


def test_learning_only_ignores_the_machine_and_names_what_was_learnt_differently(tmp_path, capsys):
    from report_synth import VAL_ACC

    # Another machine: every step three times as slow, more memory; the same learning.
    elsewhere = _slower(_metrics(), 3.0)
    elsewhere["perf/max_memory_allocated_gb"] = {
        s: v + 10 for s, v in elsewhere["perf/max_memory_allocated_gb"].items()
    }
    code, cap = _compare(tmp_path, capsys, _metrics(), elsewhere, "--learning")
    assert code == 0, cap.out
    checks = json.loads((tmp_path / "cmp" / "compare.json").read_text())["checks"]
    assert [c["metric"].split(" (")[0] for c in checks] == ["reward", "validation accuracy"]
    # A run that learnt less: its last validation accuracy, by name.
    worse = _metrics()
    last = max(worse[VAL_ACC])
    worse[VAL_ACC][last] -= 2 * TOL["validation_acc_diff"]
    code, cap = _compare(tmp_path / "w", capsys, _metrics(), worse, "--learning")
    assert code == 1 and _fails(cap.out) == [
        f"FAIL validation accuracy ({VAL_ACC.split('/', 1)[1].rsplit('/', 2)[0]}, last common step): RUN - BASE is "
        f"{-2 * TOL['validation_acc_diff']:+.4f} at step {last}, beyond +-{TOL['validation_acc_diff']:g}"
    ]
    _one_error_line(capsys, ["report", "--run", str(tmp_path / "base"), "--learning"], "--learning goes with --compare")
