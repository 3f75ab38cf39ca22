"""The throughput card of a run: tokens per second per device as verl computes it and per card,
MindSpeed-RL's e2e_tps for the same steps, the step's time shares, each per step and as the median
over the steps after warm-up, always next to the conditions they were measured under."""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..platform import aclgraph
from . import references
from .rollout_graphs import ROW as GRAPHS_ROW
from .rollout_graphs import rollout_graphs
from .scalars import Series

# verl 0.6.1 compute_throughout_metrics (verl/trainer/ppo/metric_utils.py:269-302): perf/throughput =
# sum of the batch's attention masks (prompt + response tokens) / (timing_raw["step"] * n_gpus), with
# n_gpus = ResourcePoolManager.get_n_gpus(), every device of every pool (ray_trainer.py:98-100, 1284-1285).
THROUGHPUT = "perf/throughput"
TOTAL_TOKENS = "perf/total_num_tokens"
STEP = "timing_s/step"
# A multi-turn run's per-rollout means (verl v0.9.0 agent_loop.py:1256-1287 logs them under timing_s/; on
# trainer v1 npu-rl's reward_parts patch does, AGENT_TIMINGS).
AGENT_GENERATE = "timing_s/agent_loop/generate_sequences/mean"
AGENT_TOOLS = "timing_s/agent_loop/tool_calls/mean"
# verl 0.6.1 compute_data_metrics (metric_utils.py:189, 205): means over the batch's sequences.
PROMPT_MEAN = "prompt_length/mean"
RESPONSE_MEAN = "response_length/mean"

# verl 0.6.1 RayPPOTrainer.fit (ray_trainer.py:1036-1216) times these inside "step": gen (1038), which
# takes the worker's generate_sequences timer (fsdp_workers.py:923-949, megatron_workers.py:685-711)
# and also the rollout_mode()/trainer_mode() switches around it, i.e. the train->rollout weight sync
# (reshard); old_log_prob (1119; absent when npu_rl's old_log_prob patch skips the pass); ref (1141,
# str(Role.RefPolicy)); update_critic and update_actor (1205, 1213). reward, values and adv are the
# rest of the step; testing and save_checkpoint (1230, 1253) are outside it.
GEN, GENERATE = "timing_s/gen", "timing_s/generate_sequences"
OLD_LOG_PROB, REF = "timing_s/old_log_prob", "timing_s/ref"
UPDATES = ("timing_s/update_actor", "timing_s/update_critic")
# "weight sync/dispatch" is gen - generate_sequences: the weight sync plus Ray's dispatch and collection
# of the batch, which verl does not time apart.
PARTS = ("generation", "weight sync/dispatch", "old_log_prob", "ref", "update", "other")

# MindSpeed-RL compute_tps (Ascend/MindSpeed-RL mindspeed_rl/utils/utils.py:290-303; docs/zh/algorithms/grpo.md,
# "e2e_tps计算方式"). Its world size is every NPU of the job (actor, reference and reward; the actor's alone
# when they share them), here the recipe's devices: verl's roles share one pool of them.
E2E_FORMULA = "(prompt_length/mean + response_length/mean) x global batch x n / world size / timing_s/step"


@dataclass(frozen=True)
class StepThroughput:
    step: int
    step_s: float
    tps_device: float | None  # verl's perf/throughput
    tps_card: float | None
    e2e_tps_device: float | None  # MindSpeed-RL's formula, from the recipe's batch, n and world size
    e2e_tps_card: float | None
    seconds: dict[str, float]  # PARTS -> seconds of this step

    def to_dict(self) -> dict:
        return {
            "step": self.step,
            "step_s": self.step_s,
            "tps_device": self.tps_device,
            "tps_card": self.tps_card,
            "e2e_tps_device": self.e2e_tps_device,
            "e2e_tps_card": self.e2e_tps_card,
            "seconds": self.seconds,
        }


@dataclass(frozen=True)
class Reference:
    name: str
    value: float
    unit: str
    source: str
    ratio: float | None  # this run's median e2e_tps per card / value


