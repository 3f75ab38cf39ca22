"""The throughput card: verl's tokens/s per device and per card, MindSpeed-RL's e2e_tps, the step's
time shares, each per step and as the median after the warm-up steps, with the run's conditions and
the published figures whose conditions the recipe has. Runs are synthetic, written through
TensorBoard's writer, with verl's own throughput formula."""

from __future__ import annotations

import json
import statistics

import pytest
import yaml
from report_synth import healthy_metrics, with_timing, write_events

from npu_rl.errors import UserError
from npu_rl.recipe import load_recipe
from npu_rl.report import build_report, load_thresholds, references
from npu_rl.report.scalars import load_run
from npu_rl.report.throughput import PARTS, throughput_card

TINY = "tiny_math_cpu"  # cpu: 2 devices, batch 8 x n 8
DEEPSEEK = "deepseek_r1_671b_a3"  # Atlas A3: 16 x 16 dies, batch 512 x n 16, 1K in / 3K out


def _run(tmp_path, recipe, **kw):
    r = load_recipe(recipe)
    seqs = r.algorithm.train_batch_size * r.algorithm.rollout_n
    metrics = with_timing(
        healthy_metrics(), sequences=kw.pop("sequences", seqs), devices=kw.pop("devices", r.resources.world_size), **kw
    )
    return write_events(tmp_path / "run", metrics), metrics, r


def _after_warmup(metrics, tag, warmup=1):
    return [v for s, v in sorted(metrics[tag].items()) if s > warmup]


@pytest.fixture(autouse=True)
def _fresh_data_files():
    references.hardware.cache_clear()
    references.published.cache_clear()
    yield
    references.hardware.cache_clear()
    references.published.cache_clear()


def test_medians_leave_out_the_warm_up_and_follow_verls_throughput(tmp_path):
    run, metrics, recipe = _run(tmp_path, TINY)
    card = throughput_card(load_run(run), recipe, warmup_steps=1)
    assert card.warmup_steps == 1 and card.measured[0].step == 2 and card.measured[-1].step == 40
    assert card.medians["tps_device"] == pytest.approx(statistics.median(_after_warmup(metrics, "perf/throughput")))
    assert card.medians["step_s"] == pytest.approx(statistics.median(_after_warmup(metrics, "timing_s/step")))
    # The slow first step is in the per-step list but not in the medians.
    assert card.per_step[0].step == 1 and card.per_step[0].step_s > 2 * card.medians["step_s"]
    with_warmup = throughput_card(load_run(run), recipe, warmup_steps=0)
    assert with_warmup.warmup_steps == 0 and with_warmup.measured[0].step == 1


def test_e2e_tps_is_mindspeed_rls_formula_with_the_recipes_batch_and_world_size(tmp_path):
    run, metrics, recipe = _run(tmp_path, TINY)
    card = throughput_card(load_run(run), recipe)
    a, world = recipe.algorithm, recipe.resources.world_size
    for s in card.per_step:
        p, r, t = (metrics[k][s.step] for k in ("prompt_length/mean", "response_length/mean", "timing_s/step"))
        assert s.e2e_tps_device == pytest.approx((p + r) * a.train_batch_size * a.rollout_n / world / t)
    # Same tokens, same devices: MindSpeed-RL's figure and verl's agree when the recipe describes the run.
    assert card.medians["e2e_tps_device"] == pytest.approx(card.medians["tps_device"], rel=1e-3)
    assert not [n for n in card.notes if "recipe does not describe" in n]


def test_a_recipe_that_does_not_describe_the_run_is_said_so(tmp_path):
    run, _, recipe = _run(tmp_path, TINY, sequences=128, devices=4)
    card = throughput_card(load_run(run), recipe)
    assert any("logged 128 sequences per step" in n and "8 x 8 = 64" in n for n in card.notes)
    assert any("verl counted 4 devices" in n and "says 2" in n for n in card.notes)


def test_per_card_uses_the_platforms_dies_per_card_from_the_hardware_file(tmp_path, monkeypatch):
    run, _, recipe = _run(tmp_path, DEEPSEEK)
    card = throughput_card(load_run(run), recipe)
    dies = yaml.safe_load(references.HARDWARE.read_text())["npu-a3"]["dies_per_card"]
    assert card.dies_per_card == dies
    assert card.medians["tps_card"] == pytest.approx(card.medians["tps_device"] * dies)
    assert dict(card.conditions)["cards"].startswith(f"{recipe.resources.world_size // dies} x ")
    # The file is the one place that says it.
    data = yaml.safe_load(references.HARDWARE.read_text())
    data["npu-a3"]["dies_per_card"] = 4
    other = tmp_path / "hardware.yaml"
    other.write_text(yaml.safe_dump(data))
    monkeypatch.setattr(references, "HARDWARE", other)
    references.hardware.cache_clear()
    card4 = throughput_card(load_run(run), recipe)
    assert card4.medians["tps_card"] == pytest.approx(card.medians["tps_device"] * 4)


