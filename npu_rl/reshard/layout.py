"""Training (Megatron) and inference (vLLM) device layouts, and which shard each rank holds.

Rank numbering follows Megatron-core's default order ``tp-cp-ep-dp-pp`` (TP fastest,
PP slowest; EP carved out of DP) and vLLM's (TP fastest; EP spans ``ep`` consecutive
ranks, i.e. TP x DP). Training and rollout share the same devices (verl's hybrid
engine), so inference rank r and training rank r are the same process.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import UserError


class ReshardLayoutError(UserError):
    """A pair of layouts (or a model) the planner cannot map."""


def _positive(name: str, value: int) -> None:
    if not isinstance(value, int) or value < 1:
        raise ReshardLayoutError(f"{name} must be a positive integer (got {value!r})")


@dataclass(frozen=True)
class TrainLayout:
    world: int
    tp: int = 1
    pp: int = 1
    ep: int = 1
    layers_per_stage: tuple[int, ...] | None = None

    def __post_init__(self) -> None:
        for name in ("world", "tp", "pp", "ep"):
            _positive(f"training {name}", getattr(self, name))
        if self.world % (self.tp * self.pp):
            raise ReshardLayoutError(f"training TP*PP ({self.tp}*{self.pp}) does not divide the {self.world} ranks")
        if self.dp % self.ep:
            raise ReshardLayoutError(
                f"training EP {self.ep} does not divide the data-parallel size {self.dp} "
                f"({self.world} ranks / TP {self.tp} / PP {self.pp}); Megatron carves EP out of DP"
            )
        if self.layers_per_stage is not None:
            object.__setattr__(self, "layers_per_stage", tuple(self.layers_per_stage))
            if len(self.layers_per_stage) != self.pp:
                raise ReshardLayoutError(f"layers_per_stage has {len(self.layers_per_stage)} entries for PP {self.pp}")
            if any(n < 1 for n in self.layers_per_stage):
                raise ReshardLayoutError(f"layers_per_stage {list(self.layers_per_stage)} has an empty stage")

    @property
    def dp(self) -> int:
        return self.world // (self.tp * self.pp)

    def stage_sizes(self, num_layers: int) -> tuple[int, ...]:
        if self.layers_per_stage is None:
            if num_layers % self.pp:
                raise ReshardLayoutError(
                    f"{num_layers} layers do not split evenly over PP {self.pp}; give layers_per_stage"
                )
            return (num_layers // self.pp,) * self.pp
        if sum(self.layers_per_stage) != num_layers:
            raise ReshardLayoutError(
                f"layers_per_stage {list(self.layers_per_stage)} sums to {sum(self.layers_per_stage)}, "
                f"the model has {num_layers} layers"
            )
        return self.layers_per_stage

    def coords(self, rank: int) -> dict[str, int]:
        """Parallel ranks of a global rank; experts are split over TP too (Megatron-core ETP = TP)."""
        tp_rank = rank % self.tp
        dp_rank = (rank // self.tp) % self.dp
        return {"tp": tp_rank, "ep": dp_rank % self.ep, "pp": rank // (self.tp * self.dp)}

    def size(self, axis: str) -> int:
        return {"tp": self.tp, "ep": self.ep}[axis]

    def describe(self) -> str:
        split = f" layers {','.join(map(str, self.layers_per_stage))}" if self.layers_per_stage else ""
        return f"train TP{self.tp} PP{self.pp} EP{self.ep} DP{self.dp}{split}"


@dataclass(frozen=True)
class InferLayout:
    world: int
    tp: int = 1
    ep: int = 1

    def __post_init__(self) -> None:
        for name in ("world", "tp", "ep"):
            _positive(f"inference {name}", getattr(self, name))
        if self.world % self.tp:
            raise ReshardLayoutError(f"inference TP {self.tp} does not divide the {self.world} ranks")
        if self.world % self.ep:
            raise ReshardLayoutError(f"inference EP {self.ep} does not divide the {self.world} ranks")

    def coords(self, rank: int) -> dict[str, int]:
        return {"tp": rank % self.tp, "ep": rank % self.ep}

    def size(self, axis: str) -> int:
        return {"tp": self.tp, "ep": self.ep}[axis]

    def describe(self) -> str:
        return f"infer TP{self.tp} EP{self.ep}"


def check_pair(train: TrainLayout, infer: InferLayout, num_experts: int) -> None:
    """Reject pairs the planner does not map, before any planning work."""
    if train.world != infer.world:
        raise ReshardLayoutError(
            f"training uses {train.world} ranks but inference {infer.world}; the reshard runs on colocated "
            "(hybrid-engine) workers, so both must span the same ranks"
        )
    if num_experts % train.ep:
        raise ReshardLayoutError(f"{num_experts} experts do not split over training EP {train.ep}")
    if num_experts % infer.ep:
        raise ReshardLayoutError(f"{num_experts} experts do not split over inference EP {infer.ep}")
    # Growing EP keeps each inference rank's experts inside one training EP rank's block, so an expert
    # arrives whole from the ranks of one EP coordinate; shrinking EP would make each rollout rank hold
    # more experts than any training rank, the opposite of what colocated RL needs memory-wise.
    if infer.ep % train.ep:
        raise ReshardLayoutError(
            f"training EP {train.ep} does not divide inference EP {infer.ep}; the alltoallv reshard maps "
            "training EP groups into larger inference EP groups only"
        )