@dataclass
class ThroughputCard:
    warmup_steps: int  # dropped before the medians (the first logged steps)
    per_step: list[StepThroughput]
    medians: dict[str, float | None]
    shares: dict[str, float]  # PARTS -> fraction of the measured steps' total step time
    conditions: list[tuple[str, str]]  # (what, value) from the recipe
    logged: list[tuple[str, str]]  # (what, value) as the run logged it
    dies_per_card: int | None = None
    card: str | None = None
    device: str | None = None
    references: list[Reference] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    # A multi-turn run's rollouts, medians over the measured steps of verl's per-rollout means: (seconds in
    # generation, seconds waiting on tools). verl's agent loop times both (tool_agent_loop.py:234, :319).
    agent_loop: tuple[float, float] | None = None

    @property
    def measured(self) -> list[StepThroughput]:
        return self.per_step[self.warmup_steps :]

    @property
    def measured_range(self) -> str:
        m = self.measured
        return f"{m[0].step}-{m[-1].step}" if len(m) > 1 else str(m[0].step)

    def to_dict(self) -> dict:
        return {
            "warmup_steps_dropped": self.warmup_steps,
            "measured_steps": [s.step for s in self.measured],
            "medians": self.medians,
            "shares": self.shares,
            "shares_of": "total timing_s/step of the measured steps",
            "dies_per_card": self.dies_per_card,
            "card": self.card,
            "device": self.device,
            "e2e_tps_formula": E2E_FORMULA,
            "conditions": dict(self.conditions),
            "logged": dict(self.logged),
            "references": [vars(r) for r in self.references],
            "notes": self.notes,
            "per_step": [s.to_dict() for s in self.per_step],
            "agent_loop_s": None if self.agent_loop is None else dict(zip(("generation", "tools"), self.agent_loop)),
        }

    def text_lines(self) -> list[str]:
        """The card as a few plain-text lines (the report's Markdown and the demo's summary)."""
        m = self.medians
        lines = [
            f"median of steps {self.measured_range} ({len(self.measured)} steps; "
            f"{self.warmup_steps} warm-up step(s) dropped)"
        ]
        lines.append("measured on: " + ", ".join(f"{k} {v}" for k, v in self.conditions + self.logged))
        per_card = (
            f" = {fmt(m['tps_card'])} per card ({self.dies_per_card} {_dies(self.dies_per_card)} per card)"
            if m.get("tps_card") is not None
            else ""
        )
        lines.append(f"verl perf/throughput: {fmt(m['tps_device'])} tokens/s per device{per_card}")
        if m.get("e2e_tps_device") is not None:
            lines.append(
                f"MindSpeed-RL e2e_tps: {fmt(m['e2e_tps_device'])} tokens/s per device = "
                f"{fmt(m['e2e_tps_card'])} per card; {E2E_FORMULA}"
            )
        lines.append(
            f"step time: {m['step_s']:.3g} s; shares: " + ", ".join(f"{p} {self.shares[p]:.0%}" for p in PARTS)
        )
        if self.agent_loop is not None:
            gen, tools = self.agent_loop
            lines.append(
                f"agent loop, per rollout: {gen:.3g} s generating, {tools:.3g} s waiting on tools "
                f"({tools / (gen + tools) if gen + tools > 0 else 0:.0%} of the two)"
            )
        for r in self.references:
            vs = f" (this run: {r.ratio:.2f}x)" if r.ratio is not None else ""
            lines.append(f"published: {r.name}: {fmt(r.value)} {r.unit}{vs} (source: npu_rl/report/published.yaml)")
        lines += [f"note: {n}" for n in self.notes]
        return lines


def fmt(v: float | None) -> str:
    if v is None or not math.isfinite(v):
        return "-"
    return f"{v:,.0f}" if abs(v) >= 100 else f"{v:.3g}"


def _dies(n: int | None) -> str:
    return "die" if n == 1 else "dies"


def _finite(v: float) -> float | None:
    return v if math.isfinite(v) else None


def _at(series: dict[str, Series], tag: str, step: int) -> float | None:
    if tag not in series:
        return None
    v = series[tag].value_at(step)
    return v if math.isfinite(v) else None


def _median(values: Sequence[float | None]) -> float | None:
    vals = [v for v in values if v is not None and math.isfinite(v)]
    return statistics.median(vals) if vals else None


def recompute_text(recipe: Any) -> str:
    if recipe.actor.strategy == "megatron":
        rc = recipe.actor.recompute
        if rc is None:
            return "off"
        layers = f", {rc.num_layers} layers" if rc.num_layers else ""
        return f"{rc.granularity} recompute ({rc.method or 'default'}{layers})"
    return "gradient checkpointing" if recipe.model.enable_gradient_checkpointing else "off"


def conditions(recipe: Any) -> dict[str, Any]:
    """The conditions a throughput is measured under, as values (published figures match on these)."""
    hw = references.platform(recipe.resources.platform)
    res, a = recipe.resources, recipe.algorithm
    cards = res.world_size / hw.dies_per_card
    return {
        "recipe": recipe.name,
        "model": recipe.model.hub_id or recipe.model.path,
        "platform": recipe.resources.platform,
        "devices": res.world_size,
        "cards": int(cards) if cards.is_integer() else cards,
        "global_batch": a.train_batch_size,
        "n": a.rollout_n,
        "max_prompt_length": recipe.data.max_prompt_length,
        "max_response_length": recipe.data.max_response_length,
        "recompute": recompute_text(recipe),
        "old_log_prob": "recomputed" if recipe.optimizations.recompute_old_log_prob else "skipped",
        "training": _layout(recipe),
        "rollout": f"{recipe.rollout.name} TP{recipe.rollout.tensor_model_parallel_size}",
    }


