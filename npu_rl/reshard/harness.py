"""Run a function on N local CPU processes joined by a gloo process group, and build the
seeded full weights and per-rank shards the tests and the benchmark compare against."""

from __future__ import annotations

import multiprocessing as mp
import traceback
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist

from ..cluster.probe import free_port
from .executor import _DTYPES
from .planner import Plan
from .shards import extract


def _entry(rank: int, world: int, port: int, fn, args, queue, timeout_s: float) -> None:
    try:
        torch.set_num_threads(1)
        dist.init_process_group(
            "gloo",
            init_method=f"tcp://127.0.0.1:{port}",
            rank=rank,
            world_size=world,
            timeout=timedelta(seconds=timeout_s),
        )
        result = fn(rank, world, *args)
        dist.barrier()
        queue.put((rank, True, result))
    except BaseException:  # report any failure to the parent instead of hanging it
        queue.put((rank, False, traceback.format_exc()))
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()


def run_ranks(world: int, fn: Callable[..., Any], *args: Any, timeout_s: float = 120.0) -> list[Any]:
    """``fn(rank, world, *args)`` on ``world`` processes; returns the results by rank.

    Uses fork so the children reuse the parent's imported torch (spawning 16 interpreters
    on a shared 2-core machine costs more than the test itself).
    """
    ctx = mp.get_context("fork")
    queue = ctx.Queue()
    port = free_port()
    procs = [ctx.Process(target=_entry, args=(r, world, port, fn, args, queue, timeout_s)) for r in range(world)]
    for p in procs:
        p.start()
    results: dict[int, Any] = {}
    errors = []
    try:
        for _ in range(world):
            rank, ok, value = queue.get(timeout=timeout_s + 30)
            (results.__setitem__(rank, value) if ok else errors.append(f"rank {rank}:\n{value}"))
            if errors:
                break
    finally:
        for p in procs:
            p.join(timeout=5 if not errors else 0.5)
            if p.is_alive():
                p.kill()
                p.join()
    if errors:
        raise RuntimeError("reshard worker failed: " + errors[0])
    return [results[r] for r in range(world)]


def full_weights(plan: Plan, seed: int = 0) -> dict[str, torch.Tensor]:
    """Deterministic random full parameters (identical on every rank)."""
    gen = torch.Generator().manual_seed(seed)
    return {p.name: torch.randn(p.shape, generator=gen, dtype=torch.float32).to(_DTYPES[p.dtype]) for p in plan.params}


def train_shards(plan: Plan, rank: int, full: dict[str, torch.Tensor], experts_as_list: bool = False):
    """This rank's Megatron-style training shards cut from the full weights."""
    out: dict[str, Any] = {}
    for i, p in enumerate(plan.params):
        if plan.train_shape(i, rank) is None:
            continue
        g, key = plan.geometry[i], plan.train_key(i, rank)
        shard = extract(full[p.name], [g.train_runs[d][key[d]] for d in range(len(key))])
        out[p.name] = list(shard.unbind(0)) if experts_as_list and p.train_split[0] == "ep" else shard
    return out


def expected_infer_shards(plan: Plan, rank: int, full: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    out = {}
    for i, p in enumerate(plan.params):
        g = plan.geometry[i]
        key = g.infer_key(plan.infer.coords(rank))
        out[p.name] = extract(full[p.name], [g.infer_runs[d][key[d]] for d in range(len(key))])
    return out


def blank_infer_shards(plan: Plan, rank: int) -> dict[str, torch.Tensor]:
    """Inference tensors filled with NaN, so a slice the reshard misses cannot compare equal."""
    return {
        p.name: torch.full(plan.infer_shape(i, rank), float("nan"), dtype=_DTYPES[p.dtype])
        for i, p in enumerate(plan.params)
    }
