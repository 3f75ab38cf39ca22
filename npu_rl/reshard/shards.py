"""Access to local shards: plain tensors, or a list of per-expert tensors stacked along dim 0
(Megatron keeps each local expert as its own parameter)."""

from __future__ import annotations

import itertools
from collections.abc import Sequence

import torch

from .planner import Box

Runs = Sequence[Sequence[tuple[int, int, int]]]  # per dimension: (full_start, local_start, length)


def _slices(box: Box) -> tuple[slice, ...]:
    return tuple(slice(s, s + n) for s, n in box)


class TensorShard:
    def __init__(self, tensor: torch.Tensor):
        self.tensor = tensor

    def read(self, box: Box, out: torch.Tensor) -> None:
        out.copy_(self.tensor[_slices(box)])

    def write(self, box: Box, src: torch.Tensor) -> None:
        self.tensor[_slices(box)].copy_(src)

    def copy_to(self, box: Box, other: ShardLike, other_box: Box) -> None:
        other.write(other_box, self.tensor[_slices(box)])


class StackedShard:
    """A list of equally shaped tensors seen as one tensor stacked along a new dim 0."""

    def __init__(self, tensors: Sequence[torch.Tensor]):
        self.tensors = list(tensors)

    def _items(self, box: Box):
        (start, count), rest = box[0], box[1:]
        for i in range(count):
            yield i, self.tensors[start + i][_slices(rest)]

    def read(self, box: Box, out: torch.Tensor) -> None:
        for i, view in self._items(box):
            out[i].copy_(view)

    def write(self, box: Box, src: torch.Tensor) -> None:
        for i, view in self._items(box):
            view.copy_(src[i])

    def copy_to(self, box: Box, other: ShardLike, other_box: Box) -> None:
        (o0, _), rest = other_box[0], other_box[1:]
        for i, view in self._items(box):
            other.write(((o0 + i, 1),) + rest, view.unsqueeze(0))


ShardLike = TensorShard | StackedShard


def as_shard(x: torch.Tensor | Sequence[torch.Tensor] | ShardLike) -> ShardLike:
    if isinstance(x, (TensorShard, StackedShard)):
        return x
    if isinstance(x, torch.Tensor):
        return TensorShard(x)
    return StackedShard(x)


def extract(full: torch.Tensor, runs: Runs) -> torch.Tensor:
    """The local shard described by ``runs`` cut out of a full tensor (a fresh tensor)."""
    shape = tuple(sum(n for *_, n in rs) for rs in runs)
    out = torch.empty(shape, dtype=full.dtype, device=full.device)
    for combo in itertools.product(*runs):
        out[tuple(slice(lo, lo + n) for _, lo, n in combo)] = full[tuple(slice(f, f + n) for f, _, n in combo)]
    return out


def insert(full: torch.Tensor, runs: Runs, shard: torch.Tensor) -> None:
    """Write a local shard back into its place in a full tensor."""
    for combo in itertools.product(*runs):
        full[tuple(slice(f, f + n) for f, _, n in combo)] = shard[tuple(slice(lo, lo + n) for _, lo, n in combo)]