def _layout(recipe: Any) -> str:
    act = recipe.actor
    if act.strategy != "megatron":
        return act.strategy
    return (
        f"megatron TP{act.tensor_model_parallel_size} PP{act.pipeline_model_parallel_size} "
        f"EP{act.expert_model_parallel_size}"
    )


def _condition_rows(recipe: Any, c: dict[str, Any], hw: references.Hardware) -> list[tuple[str, str]]:
    res = recipe.resources
    return [
        ("recipe", c["recipe"]),
        ("model", str(c["model"])),
        ("devices", f"{c['devices']} x {hw.device} ({res.nnodes} node(s) x {res.devices_per_node})"),
        ("cards", f"{c['cards']} x {hw.card}, {hw.dies_per_card} {_dies(hw.dies_per_card)} per card"),
        ("global batch", str(c["global_batch"])),
        ("n", str(c["n"])),
        ("max prompt/response length", f"{c['max_prompt_length']}/{c['max_response_length']}"),
        ("recompute", c["recompute"]),
        ("old_log_prob", c["old_log_prob"]),
        ("training", c["training"]),
        ("rollout", c["rollout"]),
    ]


def _seconds(at: dict[str, float]) -> dict[str, float]:
    """The step's time in PARTS; what verl did not time (or this run did not do) is 0."""
    step = at[STEP]
    gen, generate = at.get(GEN), at.get(GENERATE)
    generation = generate if generate is not None else (gen or 0.0)
    weight_sync = max(0.0, gen - generate) if gen is not None and generate is not None else 0.0
    parts = {
        "generation": generation,
        "weight sync/dispatch": weight_sync,
        "old_log_prob": at.get(OLD_LOG_PROB, 0.0),
        "ref": at.get(REF, 0.0),
        "update": sum(at.get(k, 0.0) for k in UPDATES),
    }
    parts["other"] = max(0.0, step - sum(parts.values()))
    return parts


def throughput_card(
    series: dict[str, Series], recipe: Any = None, warmup_steps: int = 1, run_dir: Path | None = None
) -> ThroughputCard | None:
    """The card of a run, or None when it logged no step times (``timing_s/step``); ``run_dir``: where its
    console logs are, which say whether the rollout decoded from ACL graphs or eager."""
    if STEP not in series:
        return None
    needed = [STEP, THROUGHPUT, TOTAL_TOKENS, PROMPT_MEAN, RESPONSE_MEAN, GEN, GENERATE, OLD_LOG_PROB, REF, *UPDATES]
    steps = [int(s) for s, v in zip(series[STEP].steps, series[STEP].values) if math.isfinite(v) and v > 0]
    if not steps:
        return None
    hw = references.platform(recipe.resources.platform) if recipe is not None else None
    cond = conditions(recipe) if recipe is not None else None
    per_step = []
    for step in steps:
        at = {tag: v for tag in needed if (v := _at(series, tag, step)) is not None}
        tps = at.get(THROUGHPUT)
        e2e = None
        if cond is not None and PROMPT_MEAN in at and RESPONSE_MEAN in at:
            e2e = (at[PROMPT_MEAN] + at[RESPONSE_MEAN]) * cond["global_batch"] * cond["n"] / cond["devices"] / at[STEP]
        per_card = hw.dies_per_card if hw is not None else None
        per_step.append(
            StepThroughput(
                step=step,
                step_s=at[STEP],
                tps_device=tps,
                tps_card=tps * per_card if tps is not None and per_card else None,
                e2e_tps_device=e2e,
                e2e_tps_card=e2e * per_card if e2e is not None and per_card else None,
                seconds=_seconds(at),
            )
        )
    # Keep at least one measured step: a run shorter than the warm-up is shown whole, and says so.
    dropped = min(warmup_steps, len(per_step) - 1)
    measured = per_step[dropped:]
    medians = {
        k: _median([getattr(s, k) for s in measured])
        for k in ("step_s", "tps_device", "tps_card", "e2e_tps_device", "e2e_tps_card")
    }
    total = sum(s.step_s for s in measured)
    shares = {p: sum(s.seconds[p] for s in measured) / total for p in PARTS}
    card = ThroughputCard(
        warmup_steps=dropped,
        per_step=per_step,
        medians=medians,
        shares=shares,
        conditions=_condition_rows(recipe, cond, hw) if cond and hw is not None else [],
        logged=_logged(series, [s.step for s in measured]),
    )
    if dropped < warmup_steps:
        card.notes.append(
            f"the run has {len(per_step)} timed step(s): {dropped} of the {warmup_steps} warm-up step(s) dropped"
        )
    if hw is not None and cond is not None:  # both come from the recipe
        card.dies_per_card, card.card, card.device = hw.dies_per_card, hw.card, hw.device
        card.references = [
            Reference(
                p.name,
                p.value,
                p.unit,
                p.source,
                medians["e2e_tps_card"] / p.value if medians["e2e_tps_card"] else None,
            )
            for p in references.matching(cond)
        ]
        card.notes += _disagreements(series, [s.step for s in measured], cond)
    else:
        card.notes.append("no recipe: per-card figures, e2e_tps and the run's conditions need --recipe")
    if run_dir is not None:
        _graph_rows(card, Path(run_dir), recipe)
    gen, tools = (_median([_at(series, tag, s.step) for s in measured]) for tag in (AGENT_GENERATE, AGENT_TOOLS))
    multi_turn = recipe is not None and recipe.rollout.multi_turn.enabled
    if gen is not None and tools is not None and (tools > 0 or multi_turn):  # single-turn rollouts wait on none
        card.agent_loop = (gen, tools)
    if GENERATE not in series:
        card.notes.append(f"no {GENERATE}: generation includes the weight sync")
    if OLD_LOG_PROB not in series:
        card.notes.append(f"no {OLD_LOG_PROB}: the old_log_prob pass did not run (skipped)")
    return card


