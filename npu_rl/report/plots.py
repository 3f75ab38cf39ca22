"""PNG plots of the key curves with the findings marked on them."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .rules import CRITICAL, Finding, validation_series
from .scalars import Series
from .thresholds import Thresholds

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
    ]
    for ds, pair in sorted(validation_series(series).items()):
        panels.append((f"Validation: {ds}", [s.tag for s in pair.values()], []))
    return [(title, [m for m in tags if m in series], bands) for title, tags, bands in panels if any(m in series for m in tags)]


def _slug(text: str) -> str:
    return re.sub(r"[^0-9a-z]+", "_", text.lower()).strip("_")


def plot_panel(
    title: str, curves: list[Series], findings: list[Finding], bands: list[tuple[float, float]], path: Path
) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    fig, ax = plt.subplots(figsize=(7.5, 3.6), dpi=110)
    try:
        for s in curves:
            finite = np.isfinite(s.values)
            ax.plot(s.steps, np.where(finite, s.values, np.nan), marker="." if len(s) < 60 else None, lw=1.5, label=s.tag)
        for lo, hi in bands:
            ax.axhspan(lo, hi, color="#2ca02c", alpha=0.08, label=f"healthy {lo:g}-{hi:g}")
        ymin, ymax = ax.get_ylim()
        for s in curves:
            bad = ~np.isfinite(s.values)
            if bad.any():
                # NaN/inf cannot be drawn on the axis; mark their steps at the bottom edge.
                ax.scatter(s.steps[bad], np.full(bad.sum(), ymin), marker="x", color=COLORS[CRITICAL], zorder=5,
                           label=f"{s.tag}: NaN/inf", clip_on=False)
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
        ax.set_title(title)
        ax.set_xlabel("step")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=7, loc="best")
        fig.tight_layout()
        path.parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(path)
    finally:
        plt.close(fig)
    return path


def plot_run(series: dict[str, Series], findings: list[Finding], t: Thresholds, out_dir: Path) -> list[Plot]:
    plots = []
    for title, tags, bands in _panels(series, t):
        marked = [f for f in findings if f.metric in tags]
        path = out_dir / f"{_slug(title)}.png"
        plot_panel(title, [series[m] for m in tags], marked, bands, path)
        plots.append(Plot(title, path, tuple(tags)))
    return plots
