"""The recipe's metric reading rules as code. Each rule reads the run's series and
returns findings: the step a problem starts, its value, and what to check."""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import asdict, dataclass

import numpy as np

from .scalars import Series
from .thresholds import Thresholds

WARNING, CRITICAL = "warning", "critical"
SEVERITY_RANK = {WARNING: 1, CRITICAL: 2}


@dataclass(frozen=True)
class Finding:
    rule: str
    severity: str
    metric: str
    step: int
    value: float
    message: str
    check: str
    end_step: int | None = None

    def to_dict(self) -> dict:
        d = asdict(self)
        d["value"] = None if not math.isfinite(self.value) else self.value
        d["value_text"] = _fmt(self.value)
        return d


@dataclass
class Context:
    series: dict[str, Series]
    thresholds: Thresholds
    # Known from the recipe: one optimizer step per batch, so the clip fraction is 0 by construction.
    on_policy: bool | None = None
    # (baseline accuracy, trained accuracy, trained step) from the evaluation table, percent.
    eval_accuracy: tuple[float, float, int] | None = None
    notes: list[str] | None = None

    def note(self, text: str) -> None:
        if self.notes is None:
            self.notes = []
        self.notes.append(text)


def _fmt(v: float) -> str:
    return "nan" if math.isnan(v) else ("inf" if math.isinf(v) else f"{v:.4g}")


def runs(mask: np.ndarray, min_len: int = 1) -> list[tuple[int, int]]:
    """(first, last) indices of each stretch of True at least ``min_len`` long."""
    out, start = [], None
    for i, flag in enumerate(list(mask) + [False]):
        if flag and start is None:
            start = i
        elif not flag and start is not None:
            if i - start >= min_len:
                out.append((start, i - 1))
            start = None
    return out


def running_median(values: np.ndarray, window: int, min_history: int) -> np.ndarray:
    """Median of the finite values among the previous ``window`` points (NaN until enough history)."""
    out = np.full(len(values), np.nan)
    for i in range(len(values)):
        prev = values[max(0, i - window) : i]
        prev = prev[np.isfinite(prev)]
        if len(prev) >= min_history:
            out[i] = float(np.median(prev))
    return out


def _finite_less(values: np.ndarray, limit: float) -> np.ndarray:
    return np.isfinite(values) & (values < limit)


def _finite_greater(values: np.ndarray, limit: float) -> np.ndarray:
    return np.isfinite(values) & (values > limit)


# --- rules ------------------------------------------------------------------------------


def entropy_collapse(ctx: Context) -> list[Finding]:
    t = ctx.thresholds.entropy
    s = ctx.series.get(t.metric)
    if s is None or not len(s):
        return []
    head = s.values[np.isfinite(s.values)][: t.baseline_points]
    if not len(head):
        return []
    start = float(np.median(head))
    limit = max(min(t.warn_below, t.fall_fraction * start), t.relative_floor * start)
    findings = []
    for a, b in runs(_finite_less(s.values, limit), t.min_points):
        critical = bool(np.any(s.values[a : b + 1] < t.critical_below))
        findings.append(
            Finding(
                "entropy_collapse",
                CRITICAL if critical else WARNING,
                t.metric,
                int(s.steps[a]),
                float(s.values[a]),
                f"entropy fell to {_fmt(s.values[a])} (started at {_fmt(start)}; limit {_fmt(limit)}) "
                f"and stayed there for {b - a + 1} logged steps",
                "Mode collapse: the policy stopped exploring. Check the rollouts for one repeated answer, the "
                "reward for a shortcut it exploits; consider a lower lr, entropy_coeff > 0 or a higher temperature.",
                int(s.steps[b]),
            )
        )
    return findings


def kl_health(ctx: Context) -> list[Finding]:
    t = ctx.thresholds.kl
    s = ctx.series.get(t.metric)
    if s is None or not len(s):
        return []
    findings = []
    for a, b in runs(_finite_greater(s.values, t.explode_above))[:1]:
        findings.append(
            Finding(
                "kl_explosion",
                WARNING,
                t.metric,
                int(s.steps[a]),
                float(s.values[a]),
                f"KL loss {_fmt(s.values[a])} exceeds {_fmt(t.explode_above)}",
                "The policy moves far from the reference model. Check kl_loss_coef and the learning rate, "
                "and whether the reward pulls the model somewhere degenerate.",
                int(s.steps[b]),
            )
        )
    # The first step's KL is 0 by construction (policy == reference); flat afterwards is not.
    later = s.values[1:]
    flat = np.isfinite(later) & (np.abs(later) <= t.flat_below)
    for a, b in runs(flat, t.flat_points)[:1]:
        findings.append(
            Finding(
                "kl_flat_zero",
                WARNING,
                t.metric,
                int(s.steps[a + 1]),
                float(later[a]),
                f"KL loss stays at 0 for {b - a + 1} logged steps while training should move the policy",
                "The model is not learning (or the reference is the policy itself). Check the learning rate, "
                "that the actor's gradients are non-zero (actor/grad_norm) and the reward's variance within groups.",
                int(s.steps[b + 1]),
            )
        )
    return findings


