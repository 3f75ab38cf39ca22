"""Zero-redundancy reshard plan: who sends which slice of which parameter to whom.

Every parameter is cut into disjoint *pieces* by the training layout (one piece per
training shard coordinate, e.g. (EP rank, TP rank) for routed experts); replicas of a
piece live on several ranks (data parallelism). For each inference rank the planner
intersects its inference shard with every piece: an intersection the rank already
holds is a local copy, any other one is received exactly once from one holder. The
received bytes therefore equal the theoretical minimum (checked independently in
``report.min_recv_bytes``). Transfers are then packed into rounds so that no rank
stages more than ``bucket_bytes`` (send + receive buffers) in any round; each round is
one ``all_to_all_single`` (alltoallv) over all ranks.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable
from dataclasses import dataclass, field
from functools import cache
from typing import NamedTuple

from .layout import InferLayout, ReshardLayoutError, TrainLayout, check_pair
from .params import EMBED_LAYER, ParamSpec

Box = tuple[tuple[int, int], ...]  # (start, length) per dimension, in a shard's local coordinates

ALIGN = 16  # byte alignment of every slice in a staging buffer, so it can be viewed as any dtype
DEFAULT_BUCKET_BYTES = 64 << 20
BUCKET_ENV = "NPU_RL_RESHARD_BUCKET_MB"  # set by the launcher from recipe reshard.bucket_mb


def wire_bytes(nbytes: int) -> int:
    return -(-nbytes // ALIGN) * ALIGN


class Transfer(NamedTuple):
    param: int
    src: int
    dst: int
    src_box: Box
    dst_box: Box
    nbytes: int


def dim_intervals(
    length: int, parts: int, index: int, fused: int, what: str, granule: int = 1
) -> tuple[tuple[int, int, int], ...]:
    """(full_start, local_start, length) runs of one dimension held by shard ``index`` of ``parts``.

    A dimension made of ``fused`` equal sub-blocks (gate and up projections) is split block
    by block, so a shard holds one run per sub-block.
    """
    if length % (fused * parts):
        raise ReshardLayoutError(
            f"{what}: dimension of size {length} ({fused} fused block(s)) does not split into {parts} shards"
        )
    block, run = length // fused, length // (fused * parts)
    if run % granule:
        raise ReshardLayoutError(f"{what}: {parts} shards of size {run} would cut a block of {granule} (a head)")
    return tuple((j * block + index * run, j * run, run) for j in range(fused))


def _overlaps(need, have) -> list[tuple[int, int, int]]:
    """Intersections of two run lists as (have_local, need_local, length)."""
    out = []
    for n_full, n_loc, n_len in need:
        for h_full, h_loc, h_len in have:
            lo, hi = max(n_full, h_full), min(n_full + n_len, h_full + h_len)
            if lo < hi:
                out.append((lo - h_full + h_loc, lo - n_full + n_loc, hi - lo))
    return out


class ShardGeometry:
    """Per-dimension runs of one parameter under both layouts."""

    def __init__(self, param: ParamSpec, train: TrainLayout, infer: InferLayout):
        self.param = param
        self.train_parts = tuple(train.size(a) if a else 1 for a in param.train_split)
        self.infer_parts = tuple(infer.size(a) if a else 1 for a in param.infer_split)
        if len(param.train_split) != len(param.shape) or len(param.infer_split) != len(param.shape):
            raise ValueError(f"{param.name}: split spec does not match its {len(param.shape)} dimensions")
        f, gr = param.fuse, param.grain
        self.train_runs = [
            [
                dim_intervals(param.shape[d], self.train_parts[d], t, f[d], f"{param.name} (training)", gr[d])
                for t in range(self.train_parts[d])
            ]
            for d in range(len(param.shape))
        ]
        self.infer_runs = [
            [
                dim_intervals(param.shape[d], self.infer_parts[d], k, f[d], f"{param.name} (inference)", gr[d])
                for k in range(self.infer_parts[d])
            ]
            for d in range(len(param.shape))
        ]

    def train_key(self, coords: dict[str, int]) -> tuple[int, ...]:
        return tuple(coords[a] if a else 0 for a in self.param.train_split)

    def infer_key(self, coords: dict[str, int]) -> tuple[int, ...]:
        return tuple(coords[a] if a else 0 for a in self.param.infer_split)

    def local_shape(self, runs_per_dim) -> tuple[int, ...]:
        return tuple(sum(r[2] for r in runs) for runs in runs_per_dim)

    def train_shape(self, key: tuple[int, ...]) -> tuple[int, ...]:
        return self.local_shape([self.train_runs[d][t] for d, t in enumerate(key)])

    def infer_shape(self, key: tuple[int, ...]) -> tuple[int, ...]:
        return self.local_shape([self.infer_runs[d][k] for d, k in enumerate(key)])

    @cache  # noqa: B019 - one planner per reshard, kept for the run: its cache lives exactly as long
    def pieces_for(
        self, infer_key: tuple[int, ...]
    ) -> tuple[tuple[tuple[int, ...], tuple[tuple[Box, Box, int], ...]], ...]:
        """For one inference shard: every training piece key it overlaps, with (src_box, dst_box, numel)."""
        per_dim = []
        for d, k in enumerate(infer_key):
            need = self.infer_runs[d][k]
            hits = [(t, ov) for t, have in enumerate(self.train_runs[d]) if (ov := _overlaps(need, have))]
            per_dim.append(hits)
        out = []
        for combo in itertools.product(*per_dim):
            key = tuple(t for t, _ in combo)
            boxes = []
            for segs in itertools.product(*(ov for _, ov in combo)):
                src = tuple((s, n) for s, _, n in segs)
                dst = tuple((q, n) for _, q, n in segs)
                numel = 1
                for _, _, n in segs:
                    numel *= n
                boxes.append((src, dst, numel))
            out.append((key, tuple(boxes)))
        return tuple(out)


def _split_box(src: Box, dst: Box, numel: int, itemsize: int, cap: int):
    """Cut a transfer larger than ``cap`` bytes along its first dimension longer than one."""
    if numel * itemsize <= cap:
        yield src, dst, numel
        return
    d = next((i for i, (_, n) in enumerate(src) if n > 1), None)
    if d is None:
        yield src, dst, numel
        return
    per_row = numel // src[d][1]
    rows = max(1, cap // (per_row * itemsize))
    for off in range(0, src[d][1], rows):
        n = min(rows, src[d][1] - off)
        s = src[:d] + ((src[d][0] + off, n),) + src[d + 1 :]
        t = dst[:d] + ((dst[d][0] + off, n),) + dst[d + 1 :]
        yield from _split_box(s, t, per_row * n, itemsize, cap)


@dataclass
class RankSchedule:
    local: list[Transfer]
    rounds: list[tuple[list[Transfer], list[Transfer]]]  # per round: (sends by dst, receives by src)


@dataclass
class Plan:
    params: list[ParamSpec]
    train: TrainLayout
    infer: InferLayout
    bucket_bytes: int
    transfers: list[Transfer] = field(default_factory=list)
    round_of: list[int] = field(default_factory=list)
    local: list[Transfer] = field(default_factory=list)
    num_rounds: int = 0
    peak_stage_bytes: list[int] = field(default_factory=list)  # per rank: max send+recv staging in a round
    geometry: list[ShardGeometry] = field(default_factory=list)
    stage_of_param: list[int] = field(default_factory=list)

    @property
    def world(self) -> int:
        return self.train.world

    def train_shape(self, param: int, rank: int) -> tuple[int, ...] | None:
        """Local training shard shape of a parameter on a rank, None when its stage does not hold it."""
        if self.train.coords(rank)["pp"] != self.stage_of_param[param]:
            return None
        g = self.geometry[param]
        return g.train_shape(g.train_key(self.train.coords(rank)))

    def infer_shape(self, param: int, rank: int) -> tuple[int, ...]:
        g = self.geometry[param]
        return g.infer_shape(g.infer_key(self.infer.coords(rank)))

    def train_key(self, param: int, rank: int) -> tuple[int, ...]:
        return self.geometry[param].train_key(self.train.coords(rank))

    def rank_schedule(self, rank: int) -> RankSchedule:
        # Per round: what to send and what to receive, as (peer, transfer index, transfer).
        rounds: list[tuple[list[tuple[int, int, Transfer]], list[tuple[int, int, Transfer]]]]
        rounds = [([], []) for _ in range(self.num_rounds)]
        order = []
        for i, t in enumerate(self.transfers):
            if t.src == rank or t.dst == rank:
                order.append(i)
        for i in order:
            t = self.transfers[i]
            sends, recvs = rounds[self.round_of[i]]
            if t.src == rank:
                sends.append((t.dst, i, t))
            else:
                recvs.append((t.src, i, t))
        # Both sides order a peer's slices by transfer index, so offsets agree without exchanging metadata.
        return RankSchedule(
            local=[t for t in self.local if t.dst == rank],
            rounds=[([t for *_, t in sorted(s)], [t for *_, t in sorted(r)]) for s, r in rounds],
        )


def stage_of_layer(layer: int, stage_sizes: tuple[int, ...]) -> int:
    if layer == EMBED_LAYER:
        return 0
    acc = 0
    for s, n in enumerate(stage_sizes):
        acc += n
        if layer < acc:
            return s
    return len(stage_sizes) - 1  # final norm and LM head


def plan_reshard(
    params: Iterable[ParamSpec],
    train: TrainLayout,
    infer: InferLayout,
    *,
    num_layers: int,
    num_experts: int,
    bucket_bytes: int = DEFAULT_BUCKET_BYTES,
    devices_per_node: int | None = None,
) -> Plan:
    params = list(params)
    check_pair(train, infer, num_experts)
    if bucket_bytes < ALIGN:
        raise ReshardLayoutError(f"bucket_bytes {bucket_bytes} is smaller than one aligned slice")
    stages = train.stage_sizes(num_layers)
    world = train.world
    plan = Plan(params, train, infer, bucket_bytes)
    tcoords = [train.coords(r) for r in range(world)]
    icoords = [infer.coords(r) for r in range(world)]
    node = [r // devices_per_node if devices_per_node else 0 for r in range(world)]
    sent = [0] * world
    moves: list[Transfer] = []

    for pi, p in enumerate(params):
        g = ShardGeometry(p, train, infer)
        stage = stage_of_layer(p.layer, stages)
        plan.geometry.append(g)
        plan.stage_of_param.append(stage)
        holders: dict[tuple[int, ...], list[int]] = {}
        for r in range(world):
            if tcoords[r]["pp"] == stage:
                holders.setdefault(g.train_key(tcoords[r]), []).append(r)
        for r in range(world):
            own = g.train_key(tcoords[r]) if tcoords[r]["pp"] == stage else None
            for key, boxes in g.pieces_for(g.infer_key(icoords[r])):
                if key == own:
                    plan.local.extend(Transfer(pi, r, r, s, d, n * p.itemsize) for s, d, n in boxes)
                    continue
                # Balance the send load over replicas, preferring a holder on the same node.
                src = min(holders[key], key=lambda h: (node[h] != node[r], sent[h], h))
                for s, d, n in boxes:
                    for s2, d2, n2 in _split_box(s, d, n, p.itemsize, bucket_bytes):
                        moves.append(Transfer(pi, src, r, s2, d2, n2 * p.itemsize))
                        sent[src] += n2 * p.itemsize

    plan.transfers = moves
    _schedule(plan)
    return plan


def _schedule(plan: Plan) -> None:
    """Greedy list scheduling: each transfer goes to the first round, from the ranks' cursors on,
    where both its sender and receiver stay within the bucket."""
    cap, world = plan.bucket_bytes, plan.world
    fill: list[dict[int, int]] = [dict() for _ in range(world)]
    cursor = [0] * world
    slack = cap // 16
    rounds = []
    n_rounds = 0
    for t in plan.transfers:
        b = wire_bytes(t.nbytes)
        fs, fd = fill[t.src], fill[t.dst]
        k = max(cursor[t.src], cursor[t.dst])
        while (fs.get(k, 0) + b > cap or fd.get(k, 0) + b > cap) and (fs.get(k, 0) or fd.get(k, 0)):
            k += 1
        fs[k] = fs.get(k, 0) + b
        fd[k] = fd.get(k, 0) + b
        for r, f in ((t.src, fs), (t.dst, fd)):
            while f.get(cursor[r], 0) >= cap - slack:
                cursor[r] += 1
        rounds.append(k)
        n_rounds = max(n_rounds, k + 1)
    plan.round_of = rounds
    plan.num_rounds = n_rounds
    plan.peak_stage_bytes = [max(f.values(), default=0) for f in fill]
