"""The recipe's metric reading rules as code. Each rule is a pure function of the run
(:class:`Context`) registered with :func:`rule`, which declares what to check and the
rule's scope: whether every stretch where the problem holds is a finding, or only the
first one. A rule returns :class:`Hit`s; ``rule`` turns them into :class:`Finding`s."""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Literal

import numpy as np

from . import thresholds as th
from .scalars import Series

WARNING, CRITICAL = "warning", "critical"
SEVERITY_RANK = {WARNING: 1, CRITICAL: 2}


@dataclass(frozen=True, kw_only=True)
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


@dataclass(frozen=True)
class Context:
    series: dict[str, Series]
    thresholds: th.Thresholds
    # Known from the recipe: one optimizer step per batch, so the clip fraction is 0 by construction.
    on_policy: bool | None = None
    # (baseline accuracy, trained accuracy, trained step) from the evaluation table, percent.
    eval_accuracy: tuple[float, float, int] | None = None
    # A multi-turn recipe's most turns a rollout can have (the prompt, the policy's and the tools').
    turn_cap: int | None = None


@dataclass(frozen=True)
class Hit:
    """Where a rule found its problem: first step and value, last step, and what it saw."""

    metric: str
    step: int
    value: float
    message: str
    end_step: int | None = None
    critical: bool = False


# A rule's scope: every stretch where its problem holds, or the first one only (where a
# repeat says nothing new and one finding is what there is to act on).
Scope = Literal["every", "first"]


@dataclass(frozen=True)
class Rule:
    name: str
    scope: Scope
    check: str  # what to look at, the same for each finding of the rule
    # detect(ctx), or with ``reads`` = (thresholds section, its metric field) detect(section, series),
    # called only when the run logged that metric.
    detect: Callable[..., list[Hit]]
    reads: tuple[str, str] | None = None
    # Why the rule does not apply to a run (a note for the report), or None when it does.
    skipped: Callable[[Context], str | None] | None = None

    def findings(self, ctx: Context) -> list[Finding]:
        if self.skipped is not None and self.skipped(ctx):
            return []
        if self.reads is None:
            hits = self.detect(ctx)
        else:
            section = getattr(ctx.thresholds, self.reads[0])
            s = _series(ctx, getattr(section, self.reads[1]))
            hits = [] if s is None else self.detect(section, s)
        return [self.finding(h) for h in (hits[:1] if self.scope == "first" else hits)]

    def finding(self, hit: Hit) -> Finding:
        return Finding(
            rule=self.name,
            severity=CRITICAL if hit.critical else WARNING,
            metric=hit.metric,
            step=hit.step,
            value=hit.value,
            message=hit.message,
            check=self.check,
            end_step=hit.end_step,
        )


RULES: list[Rule] = []


def rule(
    scope: Scope,
    check: str,
    reads: tuple[str, str] | None = None,
    skipped: Callable[[Context], str | None] | None = None,
):
    """Register ``detect`` (returning hits in step order) as the rule named after it; see :class:`Rule`."""

    def register(detect: Callable[..., list[Hit]]):
        RULES.append(Rule(detect.__name__, scope, check, detect, reads, skipped))
        return detect

    return register


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


def _series(ctx: Context, metric: str) -> Series | None:
    s = ctx.series.get(metric)
    return s if s is not None and len(s) else None


def _hit(s: Series, a: int, b: int, message: str, critical: bool = False) -> Hit:
    """The stretch ``a..b`` (indices) of ``s``."""
    return Hit(s.tag, int(s.steps[a]), float(s.values[a]), message, int(s.steps[b]), critical)


# --- rules ------------------------------------------------------------------------------


@rule(
    "every",
    "Training is numerically unstable. Check the first steps before it for grad_norm growth, "
    "lower the learning rate, check bf16/fp32 settings and for empty or overlong responses.",
)
def non_finite(ctx: Context) -> list[Hit]:
    """One finding per metric, spanning its first to its last NaN/inf."""
    hits = []
    for metric in ctx.thresholds.nonfinite.metrics:
        s = ctx.series.get(metric)
        if s is None:
            continue
        bad = ~np.isfinite(s.values)
        if bad.any():
            i, last = int(np.argmax(bad)), int(np.flatnonzero(bad)[-1])
            hits.append(
                _hit(
                    s,
                    i,
                    last,
                    f"{metric} is {_fmt(s.values[i])} ({int(bad.sum())} of {len(s)} logged steps)",
                    critical=True,
                )
            )
    return hits