def non_finite(ctx: Context) -> list[Finding]:
    findings = []
    for metric in ctx.thresholds.nonfinite.metrics:
        s = ctx.series.get(metric)
        if s is None:
            continue
        bad = ~np.isfinite(s.values)
        if bad.any():
            i = int(np.argmax(bad))
            findings.append(
                Finding(
                    "non_finite",
                    CRITICAL,
                    metric,
                    int(s.steps[i]),
                    float(s.values[i]),
                    f"{metric} is {_fmt(s.values[i])} ({int(bad.sum())} of {len(s)} logged steps)",
                    "Training is numerically unstable. Check the first steps before it for grad_norm growth, "
                    "lower the learning rate, check bf16/fp32 settings and for empty or overlong responses.",
                    int(s.steps[np.flatnonzero(bad)[-1]]),
                )
            )
    return findings


def clip_fraction(ctx: Context) -> list[Finding]:
    t = ctx.thresholds.pg_clipfrac
    s = ctx.series.get(t.metric)
    if s is None or not len(s):
        return []
    findings = []
    for a, b in runs(_finite_greater(s.values, t.high_above), t.min_points):
        findings.append(
            Finding(
                "clipfrac_high",
                WARNING,
                t.metric,
                int(s.steps[a]),
                float(s.values[a]),
                f"pg_clipfrac above {t.high_above:.0%} for {b - a + 1} logged steps (healthy: 10-25%)",
                "Updates are too aggressive. Lower the learning rate or ppo_epochs, or use larger mini-batches.",
                int(s.steps[b]),
            )
        )
    finite = s.values[np.isfinite(s.values)]
    zero = len(finite) and float(np.max(np.abs(finite))) <= t.on_policy_zero
    if ctx.on_policy or zero:
        ctx.note(
            "pg_clipfrac low-side rule skipped: one optimizer step per batch (on-policy) makes the clip "
            "fraction 0 by construction."
        )
        return findings
    for a, b in runs(_finite_less(s.values, t.low_below), t.min_points):
        findings.append(
            Finding(
                "clipfrac_low",
                WARNING,
                t.metric,
                int(s.steps[a]),
                float(s.values[a]),
                f"pg_clipfrac below {t.low_below:.0%} for {b - a + 1} logged steps (healthy: 10-25%)",
                "The constraint may be too strong or the learning rate too low: check lr and the clip ratio.",
                int(s.steps[b]),
            )
        )
    return findings


def _jumps(
    s: Series, factor_mask: Callable[[np.ndarray, np.ndarray], np.ndarray], window: int, min_history: int
) -> list[tuple[int, int, float]]:
    med = running_median(s.values, window, min_history)
    mask = np.isfinite(med) & factor_mask(s.values, med)
    return [(a, b, float(med[a])) for a, b in runs(mask)]


def grad_norm_spikes(ctx: Context) -> list[Finding]:
    t = ctx.thresholds.grad_norm
    s = ctx.series.get(t.metric)
    if s is None or not len(s):
        return []
    findings = []
    for a, b, med in _jumps(s, lambda v, m: _finite_greater(v - t.spike_factor * m, 0) & (m > 0), t.window, t.min_history):
        findings.append(
            Finding(
                "grad_norm_spike",
                WARNING,
                t.metric,
                int(s.steps[a]),
                float(s.values[a]),
                f"grad_norm {_fmt(s.values[a])} is {s.values[a] / med:.1f}x its running median {_fmt(med)}",
                "A possible precursor of gradient explosion. Check the batch of that step (very long or "
                "degenerate responses), gradient clipping and the learning rate.",
                int(s.steps[b]),
            )
        )
    return findings


def response_length(ctx: Context) -> list[Finding]:
    t = ctx.thresholds.response_length
    findings = []
    s = ctx.series.get(t.metric)
    if s is not None and len(s):
        rises = _jumps(s, lambda v, m: _finite_greater(v - t.rise_factor * m, 0), t.window, t.min_history)
        drops = _jumps(s, lambda v, m: _finite_less(v - t.drop_factor * m, 0), t.window, t.min_history)
        for a, b, med in rises:
            findings.append(
                Finding(
                    "length_rise",
                    WARNING,
                    t.metric,
                    int(s.steps[a]),
                    float(s.values[a]),
                    f"mean response length jumped to {_fmt(s.values[a])} tokens ({s.values[a] / med:.1f}x "
                    f"its running median {_fmt(med)})",
                    "Possible degeneration: read the rollouts of that step for rambling or repeated text.",
                    int(s.steps[b]),
                )
            )
        for a, b, med in drops:
            findings.append(
                Finding(
                    "length_collapse",
                    WARNING,
                    t.metric,
                    int(s.steps[a]),
                    float(s.values[a]),
                    f"mean response length fell to {_fmt(s.values[a])} tokens ({s.values[a] / med:.2f}x "
                    f"its running median {_fmt(med)})",
                    "Possible lazy collapse: check the rollouts for near-empty answers and the reward for "
                    "paying short outputs.",
                    int(s.steps[b]),
                )
            )
    c = ctx.series.get(t.clip_metric)
    if c is not None and len(c):
        for a, b in runs(c.values >= t.clip_near_one, t.clip_points)[:1]:
            findings.append(
                Finding(
                    "length_clipped",
                    WARNING,
                    t.clip_metric,
                    int(c.steps[a]),
                    float(c.values[a]),
                    f"{c.values[a]:.0%} of responses hit max_response_length, for {b - a + 1} logged steps",
                    "Answers are cut off before they finish, so they cannot be graded correct. Raise "
                    "data.max_response_length, or check the rollouts for endless repetition.",
                    int(c.steps[b]),
                )
            )
    return findings


