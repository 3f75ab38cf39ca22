"""The train/rollout consistency gate: at a run's first step (and every ``every`` steps) the skipped old_log_prob
pass runs, and the trainer's log-probs of the sampled tokens are compared with the rollout's own; too far
apart, the run stops before the optimizer step.

A weight sync that goes wrong (vllm-ascend #5747: garbled first step after NZ-format weights; a reshard that
misplaces a shard) makes the rollout sample from another policy than the one trained, and nothing fails: the
update just learns from the wrong samples. verl measures the gap (``verl/utils/debug/metrics.py``
``calculate_debug_metrics``: ``training/rollout_probs_diff_mean``, the mean |p_trainer - p_rollout| over
response tokens) only when its old_log_prob pass runs, the pass the recipes skip (:mod:`npu_rl.patches.old_log_prob`).
The gate runs it where the recipe says, at the rollout's temperature for log-probs (:func:`_at_requested_temperature`),
with the rollout's log-probs (``calculate_log_probs=True``, verl 0.6.1 ``vllm_rollout_spmd.py`` 399-444),
measures with verl's function and stops above ``max_probs_diff_mean``, or below ``min_probs_corr`` of verl's
``training/rollout_actor_probs_pearson_corr`` (the same function's Pearson correlation of the two sides' token
probabilities). The mean alone misses a sync that never lands: an engine left with ``load_format: dummy``'s
near-zero random weights samples tokens that both sides give probabilities near zero, so their mean difference
stays small (measured 0.0014 against a healthy 0.0007 on CPU with vLLM) while the correlation falls to
nothing. On other steps it drops the rollout's
log-probs so verl does not compare them with the skip's NaN placeholders. Each verdict goes to
``NPU_RL_CONSISTENCY_FILE`` (JSON); a failed gate raises in the TaskRunner: ``Exit.INCONSISTENT``.

On verl 0.9.0 the skip is verl's own bypass mode (npu_rl.launcher.releases ``BYPASS_OLD_LOG_PROB``); on the
gate's steps the gate turns it off for the one call, so the pass runs, and the pass computes both measures when
the rollout returns log-probs (``PPOTrainer._compute_old_log_prob``, verl v0.9.0
trainer/ppo/v1/trainer_base.py:1479-1538, ``calculate_debug_metrics`` at :1534-1536), at the sampling
temperature on both sides (the pass divides by it, :1496-1502; vLLM 0.23 reports log-probs after it,
``logprobs_mode: processed_logprobs``, workers/config/rollout.py:197): the gate reads them after the pass on
its steps and stops the run the same way. The drill moves to the trainer side of the weight sync,
``ServerAdapter.update_weights`` (workers/rollout/vllm_rollout/vllm_rollout.py:209).
"""

from __future__ import annotations

import functools
import json
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from .guard import (
    FSDP_WORKERS,
    MEGATRON_WORKERS,
    RAY_TRAINER,
    TRAINER_BASE,
    VERL_0_6_1,
    VERL_0_9_0,
    VLLM_ROLLOUT,
    Patch,
)

PATCH_NAME = "consistency"
ENV = "NPU_RL_CONSISTENCY"  # JSON {"every": N, "max_probs_diff_mean": x, "min_probs_corr": y}
FILE_ENV = "NPU_RL_CONSISTENCY_FILE"
METRIC = "training/rollout_probs_diff_mean"  # verl's names for what the gate measures
CORR_METRIC = "training/rollout_actor_probs_pearson_corr"
# Set on the worker group by npu_rl.patches.old_log_prob before it replaces compute_log_prob with the skip.
REAL_PASS = "npu_rl_compute_log_prob"
# A batch's meta_info key: the temperature the workers' compute_log_prob divides the logits by.
TEMPERATURE = "npu_rl_temperature"
# The temperature the rollout's log-probs are computed at: vLLM 0.9.1's raw logits (and so the CPU rollout's).
ROLLOUT_LOG_PROB_TEMPERATURE = 1.0