def _converged(ctx: Context) -> str | None:
    if ctx.eval_accuracy is None:
        return None
    base, trained, step = ctx.eval_accuracy
    if trained > base and trained >= ctx.thresholds.entropy.converged_accuracy:
        return (
            f"entropy_collapse rule skipped: held-out accuracy rose {base:.2f} -> {trained:.2f} at step {step} "
            f"(at least {ctx.thresholds.entropy.converged_accuracy:g}%): a policy that stops exploring a task it "
            "solves has converged."
        )
    return None


@rule(
    "every",
    "Mode collapse: the policy stopped exploring. Check the rollouts for one repeated answer, the "
    "reward for a shortcut it exploits; consider a lower lr, entropy_coeff > 0 or a higher temperature.",
    reads=("entropy", "metric"),
    skipped=_converged,
)
def entropy_collapse(t: th.Entropy, s: Series) -> list[Hit]:
    head = s.values[np.isfinite(s.values)][: t.baseline_points]
    if not len(head):
        return []
    start = float(np.median(head))
    limit = max(min(t.warn_below, t.fall_fraction * start), t.relative_floor * start)
    return [
        _hit(
            s,
            a,
            b,
            f"entropy fell to {_fmt(s.values[a])} (started at {_fmt(start)}; limit {_fmt(limit)}) "
            f"and stayed there for {b - a + 1} logged steps",
            critical=bool(np.any(s.values[a : b + 1] < t.critical_below)),
        )
        for a, b in runs(_finite_less(s.values, limit), t.min_points)
    ]


@rule(
    "first",
    "The policy moves far from the reference model. Check kl_loss_coef and the learning rate, "
    "and whether the reward pulls the model somewhere degenerate.",
    reads=("kl", "metric"),
)
def kl_explosion(t: th.Kl, s: Series) -> list[Hit]:
    """Scope first: later stretches above the limit add nothing to what to check."""
    return [
        _hit(s, a, b, f"KL loss {_fmt(s.values[a])} exceeds {_fmt(t.explode_above)}")
        for a, b in runs(_finite_greater(s.values, t.explode_above))
    ]


@rule(
    "first",
    "The model is not learning (or the reference is the policy itself). Check the learning rate, "
    "that the actor's gradients are non-zero (actor/grad_norm) and the reward's variance within groups.",
    reads=("kl", "metric"),
)
def kl_flat_zero(t: th.Kl, s: Series) -> list[Hit]:
    """Scope first: a policy that stopped moving once is the finding; later stretches repeat it."""
    # The first step's KL is 0 by construction (policy == reference); flat afterwards is not.
    later = s.values[1:]
    flat = np.isfinite(later) & (np.abs(later) <= t.flat_below)
    return [
        _hit(s, a + 1, b + 1, f"KL loss stays at 0 for {b - a + 1} logged steps while training should move the policy")
        for a, b in runs(flat, t.flat_points)
    ]


@rule(
    "every",
    "Updates are too aggressive. Lower the learning rate or ppo_epochs, or use larger mini-batches.",
    reads=("pg_clipfrac", "metric"),
)
def clipfrac_high(t: th.ClipFrac, s: Series) -> list[Hit]:
    return [
        _hit(s, a, b, f"pg_clipfrac above {t.high_above:.0%} for {b - a + 1} logged steps (healthy: 10-25%)")
        for a, b in runs(_finite_greater(s.values, t.high_above), t.min_points)
    ]


def _clip_fraction_zero_by_construction(ctx: Context) -> str | None:
    t = ctx.thresholds.pg_clipfrac
    s = _series(ctx, t.metric)
    if s is None:
        return None
    finite = s.values[np.isfinite(s.values)]
    zero = len(finite) and float(np.max(np.abs(finite))) <= t.on_policy_zero
    if ctx.on_policy or zero:
        return (
            "pg_clipfrac low-side rule skipped: one optimizer step per batch (on-policy) makes the clip "
            "fraction 0 by construction."
        )
    return None


