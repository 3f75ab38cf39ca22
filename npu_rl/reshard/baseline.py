"""The all_gather reference: every rank rebuilds each full parameter the way verl's megatron
weight sync does (broadcast over the pipeline group, all_gather over EP, then TP), then
slices its inference shard. Used as the bit-exact reference in tests and as the timing
baseline in benchmarks/reshard_bench.py."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist

from .executor import _DTYPES
from .planner import Plan
from .shards import extract, insert


@dataclass
class Groups:
    """Megatron's groups of this rank, by axis ("pp", and the splitting axes "ep", "etp", "tp"): (group, ranks)."""

    by_axis: dict[str, tuple[Any, list[int]]]

    @property
    def pp(self) -> tuple[Any, list[int]]:
        return self.by_axis["pp"]


def _enumerate(world: int, key) -> list[list[int]]:
    groups: dict[Any, list[int]] = {}
    for r in range(world):
        groups.setdefault(key(r), []).append(r)
    return [sorted(g) for _, g in sorted(groups.items())]


def make_groups(plan: Plan, rank: int) -> Groups:
    """Megatron's PP, TP, EP and ETP groups of the training layout (collective: every rank calls it)."""
    lay = plan.train
    c = lay.coords
    stage = lay.world // lay.pp
    blocks = {
        "pp": _enumerate(lay.world, lambda r: r % stage),
        "tp": _enumerate(lay.world, lambda r: r // lay.tp),
        # The expert grid of a stage: EP peers share their ETP rank and expert-data-parallel index.
        "ep": _enumerate(lay.world, lambda r: (c(r)["pp"], c(r)["etp"], (r % stage) // (lay.etp * lay.ep))),
        "etp": _enumerate(lay.world, lambda r: (c(r)["pp"], (r % stage) // lay.etp)),
    }
    mine = {}
    for name, ranks_list in blocks.items():
        for ranks in ranks_list:
            g = dist.new_group(ranks) if len(ranks) > 1 else None
            if rank in ranks:
                mine[name] = (g, ranks)
    return Groups(mine)


def allgather_reshard(
    plan: Plan,
    rank: int,
    train_shards: Mapping[str, torch.Tensor],
    infer_shards: Mapping[str, torch.Tensor],
    groups: Groups,
) -> int:
    """Fill ``infer_shards`` by materialising every full parameter; returns the peak full-tensor bytes."""
    lay = plan.train
    me = lay.coords(rank)
    peak = 0
    for pi, p in enumerate(plan.params):
        g = plan.geometry[pi]
        stage = plan.stage_of_param[pi]
        dtype = _DTYPES[p.dtype]
        key = g.train_key(me)  # same TP/EP coordinates as this rank's peer on the owning stage
        if me["pp"] == stage:
            shard = train_shards[p.name].contiguous()
        else:
            shard = torch.empty(g.train_shape(key), dtype=dtype)
        if lay.pp > 1:
            pp_group, pp_ranks = groups.pp
            owner = next(r for r in pp_ranks if lay.coords(r)["pp"] == stage)
            dist.broadcast(shard, src=owner, group=pp_group)
        pieces = {key: shard}
        for axis in ("ep", "etp", "tp"):
            if axis not in p.train_split or lay.size(axis) == 1:
                continue
            grp, ranks = groups.by_axis[axis]
            dim = p.train_split.index(axis)
            gathered = {}
            for k, t in pieces.items():
                bufs = [torch.empty_like(t) for _ in ranks]
                dist.all_gather(bufs, t, group=grp)
                # new_group orders members by global rank; each member's coordinate names its piece.
                for r, b in zip(sorted(ranks), bufs):
                    gathered[k[:dim] + (lay.coords(r)[axis],) + k[dim + 1 :]] = b
            pieces = gathered
        full = torch.empty(p.shape, dtype=dtype)
        for k, t in pieces.items():
            insert(full, [g.train_runs[d][k[d]] for d in range(len(k))], t)
        ikey = g.infer_key(plan.infer.coords(rank))
        infer_shards[p.name].copy_(extract(full, [g.infer_runs[d][ikey[d]] for d in range(len(ikey))]))
        peak = max(
            peak, full.numel() * full.element_size() + sum(t.numel() * t.element_size() for t in pieces.values())
        )
    return peak