def test_time_shares_of_the_step(tmp_path):
    run, metrics, recipe = _run(tmp_path, TINY)
    card = throughput_card(load_run(run), recipe)
    steps = [s for s in sorted(metrics["timing_s/step"]) if s > 1]
    total = sum(metrics["timing_s/step"][s] for s in steps)

    def share(*tags, minus=()):
        return sum(sum(metrics[t][s] for t in tags) - sum(metrics[t][s] for t in minus) for s in steps) / total

    assert card.shares["generation"] == pytest.approx(share("timing_s/generate_sequences"))
    assert card.shares["weight sync/dispatch"] == pytest.approx(
        share("timing_s/gen", minus=["timing_s/generate_sequences"])
    )
    assert card.shares["ref"] == pytest.approx(share("timing_s/ref"))
    assert card.shares["update"] == pytest.approx(share("timing_s/update_actor"))
    assert card.shares["old_log_prob"] == 0 and any("old_log_prob pass did not run" in n for n in card.notes)
    assert sum(card.shares[p] for p in PARTS) == pytest.approx(1.0)
    # the rest of the step (reward, advantages, untimed); validation (timing_s/testing) is outside the step
    assert card.shares["other"] == pytest.approx(
        share("timing_s/step", minus=["timing_s/gen", "timing_s/ref", "timing_s/update_actor"])
    )


def test_published_figure_only_where_the_recipe_matches_it(tmp_path):
    run, _, recipe = _run(tmp_path, DEEPSEEK, prompt=900.0, response=2800.0)
    card = throughput_card(load_run(run), recipe)
    (ref,) = card.references
    published = yaml.safe_load(references.PUBLISHED.read_text())[0]
    assert ref.value == published["value"] and "cann-recipes-train" in ref.source
    assert ref.ratio == pytest.approx(card.medians["e2e_tps_card"] / ref.value)
    assert throughput_card(load_run(run), load_recipe(TINY)).references == []
    longer = load_recipe(DEEPSEEK, {"data.max_response_length": 4096})
    assert throughput_card(load_run(run), longer).references == []


def test_without_a_recipe_only_what_needs_none(tmp_path):
    run, metrics, _ = _run(tmp_path, TINY)
    card = throughput_card(load_run(run), None)
    assert card.medians["tps_device"] == pytest.approx(statistics.median(_after_warmup(metrics, "perf/throughput")))
    assert card.medians["tps_card"] is None and card.medians["e2e_tps_device"] is None and card.conditions == []
    assert dict(card.logged)["devices verl counted"] == "2"
    assert any("need --recipe" in n for n in card.notes)


def test_no_step_times_no_card(tmp_path):
    assert throughput_card(load_run(write_events(tmp_path / "run", healthy_metrics())), None) is None


def test_the_card_in_the_report_files(tmp_path):
    run, _, recipe = _run(tmp_path, DEEPSEEK)
    report = build_report(run, tmp_path / "out", recipe=recipe)
    data = json.loads(report.json.read_text())["throughput"]
    assert data["warmup_steps_dropped"] == 1 and data["measured_steps"][0] == 2
    assert data["conditions"]["global batch"] == "512" and data["conditions"]["n"] == "16"
    assert data["dies_per_card"] == 2 and data["references"][0]["value"] == 120
    html = report.html.read_text()
    section = html[html.index("<h2>Throughput</h2>") : html.index("<h2>Curves</h2>")]
    for text in (
        "global batch",
        "512",
        "max prompt/response length",
        "1024/3072",
        "full recompute",
        "e2e_tps",
        "weight sync/dispatch",
        "published: cann-recipes-train DeepSeek-R1 RL",
    ):
        assert text in section, text
    assert html.count("data:image/png;base64,") == len(report.plots)
    assert {"Throughput (tokens/s per card)", "Step time by part"} <= {p.title for p in report.plots}
    md = report.markdown.read_text()
    assert "## Throughput" in md and "1 warm-up step(s) dropped" in md and "global batch 512" in md


def test_warm_up_steps_come_from_the_thresholds(tmp_path):
    run, _, recipe = _run(tmp_path, TINY)
    t = load_thresholds({"throughput": {"warmup_steps": 3}})
    report = build_report(run, tmp_path / "out", t, recipe=recipe)
    assert report.throughput.warmup_steps == 3 and report.throughput.measured[0].step == 4
    with pytest.raises(UserError, match="throughput.warmup_steps"):
        load_thresholds({"throughput": {"warmup_steps": -1}})


def test_the_demo_summary_has_the_throughput_figures_and_the_report_the_whole_card(tmp_path, monkeypatch, capsys):
    from npu_rl import demo, run_files

    monkeypatch.setenv("NPU_RL_WORKSPACE", str(tmp_path))
    recipe = load_recipe(TINY)
    metrics = with_timing(healthy_metrics(), sequences=64, devices=2)
    write_events(run_files.tensorboard_dir(recipe), metrics)
    report = build_report(run_files.log_root(recipe), recipe=recipe)
    demo._summary(recipe, {"train": 1.0}, 1.0, report, (0.0, 10.0, 40))
    out = capsys.readouterr().out
    block = out[out.index("throughput            :") : out.index("reward mean per step")]
    # The summary keeps the two figures; the demo prints the whole card with the report just before it.
    assert "tokens/s per device" in block and "shares: generation" in block and len(block.splitlines()) == 2
    card = report.to_markdown()
    assert "1 warm-up step(s) dropped" in card and "e2e_tps" in card and "global batch 8" in card