FINGERPRINTS = {
    f"{RAY_TRAINER}:RayPPOTrainer.fit": "3661c861fcee4890",
    f"{RAY_TRAINER}:RayPPOTrainer.init_workers": "cdf7fb40ec91ce88",
    "verl.utils.debug.metrics:calculate_debug_metrics": "4a64dfb5c7c71bb6",
    f"{FSDP_WORKERS}:ActorRolloutRefWorker.compute_log_prob": "beaecf18bde8055a",
    f"{MEGATRON_WORKERS}:ActorRolloutRefWorker.compute_log_prob": "7ada4bcb145428ad",
    f"{VLLM_ROLLOUT}:vLLMRollout.update_weights": "b185a260121c953b",
}
# The gate's drill: NPU_RL_DRILL=rollout_weights lands every weight sync into the rollout with noise, as a
# broken sync would (seeded: every drill run breaks the same weights the same way); the gate must stop it.
DRILL_ENV = "NPU_RL_DRILL"
WEIGHTS_DRILL = "rollout_weights"
# NPU_RL_DRILL=rollout_weights_skipped: every weight sync into vLLM loads nothing, as a sync that silently
# never lands would; the engine samples from what it holds (at step 1, load_format dummy's random weights).
# vLLM only: the hf rollout samples from the trainer's own module and has no sync to skip.
SKIPPED_DRILL = "rollout_weights_skipped"
SERVER_ADAPTER = "verl.workers.rollout.vllm_rollout.vllm_rollout"
DEBUG_METRICS = "verl.utils.debug.metrics"
FINGERPRINTS_0_9_0 = {
    f"{TRAINER_BASE}:PPOTrainer._compute_old_log_prob": "47e705af8fb4cc5f",
    # Reads bypass_mode at each call: the due step's pass leaves the rollout correction off.
    f"{TRAINER_BASE}:PPOTrainer._compute_advantage": "723b42cbdaf4d56d",
    f"{DEBUG_METRICS}:calculate_debug_metrics": "5e8ae0689ea96c24",
    f"{SERVER_ADAPTER}:ServerAdapter.update_weights": "d0dc82de07a73094",
}
V061, V090 = (VERL_0_6_1,), (VERL_0_9_0,)
PATCH = Patch(PATCH_NAME, {VERL_0_6_1: FINGERPRINTS, VERL_0_9_0: FINGERPRINTS_0_9_0})


class ConsistencyError(RuntimeError):
    """The rollout samples from a policy other than the trained one; raised before the update."""


@dataclass(frozen=True)
class Gate:
    every: int
    max_probs_diff_mean: float
    min_probs_corr: float

    def due(self, step: int, first: int) -> bool:
        """The first step this process trains (a restart re-creates the rollout and its sync), then every N."""
        return step == first or (self.every > 0 and step % self.every == 0)

    @classmethod
    def from_env(cls, environ=os.environ) -> Gate | None:
        raw = environ.get(ENV)
        return cls(**json.loads(raw)) if raw else None


@dataclass
class Verdicts:
    """What the gate found, step by step; ``error`` is the line `npu-rl train` prints."""

    max_probs_diff_mean: float
    min_probs_corr: float
    steps: list[dict] = field(default_factory=list)
    error: str | None = None

    def write(self, path: str | None) -> None:
        if path:
            Path(path).write_text(json.dumps(asdict(self), indent=1), encoding="utf-8")


def verdict_error(path: Path) -> str | None:
    """The gate's one-line verdict of a run, from its file (None: passed or never gated)."""
    try:
        return json.loads(path.read_text(encoding="utf-8")).get("error")
    except (FileNotFoundError, ValueError):
        return None


def measure(batch: Any, old_log_probs: Any) -> tuple[float, float]:
    """verl's ``training/rollout_probs_diff_mean`` and ``training/rollout_actor_probs_pearson_corr`` of
    ``batch``'s rollout log-probs against ``old_log_probs``."""
    from verl import DataProto  # lazy: verl
    from verl.utils.debug.metrics import calculate_debug_metrics  # lazy: verl

    tensors = {
        "rollout_log_probs": batch.batch["rollout_log_probs"],
        "old_log_probs": old_log_probs,
        "responses": batch.batch["responses"],
    }
    mask = "response_mask" if "response_mask" in batch.batch.keys() else "attention_mask"
    tensors[mask] = batch.batch[mask]
    metrics = calculate_debug_metrics(DataProto.from_dict(tensors=tensors))
    return float(metrics[METRIC]), float(metrics[CORR_METRIC])


