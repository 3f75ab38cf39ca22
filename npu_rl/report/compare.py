"""``npu-rl report --compare BASE RUN``: two runs side by side (Markdown and a self-contained HTML
page with overlaid plots) and a verdict against the tolerances of ``thresholds.yaml`` (``compare``):
exit 0 when RUN is within them, 1 when one is exceeded. Runs are read as ``npu-rl report`` reads one
(``scalars.load_run``, the throughput card), and only runs measured under the same conditions are
compared unless forced."""

from __future__ import annotations

import base64
import json
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import UserError
from .builder import as_thresholds, render_template
from .plots import Plot, plot_panel
from .rules import validation_series
from .scalars import Series, load_run
from .thresholds import Thresholds
from .throughput import (
    PARTS,
    STEP,
    THROUGHPUT,
    ThroughputCard,
    conditions,
    fmt,
    logged_devices,
    logged_sequences,
    throughput_card,
)

ENTROPY, RESPONSE_LENGTH = "actor/entropy", "response_length/mean"


@dataclass
class Side:
    label: str  # BASE or RUN
    run_dir: Path
    recipe: Any  # None: not known
    series: dict[str, Series]
    card: ThroughputCard | None

    @property
    def name(self) -> str:
        return f"{self.label} ({self.recipe.name})" if self.recipe is not None else self.label


@dataclass(frozen=True)
class Check:
    """One tolerance: RUN against BASE. ``ok`` None: not compared (``detail`` says why)."""

    metric: str
    base: str
    run: str
    change: str
    tolerance: str
    ok: bool | None
    detail: str = ""

    @property
    def verdict(self) -> str:
        return {True: "ok", False: "FAIL", None: "not compared"}[self.ok]


@dataclass
class Comparison:
    base: Side
    run: Side
    checks: list[Check]
    rows: list[tuple[str, str, str]]  # (what, BASE, RUN): conditions and figures without a tolerance
    forced: list[str] = field(default_factory=list)  # condition differences --force let through
    plots: list[Plot] = field(default_factory=list)
    out_dir: Path | None = None
    html: Path | None = None
    json: Path | None = None

    @property
    def failures(self) -> list[Check]:
        return [c for c in self.checks if c.ok is False]

    @property
    def exit_code(self) -> int:
        return 1 if self.failures else 0

    def failure_lines(self) -> list[str]:
        return [f"FAIL {c.metric}: {c.detail}" for c in self.failures]

    def to_markdown(self) -> str:
        verdict = "exceeds a tolerance" if self.failures else "within tolerance"
        lines = [
            f"# Run comparison: {verdict}",
            "",
            f"BASE: {self.base.run_dir}",
            f"RUN:  {self.run.run_dir}",
            "",
            "| metric | BASE | RUN | RUN vs BASE | tolerance | verdict |",
            "|---|---|---|---|---|---|",
        ]
        lines += [
            f"| {c.metric} | {c.base} | {c.run} | {c.change} | {c.tolerance} | {c.verdict} |" for c in self.checks
        ]
        lines += ["", "| measured on / figure | BASE | RUN |", "|---|---|---|"]
        lines += [f"| {what} | {b} | {r} |" for what, b, r in self.rows]
        lines += [""] + [f"- note: {n}" for n in self.notes()]
        return "\n".join(lines).rstrip() + "\n"

    def notes(self) -> list[str]:
        notes = [f"{c.metric}: not compared, {c.detail}" for c in self.checks if c.ok is None]
        return notes + [f"compared with --force although {d}" for d in self.forced]

    def to_dict(self) -> dict:
        return {
            "verdict": "fail" if self.failures else "ok",
            "exit_code": self.exit_code,
            "base": str(self.base.run_dir),
            "run": str(self.run.run_dir),
            "checks": [vars(c) | {"verdict": c.verdict} for c in self.checks],
            "rows": [list(r) for r in self.rows],
            "forced": self.forced,
            "plots": [str(p.path) for p in self.plots],
        }


def side(label: str, run_dir: Path, recipe: Any, t: Thresholds) -> Side:
    """One run as ``npu-rl report`` reads it; a bad run is a UserError naming it."""
    if not run_dir.is_dir():
        raise UserError(f"{label} run not found: {run_dir}")
    series = load_run(run_dir)
    if not series:
        raise UserError(f"{label} run {run_dir} has no metrics (no TensorBoard event files or verl file-logger JSONL)")
    return Side(label, run_dir, recipe, series, throughput_card(series, recipe, t.throughput.warmup_steps))