def _graph_rows(card: ThroughputCard, run_dir: Path, recipe: Any) -> None:
    """The rollout's graph or eager mode, where the run's console logs tell (npu_rl.report.rollout_graphs):
    a decode several times slower in eager mode is a throughput condition like the batch."""
    graphs = rollout_graphs(run_dir)
    if graphs is None or graphs.kind is None:
        return
    card.logged.append((GRAPHS_ROW, graphs.text()))
    seqs, query_len = None, 1
    if recipe is not None and recipe.resources.platform != "cpu" and recipe.rollout.name == "vllm":
        engine = aclgraph.engine_settings(recipe)
        seqs, query_len = int(engine.max_num_seqs.value), engine.decode_query_len
    card.notes += graphs.notes(seqs, query_len)


def logged_devices(series: dict[str, Series], steps: list[int]) -> float | None:
    """verl's n_gpus, read back from its own throughput: total tokens / (throughput x step time)."""
    vals = []
    for s in steps:
        tot, tps, t = (series[k].value_at(s) if k in series else math.nan for k in (TOTAL_TOKENS, THROUGHPUT, STEP))
        if all(math.isfinite(v) for v in (tot, tps, t)) and tps > 0 and t > 0:
            vals.append(tot / (tps * t))
    return _median(vals)


def logged_sequences(series: dict[str, Series], steps: list[int]) -> float | None:
    """Sequences per step: total tokens / (mean prompt + mean response length) of the same batch."""
    vals = []
    for s in steps:
        tot, p, r = (
            series[k].value_at(s) if k in series else math.nan for k in (TOTAL_TOKENS, PROMPT_MEAN, RESPONSE_MEAN)
        )
        if all(math.isfinite(v) for v in (tot, p, r)) and p + r > 0:
            vals.append(tot / (p + r))
    return _median(vals)


def _logged(series: dict[str, Series], steps: list[int]) -> list[tuple[str, str]]:
    out = []
    for what, tag in (("prompt length (mean)", PROMPT_MEAN), ("response length (mean)", RESPONSE_MEAN)):
        if tag in series:
            v = _median([_finite(series[tag].value_at(s)) for s in steps])
            if v is not None:
                out.append((what, f"{v:.1f}"))
    seqs, devices = logged_sequences(series, steps), logged_devices(series, steps)
    if seqs is not None:
        out.append(("sequences per step (logged)", f"{seqs:.0f}"))
    if devices is not None:
        out.append(("devices verl counted", f"{devices:.0f}"))
    return out


def _disagreements(series: dict[str, Series], steps: list[int], cond: dict[str, Any]) -> list[str]:
    """Where what the run logged contradicts the recipe the card was given (1% slack for rounding)."""
    notes = []
    seqs, devices = logged_sequences(series, steps), logged_devices(series, steps)
    want = cond["global_batch"] * cond["n"]
    if seqs is not None and abs(seqs - want) > 0.01 * want:
        notes.append(
            f"the run logged {seqs:.0f} sequences per step but the recipe says {cond['global_batch']} x "
            f"{cond['n']} = {want}: the recipe does not describe this run, and e2e_tps is off by as much"
        )
    if devices is not None and abs(devices - cond["devices"]) > 0.01 * cond["devices"]:
        notes.append(f"verl counted {devices:.0f} devices but the recipe says {cond['devices']}")
    return notes
