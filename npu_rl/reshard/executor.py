"""Runs a reshard plan on one rank: local copies, then one ``all_to_all_single`` per round.

Each round packs this rank's outgoing slices into one byte buffer (ordered by
destination), exchanges it with alltoallv split sizes, and unpacks the received
slices straight into the inference-side tensors; the staging buffers are freed before
the next round, so extra memory stays within one bucket.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
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
    stats = ExecStats()
    for _ in execute_stream(
        plan, rank, train_shards, infer_shards, group=group, device=device, schedule=schedule,
        progress=progress, stats=stats, local_first=True,
    ):  # fmt: skip
        pass
    return stats


def execute_stream(
    plan: Plan,
    rank: int,
    train_shards: Mapping[str, Any],
    infer_shards: Mapping[str, Any],
    *,
    group: dist.ProcessGroup | None = None,
    device: torch.device | str | None = None,
    schedule: RankSchedule | None = None,
    progress: Callable[[int, int], None] | None = None,
    stats: ExecStats | None = None,
    local_first: bool = False,
) -> Iterator[list[int]]:
    """:func:`execute`, yielding after each round the indices of the parameters whose inference shard is now
    complete, so that a caller can hand them on and drop them (verl 0.9 streams a sync to another process).

    ``infer_shards`` is read once per parameter, when its first slice lands: a mapping that makes the tensor
    there keeps a sync's extra memory to the parameters of the rounds in flight. Unless ``local_first``, a
    parameter's local copies run when its last received slice has landed; every other parameter's rounds are
    unchanged, so every rank runs the same collectives in the same order."""
    sched = schedule or plan.rank_schedule(rank)
    names = [p.name for p in plan.params]
    stats = stats if stats is not None else ExecStats()
    stats.rounds = len(sched.rounds)
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

    local: dict[int, list[Transfer]] = {}
    for t in sched.local:
        local.setdefault(t.param, []).append(t)
    # The round after which each parameter this rank receives or keeps is whole (-1: local copies only).
    last = {i: -1 for i in local}
    for k, (_, recvs) in enumerate(sched.rounds):
        for t in recvs:
            last[t.param] = k
    done_at: dict[int, list[int]] = {}
    for i in sorted(last):
        done_at.setdefault(last[i], []).append(i)

    def finish(params: list[int]) -> list[int]:
        for i in params:
            for t in local.pop(i, ()):
                src_of(i).copy_to(t.src_box, dst_of(i), t.dst_box)
                stats.local_bytes += t.nbytes
            dst.pop(i, None)
        return params

    if local_first:
        finish(sorted(local))
    yield finish(done_at.get(-1, []))

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
        yield finish(done_at.get(k, []))
