"""PNG plots of the key curves with the findings marked on them."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .rules import CRITICAL, Finding, validation_series
from .scalars import Series
from .thresholds import Thresholds
from .throughput import PARTS, STEP, THROUGHPUT, ThroughputCard

COLORS = {"warning": "#e69f00", CRITICAL: "#d62728"}


@dataclass(frozen=True)
class Plot:
    title: str
    path: Path
    metrics: tuple[str, ...]


def _panels(series: dict[str, Series], t: Thresholds) -> list[tuple[str, list[str], list[tuple[float, float]]]]:
    """(title, tags, healthy bands) of each plot, for the tags this run has."""
    panels = [
        ("Entropy", [t.entropy.metric], []),
        ("KL loss", [t.kl.metric], []),
        ("Policy-gradient loss", ["actor/pg_loss"], []),
        ("Clip fraction", [t.pg_clipfrac.metric], [(0.10, 0.25)]),
        ("Gradient norm", [t.grad_norm.metric], [(0.1, 1.0)]),
        ("Response length (mean)", [t.response_length.metric], []),
        ("Response clip ratio", [t.response_length.clip_metric], []),
        ("Training score", ["critic/score/mean"], []),
        # What the score is made of: answers in the box, right answers, restated computations.
        ("Reward parts", ["reward/boxed", "reward/acc", "reward/unevaluated"], []),
    ]
    for ds, pair in sorted(validation_series(series).items()):
        panels.append((f"Validation: {ds}", [s.tag for s in pair.values()], []))
    return [
        (title, [m for m in tags if m in series], bands)
        for title, tags, bands in panels
        if any(m in series for m in tags)
    ]


def _slug(text: str) -> str:
    return re.sub(r"[^0-9a-z]+", "_", text.lower()).strip("_")


def plot_panel(
    title: str,
    curves: list[Series],
    findings: list[Finding],
    bands: list[tuple[float, float]],
    path: Path,
    lines: Sequence[tuple[float, str]] = (),
    ylabel: str | None = None,
) -> Path:
    """One chart of ``curves`` with the findings marked, healthy ``bands`` shaded and horizontal
    reference ``lines`` (value, label) drawn."""
    import matplotlib  # lazy: matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # lazy: matplotlib

    fig, ax = plt.subplots(figsize=(7.5, 3.6), dpi=110)
    try:
        for s in curves:
            finite = np.isfinite(s.values)
            ax.plot(
                s.steps, np.where(finite, s.values, np.nan), marker="." if len(s) < 60 else None, lw=1.5, label=s.tag
            )
        for lo, hi in bands:
            ax.axhspan(lo, hi, color="#2ca02c", alpha=0.08, label=f"healthy {lo:g}-{hi:g}")
        for i, (value, label) in enumerate(lines):
            ax.axhline(
                value, color=("#555555", "#d62728", "#1f77b4")[i % 3], ls=(":", "--", "-.")[i % 3], lw=1.3, label=label
            )
        ymin, ymax = ax.get_ylim()
        for s in curves:
            bad = ~np.isfinite(s.values)
            if bad.any():
                # NaN/inf cannot be drawn on the axis; mark their steps at the bottom edge.
                ax.scatter(
                    s.steps[bad],
                    np.full(bad.sum(), ymin),
                    marker="x",
                    color=COLORS[CRITICAL],
                    zorder=5,
                    label=f"{s.tag}: NaN/inf",
                    clip_on=False,
                )
        ax.set_ylim(ymin, ymax)
        for f in findings:
            color = COLORS.get(f.severity, "gray")
            ax.axvline(f.step, color=color, ls="--", lw=1.2)
            if f.end_step is not None and f.end_step > f.step:
                ax.axvspan(f.step, f.end_step, color=color, alpha=0.12)
            ax.annotate(
                f"{f.severity}: {f.rule} @ {f.step}",
                xy=(f.step, ymax),
                xytext=(3, -12),
                textcoords="offset points",
                fontsize=8,
                color=color,
                va="top",
            )
        _save(fig, ax, title, ylabel, path)
    finally:
        plt.close(fig)
    return path


def _save(fig, ax, title: str, ylabel: str | None, path: Path, grid_axis: str = "both") -> None:
    """The axes every chart of the report shares (title, integer steps, grid, legend), written to ``path``."""
    from matplotlib.ticker import MaxNLocator  # lazy: matplotlib

    ax.set_title(title)
    ax.set_xlabel("step")
    if ylabel:
        ax.set_ylabel(ylabel)
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.grid(True, axis=grid_axis, alpha=0.3)
    ax.legend(fontsize=7, loc="best")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)


def plot_run(series: dict[str, Series], findings: list[Finding], t: Thresholds, out_dir: Path) -> list[Plot]:
    plots = []
    for title, tags, bands in _panels(series, t):
        marked = [f for f in findings if f.metric in tags]
        path = out_dir / f"{_slug(title)}.png"
        plot_panel(title, [series[m] for m in tags], marked, bands, path)
        plots.append(Plot(title, path, tuple(tags)))
    return plots


def plot_shares(title: str, steps: list[int], seconds: dict[str, list[float]], path: Path) -> Path:
    """Stacked bars: each step's time split into its parts (seconds)."""
    import matplotlib  # lazy: matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # lazy: matplotlib

    fig, ax = plt.subplots(figsize=(7.5, 3.6), dpi=110)
    try:
        bottom = np.zeros(len(steps))
        for part, values in seconds.items():
            ax.bar(steps, values, bottom=bottom, label=part, width=0.8)
            bottom += np.asarray(values)
        _save(fig, ax, title, "seconds", path, grid_axis="y")
    finally:
        plt.close(fig)
    return path


def plot_throughput(card: ThroughputCard, out_dir: Path) -> list[Plot]:
    """The throughput card's charts: tokens/s (per card where the recipe says what a card is, with the
    published figures that match the run as lines) and the step's time split, per step."""
    steps = np.array([s.step for s in card.per_step], dtype=np.int64)

    def curve(tag: str, field: str) -> Series:
        return Series(
            tag,
            steps,
            np.array([np.nan if (v := getattr(s, field)) is None else v for s in card.per_step], dtype=np.float64),
        )

    per_card = card.dies_per_card is not None
    unit = "tokens/s per card" if per_card else "tokens/s per device"
    curves = [
        curve(f"verl {THROUGHPUT} per card" if per_card else THROUGHPUT, "tps_card" if per_card else "tps_device")
    ]
    if per_card:
        curves.append(curve("MindSpeed-RL e2e_tps per card", "e2e_tps_card"))
    curves = [c for c in curves if np.isfinite(c.values).any()]
    lines = [(r.value, f"published: {r.name} ({r.value:g})") for r in card.references]
    plots = []
    if curves:
        path = plot_panel(f"Throughput ({unit})", curves, [], [], out_dir / "throughput.png", lines, unit)
        plots.append(Plot(f"Throughput ({unit})", path, (THROUGHPUT,)))
    seconds = {p: [s.seconds[p] for s in card.per_step] for p in PARTS}
    path = plot_shares("Step time by part", [int(s) for s in steps], seconds, out_dir / "step_time_parts.png")
    plots.append(Plot("Step time by part", path, (STEP,)))
    return plots