def condition_differences(base: Side, run: Side) -> list[str]:
    """How the two runs' conditions differ: their recipes, and what verl logged about batch and devices."""
    diffs = []
    if base.recipe is not None and run.recipe is not None:
        if base.recipe.name != run.recipe.name:
            diffs.append(f"the runs have different recipes ({base.recipe.name} and {run.recipe.name})")
        cb, cr = conditions(base.recipe), conditions(run.recipe)
        diffs += [f"{k} differs ({cb[k]} and {cr[k]})" for k in cb if k != "recipe" and cb[k] != cr[k]]
    for what, read in (("sequences per step", logged_sequences), ("devices verl counted", logged_devices)):
        b = read(base.series, list(base.series[STEP].steps)) if STEP in base.series else None
        r = read(run.series, list(run.series[STEP].steps)) if STEP in run.series else None
        if b is not None and r is not None and abs(b - r) > 0.01 * max(b, r):
            diffs.append(f"the runs logged different {what} ({b:.0f} and {r:.0f})")
    return diffs


def _ratio_check(
    metric: str, b: float | None, r: float | None, limit: float, higher_is_worse: bool, unit: str
) -> Check:
    tol = f"RUN/BASE {'<=' if higher_is_worse else '>='} {limit:.3g}"
    if b is None or r is None:
        return _missing(metric, b, r, unit, tol)
    ratio = r / b
    ok = ratio <= limit if higher_is_worse else ratio >= limit
    side_word = "above" if higher_is_worse else "below"
    return Check(
        metric,
        f"{fmt(b)} {unit}",
        f"{fmt(r)} {unit}",
        f"x{ratio:.3f}",
        tol,
        ok,
        "" if ok else f"RUN/BASE {ratio:.3f} is {side_word} {limit:.3g} (BASE {fmt(b)}, RUN {fmt(r)} {unit})",
    )


def _missing(metric: str, b: float | None, r: float | None, unit: str, tol: str) -> Check:
    # A figure RUN no longer logs is a regression; one BASE lacks cannot be judged.
    if b is not None and r is None:
        return Check(metric, f"{fmt(b)} {unit}", "-", "-", tol, False, "RUN did not log it")
    who = "neither run logged it" if b is None and r is None else "BASE did not log it"
    return Check(
        metric, "-" if b is None else f"{fmt(b)} {unit}", "-" if r is None else f"{fmt(r)} {unit}", "-", tol, None, who
    )


def _peak(s: Series | None) -> float | None:
    if s is None:
        return None
    vals = s.values[np.isfinite(s.values)]
    return float(vals.max()) if vals.size else None


def _window_mean(s: Series | None, steps: list[int]) -> float | None:
    if s is None or not steps:
        return None
    vals = [s.value_at(x) for x in steps]
    vals = [v for v in vals if math.isfinite(v)]
    return float(np.mean(vals)) if vals else None


def checks(base: Side, run: Side, t: Thresholds, learning: bool = False) -> list[Check]:
    """Every tolerance; ``learning``: only what the run learnt (training reward, validation accuracy), for
    a BASE measured on another machine or day, whose speed and memory say nothing about RUN's."""
    if learning:
        return [_reward_check(base, run, t), *_validation_checks(base, run, t)]
    c = t.compare
    med = lambda s, k: s.card.medians.get(k) if s.card is not None else None  # noqa: E731
    out = [
        _ratio_check(
            f"throughput ({THROUGHPUT}, median after warm-up)",
            med(base, "tps_device"),
            med(run, "tps_device"),
            1 - c.throughput_drop,
            False,
            "tokens/s per device",
        ),
        _ratio_check(
            f"step time ({STEP}, median after warm-up)",
            med(base, "step_s"),
            med(run, "step_s"),
            1 + c.step_time_rise,
            True,
            "s",
        ),
    ]
    m = c.peak_memory_metric
    b, r = _peak(base.series.get(m)), _peak(run.series.get(m))
    tol = f"RUN - BASE <= +{c.peak_memory_rise_gb:g} GB"
    if b is None or r is None:
        out.append(_missing(f"peak memory ({m}, max)", b, r, "GB", tol))
    else:
        ok = r - b <= c.peak_memory_rise_gb
        d = round(r - b, 2) + 0.0  # no "-0.00"
        out.append(
            Check(
                f"peak memory ({m}, max)",
                f"{b:.2f} GB",
                f"{r:.2f} GB",
                f"{d:+.2f} GB",
                tol,
                ok,
                "" if ok else f"RUN - BASE is {d:+.2f} GB, above +{c.peak_memory_rise_gb:g} GB",
            )
        )
    out.append(_reward_check(base, run, t))
    return out