@rule(
    "every",
    "The constraint may be too strong or the learning rate too low: check lr and the clip ratio.",
    reads=("pg_clipfrac", "metric"),
    skipped=_clip_fraction_zero_by_construction,
)
def clipfrac_low(t: th.ClipFrac, s: Series) -> list[Hit]:
    return [
        _hit(s, a, b, f"pg_clipfrac below {t.low_below:.0%} for {b - a + 1} logged steps (healthy: 10-25%)")
        for a, b in runs(_finite_less(s.values, t.low_below), t.min_points)
    ]


def _jumps(
    s: Series, factor_mask: Callable[[np.ndarray, np.ndarray], np.ndarray], window: int, min_history: int
) -> list[tuple[int, int, float]]:
    med = running_median(s.values, window, min_history)
    mask = np.isfinite(med) & factor_mask(s.values, med)
    return [(a, b, float(med[a])) for a, b in runs(mask)]


@rule(
    "every",
    "A possible precursor of gradient explosion. Check the batch of that step (very long or "
    "degenerate responses), gradient clipping and the learning rate.",
    reads=("grad_norm", "metric"),
)
def grad_norm_spike(t: th.GradNorm, s: Series) -> list[Hit]:
    spikes = _jumps(s, lambda v, m: _finite_greater(v - t.spike_factor * m, 0) & (m > 0), t.window, t.min_history)
    return [
        _hit(s, a, b, f"grad_norm {_fmt(s.values[a])} is {s.values[a] / med:.1f}x its running median {_fmt(med)}")
        for a, b, med in spikes
    ]


def _length_jumps(t: th.ResponseLength, s: Series, factor: float, above: bool, verb: str, digits: int) -> list[Hit]:
    beyond = _finite_greater if above else _finite_less
    jumps = _jumps(s, lambda v, m: beyond(v - factor * m, 0), t.window, t.min_history)
    return [
        _hit(
            s,
            a,
            b,
            f"mean response length {verb} {_fmt(s.values[a])} tokens ({s.values[a] / med:.{digits}f}x "
            f"its running median {_fmt(med)})",
        )
        for a, b, med in jumps
    ]


@rule(
    "every",
    "Possible degeneration: read the rollouts of that step for rambling or repeated text.",
    reads=("response_length", "metric"),
)
def length_rise(t: th.ResponseLength, s: Series) -> list[Hit]:
    return _length_jumps(t, s, t.rise_factor, True, "jumped to", 1)


@rule(
    "every",
    "Possible lazy collapse: check the rollouts for near-empty answers and the reward for paying short outputs.",
    reads=("response_length", "metric"),
)
def length_collapse(t: th.ResponseLength, s: Series) -> list[Hit]:
    return _length_jumps(t, s, t.drop_factor, False, "fell to", 2)


@rule(
    "first",
    "Answers are cut off before they finish, so they cannot be graded correct. Raise "
    "data.max_response_length, or check the rollouts for endless repetition. In a multi-turn run the tools' "
    "answers count toward it too (rollout.multi_turn.max_tool_response_length).",
    reads=("response_length", "clip_metric"),
)
def length_clipped(t: th.ResponseLength, c: Series) -> list[Hit]:
    """Scope first: once answers are cut off, the limit is what to raise; later stretches say the same."""
    return [
        _hit(c, a, b, f"{c.values[a]:.0%} of responses hit max_response_length, for {b - a + 1} logged steps")
        for a, b in runs(c.values >= t.clip_near_one, t.clip_points)
    ]


@rule(
    "first",
    "Tool calls fail in the sandbox, so the policy reads error text instead of results. Check the sandbox's "
    "/health (its slots, queue and rejected requests) and tools.code_interpreter.run_timeout_s; a run stops by "
    "itself only once every call fails for tools.code_interpreter.down_s.",
)
def tool_errors(ctx: Context) -> list[Hit]:
    t = ctx.thresholds.agent
    calls, errors = _series(ctx, t.calls_metric), _series(ctx, t.errors_metric)
    if calls is None or errors is None:
        return []
    steps = [int(st) for st in calls.steps if int(st) in {int(e) for e in errors.steps}]
    rates = np.array([errors.value_at(st) / c if (c := calls.value_at(st)) > 0 else 0.0 for st in steps])
    rate = Series(f"{t.errors_metric} / {t.calls_metric}", np.array(steps), rates)
    return [
        _hit(
            rate,
            a,
            b,
            f"{rate.values[a]:.0%} of tool calls did not run, for {b - a + 1} logged steps",
            critical=bool(np.all(rate.values[a : b + 1] >= 1.0)),
        )  # fmt: skip
        for a, b in runs(rates > t.error_rate_above, t.min_points)
    ]