def gated(trainer: Any, real, current, gate: Gate, verdicts: Verdicts, path: str | None):
    """``compute_log_prob`` of the worker group: the real pass and the comparison on due steps, else
    ``current`` (the skip) without the rollout's log-probs."""
    first: list[int] = []

    @functools.wraps(real)
    def compute_log_prob(batch):
        step = int(trainer.global_steps)
        first[:1] = first[:1] or [step]
        if not gate.due(step, first[0]):
            if current is not real:
                batch.batch.pop("rollout_log_probs", None)
            return current(batch)
        if "rollout_log_probs" not in batch.batch.keys():
            no_log_probs(step, verdicts, path)
        batch.meta_info[TEMPERATURE] = ROLLOUT_LOG_PROB_TEMPERATURE
        try:
            out = real(batch)
        finally:
            batch.meta_info.pop(TEMPERATURE, None)
        # The pass hands its temperature on to the update (fit unions it into the batch): the sampling one.
        out.meta_info["temperature"] = trainer.config.actor_rollout_ref.rollout.temperature
        judge(step, *measure(batch, out.batch["old_log_probs"]), gate, verdicts, path)
        return out

    return compute_log_prob


def no_log_probs(step: int, verdicts: Verdicts, path: str | None) -> None:
    verdicts.error = (
        f"consistency gate at step {step}: the rollout returned no log-probs "
        "(actor_rollout_ref.rollout.calculate_log_probs is not honoured by this rollout)"
    )
    verdicts.write(path)
    raise ConsistencyError(verdicts.error)


def judge(step: int, diff: float, corr: float, gate: Gate, verdicts: Verdicts, path: str | None) -> None:
    """Record the step's verdict; raise :class:`ConsistencyError` when the two sides are too far apart."""
    close = diff <= gate.max_probs_diff_mean  # NaN fails too
    alike = corr >= gate.min_probs_corr
    ok = close and alike
    verdicts.steps.append({"step": step, "probs_diff_mean": diff, "probs_corr": corr, "ok": ok})
    if not close:
        why = f"differ from the trainer's by {diff:.4g} on average ({METRIC}; limit {gate.max_probs_diff_mean:g})"
    elif not alike:
        why = (
            f"correlate with the trainer's by only {corr:.4g} ({CORR_METRIC}; limit {gate.min_probs_corr:g}; "
            f"mean difference {diff:.4g})"
        )
    if not ok:
        verdicts.error = (
            f"consistency gate at step {step}: the rollout's token probabilities {why}, so the rollout "
            "samples from another policy than the one trained (a broken weight sync?); stopped before the "
            "optimizer step"
        )
    verdicts.write(path)
    if not ok:
        raise ConsistencyError(verdicts.error)


@PATCH.wrap(RAY_TRAINER, "RayPPOTrainer.init_workers", also=(DEBUG_METRICS,), releases=V061)
def patch_ray_trainer(original_init):
    def init_workers(self):
        original_init(self)
        gate = Gate.from_env()
        if gate is None:
            return
        wg = self.actor_rollout_wg
        current = wg.compute_log_prob
        real = getattr(wg, REAL_PASS, current)
        path = os.environ.get(FILE_ENV)
        verdicts = Verdicts(gate.max_probs_diff_mean, gate.min_probs_corr)
        wg.compute_log_prob = gated(self, real, current, gate, verdicts, path)

    return init_workers


def _at_requested_temperature(compute_log_prob):
    """A worker's ``compute_log_prob`` that divides by ``meta_info[TEMPERATURE]`` when the batch asks.

    vLLM 0.9.1 computes the rollout's log-probs from the raw logits, before temperature
    (``vllm/v1/sample/sampler.py`` ``Sampler.forward``, lines 31-39), while verl's pass divides the logits by
    the rollout temperature (``fsdp_workers.py`` / ``megatron_workers.py``
    ``ActorRolloutRefWorker.compute_log_prob`` read ``config.rollout.temperature``): compared as they are, a
    healthy run below temperature 1 shows a gap that grows with the policy's uncertainty. So the gate's pass
    asks for the rollout's temperature for log-probs, 1, and the comparison is like for like. With the skip
    on, the update uses its own log-probs, so the pass's temperature changes nothing in training."""

    @functools.wraps(compute_log_prob)  # keeps verl's @register dispatch attributes
    def wrapped(self, data):
        wanted = data.meta_info.pop(TEMPERATURE, None)
        if wanted is None:
            return compute_log_prob(self, data)
        rollout = self.config.rollout
        saved = rollout.temperature
        rollout.temperature = wanted
        try:
            return compute_log_prob(self, data)
        finally:
            rollout.temperature = saved

    return wrapped