def _reward_check(base: Side, run: Side, t: Thresholds) -> Check:
    c = t.compare
    m = c.reward_metric
    what = f"reward ({m}, mean of steps {c.reward_first_step}-{c.reward_last_step})"
    tol = f"abs(RUN - BASE) <= {c.reward_mean_diff:g}"
    window = set(range(c.reward_first_step, c.reward_last_step + 1))
    bs, rs = base.series.get(m), run.series.get(m)
    in_base = sorted(window & {int(x) for x in bs.steps}) if bs is not None else []
    in_run = sorted(window & {int(x) for x in rs.steps}) if rs is not None else []
    if not in_base:
        return Check(what, "-", "-", "-", tol, None, "BASE logged none of these steps")
    common = sorted(set(in_base) & set(in_run))
    if not common:
        b = _window_mean(bs, in_base)  # None: BASE logged only NaN/inf there
        shown = "-" if b is None else f"{b:.3f}"
        return Check(what, shown, "-", "-", tol, False, "RUN logged none of the steps BASE has there")
    b, r = _window_mean(bs, common), _window_mean(rs, common)
    if b is None or r is None:  # only NaN/inf logged at those steps
        return _missing(what, b, r, "", tol)
    ok = abs(r - b) <= c.reward_mean_diff
    span = f" (steps {common[0]}-{common[-1]}, {len(common)} of BASE's {len(in_base)})" if common != in_base else ""
    return Check(
        what,
        f"{b:.3f}",
        f"{r:.3f}",
        f"{r - b:+.3f}{span}",
        tol,
        ok,
        "" if ok else f"RUN - BASE is {r - b:+.3f}, beyond +-{c.reward_mean_diff:g}{span}",
    )


def _validation_checks(base: Side, run: Side, t: Thresholds) -> list[Check]:
    """Per validation set: the accuracy at the last step both runs validated at."""
    limit = t.compare.validation_acc_diff
    tol = f"abs(RUN - BASE) <= {limit:g}"
    vb, vr = validation_series(base.series), validation_series(run.series)
    out = []
    for ds in sorted(vb):
        b = vb[ds].get("acc")
        if b is None:
            continue
        what = f"validation accuracy ({ds}, last common step)"
        r = vr.get(ds, {}).get("acc")
        common = sorted({int(x) for x in b.steps} & {int(x) for x in r.steps}) if r is not None else []
        if r is None or not common:
            out.append(Check(what, _last(b), "-", "-", tol, False, "RUN did not validate at a step BASE did"))
            continue
        step = common[-1]
        vb_, vr_ = float(b.value_at(step)), float(r.value_at(step))
        ok = abs(vr_ - vb_) <= limit
        out.append(
            Check(
                what,
                f"{vb_:.4g} (step {step})",
                f"{vr_:.4g} (step {step})",
                f"{vr_ - vb_:+.4f}",
                tol,
                ok,
                "" if ok else f"RUN - BASE is {vr_ - vb_:+.4f} at step {step}, beyond +-{limit:g}",
            )
        )
    return out


def _last(s: Series | None) -> str:
    if s is None or not len(s):
        return "-"
    return f"{s.values[-1]:.4g} (step {int(s.steps[-1])})"


def _median(s: Series | None) -> str:
    if s is None:
        return "-"
    vals = s.values[np.isfinite(s.values)]
    return f"{float(np.median(vals)):.4g}" if vals.size else "-"


def rows(base: Side, run: Side) -> list[tuple[str, str, str]]:
    def card_rows(s: Side) -> dict[str, str]:
        if s.card is None:
            return {}
        m = s.card.medians
        d = dict(s.card.conditions + s.card.logged)
        d["measured steps"] = f"{s.card.measured_range} ({s.card.warmup_steps} warm-up dropped)"
        d["tokens/s per card (verl)"] = fmt(m["tps_card"])
        d["e2e_tps per card (MindSpeed-RL)"] = fmt(m["e2e_tps_card"])
        d.update({f"share: {p}": f"{s.card.shares[p]:.0%}" for p in PARTS})
        return d

    b, r = card_rows(base), card_rows(run)
    out = [(k, b.get(k, "-"), r.get(k, "-")) for k in dict.fromkeys([*b, *r])]
    vb, vr = validation_series(base.series), validation_series(run.series)
    for ds in sorted(set(vb) | set(vr)):
        for kind in ("acc", "reward"):
            sb, sr = vb.get(ds, {}).get(kind), vr.get(ds, {}).get(kind)
            if sb is not None or sr is not None:
                out.append((f"validation {kind} {ds}, last", _last(sb), _last(sr)))
    for tag in (ENTROPY, RESPONSE_LENGTH):
        out.append((f"{tag}, median", _median(base.series.get(tag)), _median(run.series.get(tag))))
    return out