@rule(
    "first",
    "Rollouts run into the turn cap instead of ending with an answer: the policy loops on its tool. Read the "
    "rollouts; raise rollout.multi_turn.max_assistant_turns / max_user_turns only if the task needs more turns.",
)
def turns_at_cap(ctx: Context) -> list[Hit]:
    t = ctx.thresholds.agent
    s = _series(ctx, t.turns_metric)
    if s is None or ctx.turn_cap is None:
        return []
    return [
        _hit(s, a, b, f"a rollout reached the cap of {ctx.turn_cap} turns at each of {b - a + 1} logged steps")
        for a, b in runs(s.values >= ctx.turn_cap, t.cap_points)
    ]


_VAL_TAG = re.compile(r"^val-(?:core|aux)/(?P<ds>.+)/(?P<var>reward|acc|boxed)/mean@(?P<n>\d+)$")


def validation_series(series: dict[str, Series]) -> dict[str, dict[str, Series]]:
    """{data source: {"reward"|"acc"|"boxed": series}} using the largest mean@N verl logged (``boxed``: the
    share of answers in the required box, where the reward reports it)."""
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


@dataclass(frozen=True)
class _RewardRise:
    source: str  # the validation data source
    first: float  # its first finite validation reward
    last: float
    rose_at: int  # the step from which the reward stayed up
    acc: Series | None  # the reward's accuracy part, where verl logged one
    reward: Series


def _reward_rises(ctx: Context) -> list[_RewardRise]:
    """The validation data sources whose reward ends at least ``min_reward_gain`` above where it began."""
    t = ctx.thresholds.reward_hacking
    rises = []
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
        up = runs(np.isfinite(gain) & (gain >= t.min_reward_gain))
        rose_at = int(r.steps[up[-1][0]]) if up else int(r.steps[-1])
        rises.append(_RewardRise(ds, r0, float(r.values[-1]), rose_at, pair.get("acc"), r))
    return rises


@rule(
    "every",
    "Reward hacking: the policy earns reward without solving more problems. Read validation "
    "generations for format-only answers, and check the reward's format/cot weights.",
)
def reward_hacking(ctx: Context) -> list[Hit]:
    """One finding per validation data source: its last stretch of reward up while accuracy is not."""
    t = ctx.thresholds.reward_hacking
    hits = []
    for rise in _reward_rises(ctx):
        r, a = rise.reward, rise.acc
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
        hits.append(
            Hit(
                r.tag,
                int(steps[start]),
                float(rv[start]),
                f"{rise.source}: validation reward rose {_fmt(rv[0])} -> {_fmt(rv[-1])} while its accuracy "
                f"part stayed {_fmt(av[0])} -> {_fmt(av[-1])}",
                int(steps[-1]),
            )
        )
    return hits


@rule(
    "every",
    "The evaluation does not confirm the reward's gain: inspect the evaluated samples and the "
    "reward function before trusting the validation curve.",
)
def reward_hacking_eval(ctx: Context) -> list[Hit]:
    """At most one finding: the evaluation table against the last data source whose reward rose."""
    rises = _reward_rises(ctx)
    if ctx.eval_accuracy is None or not rises:
        return []
    base, trained, step = ctx.eval_accuracy
    if trained - base > ctx.thresholds.reward_hacking.eval_min_gain_points:
        return []
    rise = rises[-1]
    return [
        Hit(
            "eval/accuracy",
            step,
            trained,
            f"validation reward rose {_fmt(rise.first)} -> {_fmt(rise.last)} (from step {rise.rose_at}) but "
            f"evaluation accuracy went {base:.2f} -> {trained:.2f}",
        )
    ]


def apply_rules(ctx: Context) -> list[Finding]:
    findings = [f for r in RULES for f in r.findings(ctx)]
    return sorted(findings, key=lambda f: (-SEVERITY_RANK[f.severity], f.step, f.rule))


def notes(ctx: Context) -> list[str]:
    """Why rules were skipped for this run, for the report's reader."""
    return [text for r in RULES if r.skipped is not None and (text := r.skipped(ctx))]


def exit_code(findings: list[Finding]) -> int:
    """0 healthy, 1 warnings, 2 critical: what a scheduler alerts on."""
    return max((SEVERITY_RANK[f.severity] for f in findings), default=0)