patch_fsdp_workers, patch_megatron_workers = PATCH.wrap_each(
    _at_requested_temperature,
    patch_fsdp_workers=(FSDP_WORKERS, "ActorRolloutRefWorker.compute_log_prob", VERL_0_6_1),
    patch_megatron_workers=(MEGATRON_WORKERS, "ActorRolloutRefWorker.compute_log_prob", VERL_0_6_1),
)


@PATCH.wrap(TRAINER_BASE, "PPOTrainer._compute_old_log_prob", also=(DEBUG_METRICS,), releases=V090)
def patch_trainer_base(original):
    state: dict[str, Any] = {}

    def _compute_old_log_prob(self, batch, metrics, *args, **kwargs):
        if "gate" not in state:  # read once, as the 0.6.1 gate does at init
            state["gate"] = Gate.from_env()
        gate: Gate | None = state["gate"]
        step = int(self.global_steps)
        first = state.setdefault("first", step)
        if gate is None or not gate.due(step, first):
            return original(self, batch, metrics, *args, **kwargs)
        # A due step runs the pass even where the skip is verl's bypass mode (npu_rl.launcher.releases
        # BYPASS_OLD_LOG_PROB): bypass off for this one call, so verl computes old_log_probs and both measures.
        # _compute_advantage reads the flag again, on again by then: no rollout correction, as on other steps.
        correction = self.config.algorithm.get("rollout_correction", None)
        bypass = correction is not None and bool(correction.get("bypass_mode", False))
        if bypass:
            correction.bypass_mode = False
        try:
            out = original(self, batch, metrics, *args, **kwargs)
        finally:
            if bypass:
                correction.bypass_mode = True
        verdicts = state.setdefault("verdicts", Verdicts(gate.max_probs_diff_mean, gate.min_probs_corr))
        path = os.environ.get(FILE_ENV)
        if METRIC not in metrics:  # verl measures only what the rollout returned
            no_log_probs(step, verdicts, path)
        judge(step, float(metrics[METRIC]), float(metrics.get(CORR_METRIC, float("nan"))), gate, verdicts, path)
        return out

    return _compute_old_log_prob


def drilled(weights: Any) -> Any:
    """``(name, tensor)`` pairs as a broken sync delivers them: each multi-element tensor plus noise of its
    own spread, from a seeded generator."""
    import torch  # lazy: torch

    noise = torch.Generator().manual_seed(0)
    for name, tensor in weights:
        if tensor.numel() > 1 and tensor.is_floating_point():
            spread = tensor.float().std()
            tensor = tensor + (torch.randn(tensor.shape, generator=noise) * spread).to(tensor.dtype)
        yield name, tensor


def _drill_weight_sync(original):
    async def update_weights(self, weights, *args, **kwargs):
        drill = os.environ.get(DRILL_ENV)
        if drill == SKIPPED_DRILL:
            # Drained, not loaded: the trainer's side (FSDP's gathers per tensor) runs as in a real sync.
            for _ in weights:
                pass
            return None
        if drill == WEIGHTS_DRILL:
            weights = drilled(weights)
        return await original(self, weights, *args, **kwargs)

    return update_weights


drill_vllm_weight_sync, drill_server_weight_sync = PATCH.wrap_each(
    _drill_weight_sync,
    drill_vllm_weight_sync=(VLLM_ROLLOUT, "vLLMRollout.update_weights", VERL_0_6_1),
    drill_server_weight_sync=(SERVER_ADAPTER, "ServerAdapter.update_weights", VERL_0_9_0),
)