def _ratio_series(title: str, b: Series, r: Series) -> Series:
    common = np.intersect1d(b.steps, r.steps)
    vals = np.array([r.value_at(int(s)) / b.value_at(int(s)) if b.value_at(int(s)) else np.nan for s in common])
    return Series(title, common, vals)


def plot_comparison(base: Side, run: Side, t: Thresholds, out_dir: Path) -> list[Plot]:
    """Overlaid curves of both runs; step time and throughput as RUN/BASE with their tolerance lines."""
    c = t.compare
    plots = []

    def add(title: str, curves: list[Series], lines: Sequence[tuple[float, str]] = (), ylabel: str | None = None):
        curves = [s for s in curves if len(s)]
        if curves:
            slug = "".join(ch if ch.isalnum() else "_" for ch in title.lower()).strip("_")
            path = plot_panel(title, curves, [], [], out_dir / f"{slug}.png", list(lines), ylabel)
            plots.append(Plot(title, path, tuple(s.tag for s in curves)))

    for tag, title, limit in (
        (STEP, "Step time, RUN/BASE", 1 + c.step_time_rise),
        (THROUGHPUT, "Throughput, RUN/BASE", 1 - c.throughput_drop),
    ):
        if tag in base.series and tag in run.series:
            add(
                title,
                [_ratio_series(f"{tag} RUN/BASE", base.series[tag], run.series[tag])],
                [(1.0, "equal"), (limit, f"tolerance {limit:g}")],
                "RUN/BASE",
            )

    def both(tag: str) -> list[Series]:
        return [
            Series(f"{s.label} {tag}", s.series[tag].steps, s.series[tag].values)
            for s in (base, run)
            if tag in s.series
        ]

    add("Peak memory", both(c.peak_memory_metric), ylabel="GB")
    add("Training reward", both(c.reward_metric))
    vb, vr = validation_series(base.series), validation_series(run.series)
    for ds in sorted(set(vb) | set(vr)):
        curves = [
            Series(f"{label} {pair['acc'].tag}", pair["acc"].steps, pair["acc"].values)
            for label, pair in (("BASE", vb.get(ds, {})), ("RUN", vr.get(ds, {})))
            if "acc" in pair
        ]
        add(f"Validation accuracy: {ds}", curves)
    add("Entropy", both(ENTROPY))
    add("Response length (mean)", both(RESPONSE_LENGTH))
    return plots


def compare_runs(
    base_dir: str | Path,
    run_dir: str | Path,
    thresholds: Thresholds | Path | str | dict | None = None,
    *,
    base_recipe: Any = None,
    run_recipe: Any = None,
    out_dir: str | Path | None = None,
    force: bool = False,
    learning: bool = False,
) -> Comparison:
    """Compare RUN with BASE and write ``compare.json``, ``compare.md``, ``plots/*.png`` and
    ``compare.html`` to ``out_dir`` (default ``<RUN>/report/compare``). Runs of different recipes or
    conditions are a UserError unless ``force``."""
    t = as_thresholds(thresholds)
    base = side("BASE", Path(base_dir), base_recipe, t)
    run = side("RUN", Path(run_dir), run_recipe, t)
    diffs = condition_differences(base, run)
    if diffs and not force:
        raise UserError(
            f"not comparable: {diffs[0]}"
            + (f" (+{len(diffs) - 1} more)" if len(diffs) > 1 else "")
            + "; --force compares anyway"
        )
    comp = Comparison(base, run, checks(base, run, t, learning), rows(base, run), forced=diffs)
    out = Path(out_dir) if out_dir else run.run_dir / "report" / "compare"
    out.mkdir(parents=True, exist_ok=True)
    comp.out_dir = out
    comp.plots = plot_comparison(base, run, t, out / "plots")
    comp.json = out / "compare.json"
    comp.json.write_text(json.dumps(comp.to_dict(), indent=2) + "\n", encoding="utf-8")
    (out / "compare.md").write_text(comp.to_markdown(), encoding="utf-8")
    comp.html = out / "compare.html"
    comp.html.write_text(_render_html(comp), encoding="utf-8")
    return comp


def _render_html(comp: Comparison) -> str:
    plots = [{"title": p.title, "data": base64.b64encode(p.path.read_bytes()).decode("ascii")} for p in comp.plots]
    return render_template("compare.html.j2", comp=comp, plots=plots)
