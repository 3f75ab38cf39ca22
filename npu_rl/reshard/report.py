"""Plan report: bytes moved per rank, the theoretical minimum, the all_gather baseline, peak memory.

The minimum and the baseline are computed from the layouts alone (not from the plan),
so comparing them with the plan checks the planner rather than restating it.
"""

from __future__ import annotations

from dataclasses import dataclass

from .layout import InferLayout, TrainLayout
from .params import ParamSpec
from .planner import Plan, ShardGeometry, _overlaps, stage_of_layer

GiB = float(1 << 30)


def _held_and_needed(p: ParamSpec, g: ShardGeometry, train: TrainLayout, infer: InferLayout, stage: int, rank: int):
    """(numel the inference shard needs, numel of it the rank already holds from training)."""
    ikey = g.infer_key(infer.coords(rank))
    need = 1
    for n in g.infer_shape(ikey):
        need *= n
    tc = train.coords(rank)
    if tc["pp"] != stage:
        return need, 0, 0
    tkey = g.train_key(tc)
    held_total = 1
    for n in g.train_shape(tkey):
        held_total *= n
    both = 1
    for d in range(len(p.shape)):
        both *= sum(n for *_, n in _overlaps(g.infer_runs[d][ikey[d]], g.train_runs[d][tkey[d]]))
    return need, both, held_total


def min_recv_bytes(params: list[ParamSpec], train: TrainLayout, infer: InferLayout, num_layers: int) -> list[int]:
    """Per rank: bytes of its inference shards that it does not already hold (no plan can receive less)."""
    stages = train.stage_sizes(num_layers)
    out = [0] * train.world
    for p in params:
        g = ShardGeometry(p, train, infer)
        stage = stage_of_layer(p.layer, stages)
        for r in range(train.world):
            need, both, _ = _held_and_needed(p, g, train, infer, stage, r)
            out[r] += (need - both) * p.itemsize
    return out


def allgather_recv_bytes(params: list[ParamSpec], train: TrainLayout, infer: InferLayout, num_layers: int) -> list[int]:
    """Per rank: bytes received when every rank materialises each full parameter (verl's megatron
    weight sync: PP broadcast, then all_gather over EP and TP) before slicing its inference shard."""
    stages = train.stage_sizes(num_layers)
    out = [0] * train.world
    for p in params:
        g = ShardGeometry(p, train, infer)
        stage = stage_of_layer(p.layer, stages)
        for r in range(train.world):
            _, _, held = _held_and_needed(p, g, train, infer, stage, r)
            out[r] += (p.numel - held) * p.itemsize
    return out


@dataclass
class PlanReport:
    label: str
    world: int
    rounds: int
    sent: list[int]
    recv: list[int]
    minimum: list[int]
    allgather: list[int]
    peak_extra: int  # bytes: the largest send+recv staging any rank holds in a round
    allgather_peak: int  # bytes: the largest full parameter a gather-then-slice sync materialises
    local_bytes: int

    @property
    def total(self) -> int:
        return sum(self.recv)

    @property
    def ratio_min(self) -> float:
        m = sum(self.minimum)
        return self.total / m if m else 1.0

    @property
    def ratio_allgather(self) -> float:
        b = sum(self.allgather)
        return self.total / b if b else 1.0

    def rows(self) -> list[tuple[str, str]]:
        return [
            ("layouts", self.label),
            ("ranks / alltoallv rounds", f"{self.world} / {self.rounds}"),
            ("bytes moved (total)", f"{self.total / GiB:,.2f} GiB"),
            ("per rank recv min/max", f"{min(self.recv) / GiB:,.3f} / {max(self.recv) / GiB:,.3f} GiB"),
            ("per rank sent min/max", f"{min(self.sent) / GiB:,.3f} / {max(self.sent) / GiB:,.3f} GiB"),
            ("theoretical minimum", f"{sum(self.minimum) / GiB:,.2f} GiB"),
            ("all_gather baseline", f"{sum(self.allgather) / GiB:,.2f} GiB"),
            ("moved / minimum", f"{self.ratio_min:.4f}"),
            ("moved / all_gather", f"{self.ratio_allgather:.4f}"),
            ("peak extra memory (plan)", f"{self.peak_extra / GiB:.4f} GiB"),
            ("peak extra memory (all_gather)", f"{self.allgather_peak / GiB:.3f} GiB"),
            ("local copies (no transfer)", f"{self.local_bytes / GiB:,.2f} GiB"),
        ]

    def table(self) -> str:
        rows = self.rows()
        w = max(len(k) for k, _ in rows)
        return "\n".join(f"{k:<{w}}  {v}" for k, v in rows)


def build_report(plan: Plan, num_layers: int, label: str | None = None) -> PlanReport:
    world = plan.world
    sent, recv = [0] * world, [0] * world
    for t in plan.transfers:
        sent[t.src] += t.nbytes
        recv[t.dst] += t.nbytes
    return PlanReport(
        label=label or f"{plan.train.describe()} -> {plan.infer.describe()}",
        world=world,
        rounds=plan.num_rounds,
        sent=sent,
        recv=recv,
        minimum=min_recv_bytes(plan.params, plan.train, plan.infer, num_layers),
        allgather=allgather_recv_bytes(plan.params, plan.train, plan.infer, num_layers),
        peak_extra=max(plan.peak_stage_bytes, default=0),
        allgather_peak=max(p.nbytes for p in plan.params),
        local_bytes=sum(t.nbytes for t in plan.local),
    )
