"""The health rules' thresholds: defaults in ``thresholds.yaml`` next to this file,
overridable per key from a user YAML."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from pydantic import Field, ValidationError, model_validator

from ..errors import UserError
from ..recipe.schema import Strict

DEFAULTS = Path(__file__).with_name("thresholds.yaml")


class _OneMetric(Strict):
    metric: str  # the scalar tag the rule reads


class _Windowed(_OneMetric):
    """A rule comparing each point with the running median of the ``window`` points before it."""

    window: int = Field(gt=0)
    min_history: int = Field(gt=0)


class Entropy(_OneMetric):
    warn_below: float
    critical_below: float
    relative_floor: float = Field(ge=0, le=1)
    fall_fraction: float = Field(gt=0, le=1)
    baseline_points: int = Field(gt=0)
    min_points: int = Field(gt=0)
    converged_accuracy: float = Field(ge=0, le=100)


class Kl(_OneMetric):
    explode_above: float
    flat_below: float = Field(ge=0)
    flat_points: int = Field(gt=0)


class NonFinite(Strict):
    metrics: list[str]


class ClipFrac(_OneMetric):
    high_above: float
    low_below: float
    min_points: int = Field(gt=0)
    on_policy_zero: float = Field(ge=0)


class GradNorm(_Windowed):
    spike_factor: float = Field(gt=1)


class ResponseLength(_Windowed):
    clip_metric: str
    rise_factor: float = Field(gt=1)
    drop_factor: float = Field(gt=0, lt=1)
    clip_near_one: float = Field(gt=0, le=1)
    clip_points: int = Field(gt=0)


class RewardHacking(Strict):
    min_reward_gain: float = Field(gt=0)
    max_acc_gain: float
    eval_min_gain_points: float


class Throughput(Strict):
    warmup_steps: int = Field(ge=0)


class Compare(Strict):
    throughput_drop: float = Field(ge=0, lt=1)
    step_time_rise: float = Field(ge=0)
    peak_memory_metric: str
    peak_memory_rise_gb: float = Field(ge=0)
    reward_metric: str
    reward_first_step: int = Field(ge=0)
    reward_last_step: int = Field(ge=0)
    reward_mean_diff: float = Field(ge=0)
    validation_acc_diff: float = Field(ge=0, le=1)

    @model_validator(mode="after")
    def _window(self) -> Compare:
        if self.reward_last_step < self.reward_first_step:
            raise ValueError(
                f"reward_last_step ({self.reward_last_step}) is before reward_first_step ({self.reward_first_step})"
            )
        return self


class Agent(Strict):
    """Multi-turn runs (docs/agents.md): tool calls failing, rollouts running into the turn cap."""

    calls_metric: str
    errors_metric: str
    turns_metric: str
    error_rate_above: float = Field(gt=0, le=1)
    min_points: int = Field(gt=0)
    cap_points: int = Field(gt=0)


class Thresholds(Strict):
    entropy: Entropy
    kl: Kl
    nonfinite: NonFinite
    pg_clipfrac: ClipFrac
    grad_norm: GradNorm
    response_length: ResponseLength
    reward_hacking: RewardHacking
    agent: Agent
    throughput: Throughput
    compare: Compare


def _merge(base: dict, over: dict, where: str = "") -> dict:
    out = dict(base)
    for k, v in over.items():
        if k not in base:
            raise UserError(f"thresholds: unknown key {where + k!r}")
        out[k] = _merge(base[k], v, f"{where}{k}.") if isinstance(v, dict) and isinstance(base[k], dict) else v
    return out


def load_thresholds(override: Path | dict[str, Any] | None = None) -> Thresholds:
    data = yaml.safe_load(DEFAULTS.read_text(encoding="utf-8"))
    if override is not None:
        if isinstance(override, Path):
            if not override.is_file():
                raise UserError(f"thresholds file not found: {override}")
            try:
                override = yaml.safe_load(override.read_text(encoding="utf-8")) or {}
            except (yaml.YAMLError, UnicodeDecodeError) as err:
                raise UserError(f"thresholds {override}: not valid YAML ({str(err).splitlines()[0]})") from None
        if not isinstance(override, dict):
            raise UserError("thresholds: the override must be a YAML mapping")
        data = _merge(data, override)
    try:
        return Thresholds.model_validate(data)
    except ValidationError as err:
        first = err.errors()[0]
        where = ".".join(map(str, first["loc"]))
        msg = first["msg"].removeprefix("Value error, ")
        raise UserError(f"thresholds: {where}: {msg}" if where else f"thresholds: {msg}") from None
