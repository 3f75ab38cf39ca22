"""Runs a reshard plan on one rank: local copies, then one ``all_to_all_single`` per round.

Each round packs this rank's outgoing slices into one byte buffer (ordered by
destination), exchanges it with alltoallv split sizes, and unpacks the received
slices straight into the inference-side tensors; the staging buffers are freed before
the next round, so extra memory stays within one bucket.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist

from .planner import Plan, RankSchedule, Transfer, wire_bytes
from .shards import ShardLike, as_shard

_DTYPES = {"bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32}


@dataclass
class ExecStats:
    rounds: int = 0
    sent_bytes: int = 0
    recv_bytes: int = 0
    local_bytes: int = 0
    peak_staging_bytes: int = 0


def _view(buf: torch.Tensor, offset: int, t: Transfer, plan: Plan) -> torch.Tensor:
    p = plan.params[t.param]
    shape = tuple(n for _, n in t.src_box)
    return buf[offset : offset + t.nbytes].view(_DTYPES[p.dtype]).view(shape)


def _peer_sizes(items: list[Transfer], world: int, peer: Callable[[Transfer], int]) -> list[int]:
    sizes = [0] * world
    for t in items:
        sizes[peer(t)] += wire_bytes(t.nbytes)
    return sizes


def execute(
    plan: Plan,
    rank: int,
    train_shards: Mapping[str, Any],
    infer_shards: Mapping[str, Any],
    *,
    group: dist.ProcessGroup | None = None,
    device: torch.device | str | None = None,
    schedule: RankSchedule | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> ExecStats:
    """Reshard this rank's training shards into its inference shards, in place.

    ``train_shards`` maps parameter names to this rank's training shard (only parameters of
    its pipeline stage), ``infer_shards`` maps every parameter name to the inference-side
    tensor (or per-expert list) to overwrite. Every rank of ``group`` must call this with
    the same plan.
    """
    sched = schedule or plan.rank_schedule(rank)
    names = [p.name for p in plan.params]
    src: dict[int, ShardLike] = {}
    dst: dict[int, ShardLike] = {}

    def src_of(i: int) -> ShardLike:
        if i not in src:
            src[i] = as_shard(train_shards[names[i]])
        return src[i]

    def dst_of(i: int) -> ShardLike:
        if i not in dst:
            dst[i] = as_shard(infer_shards[names[i]])
        return dst[i]

    stats = ExecStats(rounds=len(sched.rounds))
    for t in sched.local:
        src_of(t.param).copy_to(t.src_box, dst_of(t.param), t.dst_box)
        stats.local_bytes += t.nbytes

    world = plan.world
    for k, (sends, recvs) in enumerate(sched.rounds):
        in_sizes = _peer_sizes(sends, world, lambda t: t.dst)
        out_sizes = _peer_sizes(recvs, world, lambda t: t.src)
        send_buf = torch.empty(sum(in_sizes), dtype=torch.uint8, device=device)
        recv_buf = torch.empty(sum(out_sizes), dtype=torch.uint8, device=device)
        off = 0
        for t in sends:
            src_of(t.param).read(t.src_box, _view(send_buf, off, t, plan))
            off += wire_bytes(t.nbytes)
            stats.sent_bytes += t.nbytes
        dist.all_to_all_single(recv_buf, send_buf, out_sizes, in_sizes, group=group)
        off = 0
        for t in recvs:
            dst_of(t.param).write(t.dst_box, _view(recv_buf, off, t, plan))
            off += wire_bytes(t.nbytes)
            stats.recv_bytes += t.nbytes
        stats.peak_staging_bytes = max(stats.peak_staging_bytes, send_buf.numel() + recv_buf.numel())
        del send_buf, recv_buf
        if progress is not None:
            progress(k + 1, len(sched.rounds))
    return stats