_VAL_TAG = re.compile(r"^val-(?:core|aux)/(?P<ds>.+)/(?P<var>reward|acc)/mean@(?P<n>\d+)$")


def validation_series(series: dict[str, Series]) -> dict[str, dict[str, Series]]:
    """{data source: {"reward"|"acc": series}} using the largest mean@N verl logged."""
    best: dict[tuple[str, str], tuple[int, Series]] = {}
    for tag, s in series.items():
        m = _VAL_TAG.match(tag)
        if m:
            key, n = (m["ds"], m["var"]), int(m["n"])
            if key not in best or n > best[key][0]:
                best[key] = (n, s)
    out: dict[str, dict[str, Series]] = {}
    for (ds, var), (_, s) in best.items():
        out.setdefault(ds, {})[var] = s
    return out


def reward_hacking(ctx: Context) -> list[Finding]:
    t = ctx.thresholds.reward_hacking
    findings = []
    reward_rose_at: int | None = None
    reward_gain = None
    for ds, pair in sorted(validation_series(ctx.series).items()):
        r = pair.get("reward")
        if r is None or len(r) < 2:
            continue
        finite = np.isfinite(r.values)
        if finite.sum() < 2:
            continue
        r0 = float(r.values[finite][0])
        gain = r.values - r0
        if not (np.isfinite(gain[-1]) and gain[-1] >= t.min_reward_gain):
            continue
        rose = runs(np.isfinite(gain) & (gain >= t.min_reward_gain))
        reward_rose_at = int(r.steps[rose[-1][0]]) if rose else int(r.steps[-1])
        reward_gain = (r0, float(r.values[-1]))
        a = pair.get("acc")
        if a is None or len(a) < 2:
            continue
        steps = np.intersect1d(r.steps, a.steps)
        if len(steps) < 2:
            continue
        rv = np.array([r.value_at(int(x)) for x in steps])
        av = np.array([a.value_at(int(x)) for x in steps])
        cond = np.isfinite(rv) & np.isfinite(av) & (rv - rv[0] >= t.min_reward_gain) & (av - av[0] < t.max_acc_gain)
        if not cond[-1]:
            continue
        start = runs(cond)[-1][0]
        findings.append(
            Finding(
                "reward_hacking",
                WARNING,
                r.tag,
                int(steps[start]),
                float(rv[start]),
                f"{ds}: validation reward rose {_fmt(rv[0])} -> {_fmt(rv[-1])} while its accuracy part stayed "
                f"{_fmt(av[0])} -> {_fmt(av[-1])}",
                "Reward hacking: the policy earns reward without solving more problems. Read validation "
                "generations for format-only answers, and check the reward's format/cot weights.",
                int(steps[-1]),
            )
        )
    if ctx.eval_accuracy is not None and reward_rose_at is not None:
        base, trained, step = ctx.eval_accuracy
        if trained - base <= t.eval_min_gain_points:
            assert reward_gain is not None
            findings.append(
                Finding(
                    "reward_hacking_eval",
                    WARNING,
                    "eval/accuracy",
                    step,
                    trained,
                    f"validation reward rose {_fmt(reward_gain[0])} -> {_fmt(reward_gain[1])} (from step "
                    f"{reward_rose_at}) but evaluation accuracy went {base:.2f} -> {trained:.2f}",
                    "The evaluation does not confirm the reward's gain: inspect the evaluated samples and the "
                    "reward function before trusting the validation curve.",
                )
            )
    return findings


RULES: list[Callable[[Context], list[Finding]]] = [
    non_finite,
    entropy_collapse,
    kl_health,
    clip_fraction,
    grad_norm_spikes,
    response_length,
    reward_hacking,
]


def apply_rules(ctx: Context) -> list[Finding]:
    findings = [f for rule in RULES for f in rule(ctx)]
    return sorted(findings, key=lambda f: (-SEVERITY_RANK[f.severity], f.step, f.rule))


def exit_code(findings: list[Finding]) -> int:
    """0 healthy, 1 warnings, 2 critical: what a scheduler alerts on."""
    return max((SEVERITY_RANK[f.severity] for f in findings), default=0)
