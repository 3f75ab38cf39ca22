"""Training (Megatron) and inference (vLLM) device layouts, and which shard each rank holds.

Rank numbering follows Megatron-core's default order ``tp-cp-ep-dp-pp`` (TP fastest,
PP slowest; context-parallel ranks hold replicas of the weights, as data-parallel ones do) and, for the
routed experts, its expert grid ``tp-ep-dp-pp`` inside a pipeline stage with the expert-tensor size ETP
in the place of TP (megatron-core ``parallel_state.initialize_model_parallel``, the ``expert_decoder``
RankGenerator); vLLM's is TP fastest, EP spanning ``ep`` consecutive ranks (TP x DP). Training and
rollout share the same devices (verl's hybrid engine), so inference rank r and training rank r are the
same process.
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
    # Expert tensor parallel size; 0: TP (Megatron-core's default when expert_tensor_parallel_size is unset).
    etp: int = 0

    def __post_init__(self) -> None:
        if self.etp == 0:
            object.__setattr__(self, "etp", self.tp)
        for name in ("world", "tp", "pp", "ep", "etp"):
            _positive(f"training {name}", getattr(self, name))
        if self.world % (self.tp * self.pp):
            raise ReshardLayoutError(f"training TP*PP ({self.tp}*{self.pp}) does not divide the {self.world} ranks")
        stage = self.world // self.pp
        if stage % (self.etp * self.ep):
            raise ReshardLayoutError(
                f"training ETP*EP ({self.etp}*{self.ep}) does not divide the {stage} ranks of a pipeline stage "
                f"({self.world} ranks / PP {self.pp}); Megatron lays the expert grid over each stage's ranks"
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
        """Parallel ranks of a global rank: TP and PP of the dense layers, EP and ETP of the expert grid."""
        in_stage = rank % (self.world // self.pp)
        return {
            "tp": rank % self.tp,
            "etp": in_stage % self.etp,
            "ep": (in_stage // self.etp) % self.ep,
            "pp": rank // (self.world // self.pp),
        }

    def size(self, axis: str) -> int:
        return {"tp": self.tp, "ep": self.ep, "etp": self.etp}[axis]

    def describe(self) -> str:
        split = f" layers {','.join(map(str, self.layers_per_stage))}" if self.layers_per_stage else ""
        etp = f" ETP{self.etp}" if self.etp != self.tp else ""
        return f"train TP{self.tp} PP{self.pp} EP{self.ep}{etp} DP{self.dp}{split}"


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
