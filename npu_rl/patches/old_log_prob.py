"""Skip verl 0.6.1's old_log_prob forward pass on-policy (``recompute_old_log_prob=False``).

With one optimizer update per step (``ppo_epochs == 1``, mini-batch == batch) the parameters are unchanged
when the update's own forward runs, so the ``old_log_prob`` that verl recomputes with a full forward pass
equals the update's ``log_prob``. The Ascend recipes replace it by ``log_prob.detach()`` behind
``actor_rollout_ref.actor.recompute_old_log_prob=False``; stock verl 0.6.1 always runs the pass (verl
issue #3996). Importing this module imports neither verl nor torch (it is installed in every process).

* config: verl's actor dataclasses reject unknown keys; :func:`hydra_overrides` targets subclasses with the field;
* driver: :func:`check_config` refuses any configuration where the shortcut is not exact; the trainer's
  ``compute_log_prob`` becomes NaN placeholders (the keys are required; NaN makes any stray use loud);
* workers (FSDP and Megatron): the policy loss gets ``log_prob.detach()`` as ``old_log_prob``, a second
  update in one step is an error, and the update's forward yields the per-token entropy verl logs from the
  skipped pass, aggregated over the whole batch as verl does (``actor/entropy``).
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import functools
from typing import Any

from .consistency import ENV, REAL_PASS
from .guard import FSDP_WORKERS, MEGATRON_WORKERS, RAY_TRAINER, VERL_0_6_1, Patch

PATCH_NAME = "old_log_prob"
KEY = "recompute_old_log_prob"

DP_ACTOR = "verl.workers.actor.dp_actor"
MEGATRON_ACTOR = "verl.workers.actor.megatron_actor"
MCORE_MODELS = "verl.models.mcore"

# Source fingerprints (npu_rl.patches.guard) of the verl 0.6.1 code this patch relies on:
# fit's old_log_prob branch and the metrics path, the actors' update loops and their
# policy-loss calls, the workers passing update_policy's metrics dict to the driver.
FINGERPRINTS = {
    f"{RAY_TRAINER}:RayPPOTrainer.fit": "3661c861fcee4890",
    f"{RAY_TRAINER}:RayPPOTrainer.init_workers": "cdf7fb40ec91ce88",
    f"{DP_ACTOR}:DataParallelPPOActor.update_policy": "d014c4cae32cd4b8",
    f"{DP_ACTOR}:DataParallelPPOActor._forward_micro_batch": "2ada07b3b2a3ecef",
    f"{MEGATRON_ACTOR}:MegatronPPOActor.update_policy": "862716c75e274709",
    f"{MEGATRON_ACTOR}:MegatronPPOActor.forward_backward_batch": "8ec4e1845f041da8",
    f"{FSDP_WORKERS}:ActorRolloutRefWorker.update_actor": "c6ad1bb6bba485b1",
    f"{MEGATRON_WORKERS}:ActorRolloutRefWorker.update_actor": "256a082068a7de20",
    f"{MCORE_MODELS}.registry:get_mcore_forward_fn": "6b31394ab431751e",
    f"{MCORE_MODELS}.registry:get_mcore_forward_fused_fn": "c6584c6aa71f6c3a",
}

# Worker -> driver side channel inside update_actor's metrics dict (popped by the driver
# before verl reduces the metrics).
ENTROPY_KEY = "npu_rl/update_entropys"
MASK_KEY = "npu_rl/update_response_mask"

_ACTOR_CONFIGS = {"FSDPActorConfig", "McoreActorConfig"}
_config_classes: dict[str, type] = {}


class OldLogProbConfigError(ValueError):
    """A configuration where skipping the old_log_prob pass would not be exact."""


PATCH = Patch(PATCH_NAME, {VERL_0_6_1: FINGERPRINTS})


# --- configuration -------------------------------------------------------------------------------


def skip_enabled(actor_config: Any) -> bool:
    """True when the actor config (OmegaConf or verl dataclass) asks to skip the pass."""
    return actor_config.get(KEY, True) is False


def hydra_overrides(strategy: str) -> list[str]:
    """Overrides that deliver ``actor.recompute_old_log_prob=False`` through verl's config."""
    cls = "McoreActorConfig" if strategy == "megatron" else "FSDPActorConfig"
    return [f"actor_rollout_ref.actor._target_={__name__}.{cls}", f"+actor_rollout_ref.actor.{KEY}=False"]


def __getattr__(name: str) -> type:
    # verl's actor dataclasses with the extra field, built on first use so that importing
    # this module (every process does, see boot/) does not import verl.
    if name not in _ACTOR_CONFIGS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    if name not in _config_classes:
        import verl.workers.config as verl_configs  # lazy: verl

        _config_classes[name] = dataclasses.make_dataclass(
            name,
            [(KEY, bool, dataclasses.field(default=True))],
            bases=(getattr(verl_configs, name),),
            namespace={"__module__": __name__, "__qualname__": name},
        )
    return _config_classes[name]


def gated(config: Any) -> bool:
    """The launch sets the consistency gate for every Ray worker (its runtime_env), the TaskRunner included."""
    env_vars = config.get("ray_kwargs", {}).get("ray_init", {}).get("runtime_env", {}).get("env_vars", {})
    return bool(env_vars.get(ENV))


def check_config(config: Any) -> None:
    """Refuse a verl config (OmegaConf) where skipping old_log_prob would be inexact."""
    actor = config.actor_rollout_ref.actor
    if not skip_enabled(actor):
        return
    problems = []
    if actor.ppo_epochs != 1:
        problems.append(f"actor_rollout_ref.actor.ppo_epochs={actor.ppo_epochs} (must be 1)")
    if actor.ppo_mini_batch_size != config.data.train_batch_size:
        problems.append(
            f"actor_rollout_ref.actor.ppo_mini_batch_size={actor.ppo_mini_batch_size} != "
            f"data.train_batch_size={config.data.train_batch_size}"
        )
    if actor.get("use_rollout_log_probs", False):
        problems.append("actor_rollout_ref.actor.use_rollout_log_probs=True")
    if config.algorithm.get("use_kl_in_reward", False):
        problems.append("algorithm.use_kl_in_reward=True (reads old_log_probs before the update)")
    correction = config.algorithm.get("rollout_correction", None)
    if correction is not None and correction.get("bypass_mode", False):
        problems.append("algorithm.rollout_correction.bypass_mode=True")
    if config.actor_rollout_ref.rollout.get("calculate_log_probs", False) and not gated(config):
        # verl compares them with old_log_probs every step; the consistency gate only where the pass runs.
        problems.append(
            "actor_rollout_ref.rollout.calculate_log_probs=True (compared with old_log_probs) without "
            "the consistency gate"
        )
    if config.trainer.get("critic_warmup", 0):
        problems.append(f"trainer.critic_warmup={config.trainer.critic_warmup} (steps without an actor update)")
    if problems:
        raise OldLogProbConfigError(
            f"actor_rollout_ref.actor.{KEY}=False needs exactly one on-policy optimizer update per step with "
            f"nothing else reading old_log_probs, but {'; '.join(problems)}"
        )


def _require_one_update(updates: int, what: str) -> None:
    if updates > 1:
        raise RuntimeError(
            f"npu_rl patch {PATCH_NAME!r}: {what} with {KEY}=False; the skipped old_log_prob pass is exact "
            "only for one optimizer update per step"
        )


# --- driver --------------------------------------------------------------------------------------

_skipping = contextvars.ContextVar("npu_rl_skip_old_log_prob", default=False)


def skipped_log_prob(batch: Any, temperature: float) -> Any:
    """Stands in for ``actor_rollout_wg.compute_log_prob``: NaN placeholders of the right shape.

    The real pass also hands the sampling temperature on to the update (its meta_info).
    """
    import torch  # lazy: torch
    from verl import DataProto  # lazy: verl

    nan = torch.full(batch.batch["responses"].shape, float("nan"), dtype=torch.float32)
    return DataProto.from_dict(
        tensors={"old_log_probs": nan, "entropys": nan.clone()}, meta_info={"temperature": temperature}
    )


def entropy_metric(metrics: dict, loss_agg_mode: str) -> float:
    """Pop the workers' update entropies from ``metrics``; aggregate them as fit's old_log_prob branch does."""
    import torch  # lazy: torch
    from verl.trainer.ppo.core_algos import agg_loss  # lazy: verl

    if ENTROPY_KEY not in metrics:
        raise RuntimeError(
            f"npu_rl patch {PATCH_NAME!r}: the actor update reported no entropy; is the patch installed in the "
            "worker processes (NPU_RL_PATCHES)?"
        )
    entropys, masks = metrics.pop(ENTROPY_KEY), metrics.pop(MASK_KEY)
    # one entry per worker after DataProto.concat; a bare tensor from a single worker
    entropys = torch.cat(entropys) if isinstance(entropys, list) else entropys
    masks = torch.cat(masks) if isinstance(masks, list) else masks
    return agg_loss(loss_mat=entropys, loss_mask=masks, loss_agg_mode=loss_agg_mode).item()


def _with_entropy(update_actor, loss_agg_mode: str):
    @functools.wraps(update_actor)
    def wrapped(*args, **kwargs):
        output = update_actor(*args, **kwargs)
        metrics = output.meta_info["metrics"]
        metrics["actor/entropy"] = [entropy_metric(metrics, loss_agg_mode)]
        return output

    return wrapped


@PATCH.applies_to(RAY_TRAINER)
def patch_ray_trainer(module: Any) -> None:
    cls = module.RayPPOTrainer
    original_init = cls.init_workers
    original_timer = module.marked_timer

    @functools.wraps(original_init)
    def init_workers(self):
        if not skip_enabled(self.config.actor_rollout_ref.actor):
            return original_init(self)
        check_config(self.config)  # before minutes of worker start-up
        original_init(self)
        wg = self.actor_rollout_wg
        setattr(wg, REAL_PASS, wg.compute_log_prob)  # the consistency gate runs it on its steps
        wg.compute_log_prob = functools.partial(
            skipped_log_prob, temperature=self.config.actor_rollout_ref.rollout.temperature
        )
        wg.update_actor = _with_entropy(wg.update_actor, self.config.actor_rollout_ref.actor.loss_agg_mode)
        _skipping.set(True)

    def marked_timer(name, timing_raw, *args, **kwargs):
        # fit times the (skipped) pass as "old_log_prob"; no pass, no timing_s/old_log_prob.
        if name == "old_log_prob" and _skipping.get():
            return contextlib.nullcontext()
        return original_timer(name, timing_raw, *args, **kwargs)

    cls.init_workers = init_workers
    module.marked_timer = marked_timer


# --- workers -------------------------------------------------------------------------------------


def _on_policy_loss_getter(get_policy_loss_fn):
    """``get_policy_loss_fn`` whose losses use the update's own detached log-probs as old_log_prob."""

    @functools.wraps(get_policy_loss_fn)
    def getter(name):
        loss_fn = get_policy_loss_fn(name)

        @functools.wraps(loss_fn)
        def loss(*, old_log_prob, log_prob, config, **kwargs):
            if skip_enabled(config):
                old_log_prob = log_prob.detach()
            return loss_fn(old_log_prob=old_log_prob, log_prob=log_prob, config=config, **kwargs)

        return loss

    return getter


def _tap_metrics(tap: list[tuple[Any, Any]]) -> dict:
    import torch  # lazy: torch

    if not tap:  # a non-last pipeline stage computes no log-probs
        return {}
    return {ENTROPY_KEY: torch.cat([e for e, _ in tap]), MASK_KEY: torch.cat([m for _, m in tap])}


def _patch_actor(module: Any, cls: Any, skipping_update) -> None:
    """Both actors: on-policy losses, and ``update_policy`` replaced by ``skipping_update(self, data,
    verl's update_policy)`` when the actor skips the old_log_prob pass."""
    module.get_policy_loss_fn = _on_policy_loss_getter(module.get_policy_loss_fn)
    original = cls.update_policy

    @functools.wraps(original)
    def update_policy(self, data):
        if not skip_enabled(self.config):
            return original(self, data)
        return skipping_update(self, data, original)

    cls.update_policy = update_policy


@PATCH.applies_to(DP_ACTOR, also=(FSDP_WORKERS,))
def patch_dp_actor(module: Any) -> None:
    cls = module.DataParallelPPOActor
    original_forward = cls._forward_micro_batch

    def update_policy(self, data, original_update):
        updates = len(data.split(self.config.ppo_mini_batch_size)) * self.config.ppo_epochs
        _require_one_update(updates, f"{updates} optimizer updates on one step's batch")
        tap: list[tuple[Any, Any]] = []
        self._npu_rl_entropy_tap = tap
        try:
            metrics = original_update(self, data)
        finally:
            self._npu_rl_entropy_tap = None
        metrics.update(_tap_metrics(tap))
        return metrics

    @functools.wraps(original_forward)
    def _forward_micro_batch(self, micro_batch, temperature, calculate_entropy=False):
        import torch  # lazy: torch

        tap = getattr(self, "_npu_rl_entropy_tap", None)
        if tap is None or not torch.is_grad_enabled():
            return original_forward(self, micro_batch, temperature, calculate_entropy=calculate_entropy)
        entropy, log_prob = original_forward(self, micro_batch, temperature, calculate_entropy=True)
        # Keep the dtype the model produced (bf16 under FSDP mixed precision): verl aggregates the
        # recomputed pass's entropy in that dtype, and the metric must match it, not a finer mean.
        tap.append((entropy.detach().cpu(), micro_batch["response_mask"].cpu()))
        return (entropy if calculate_entropy else None), log_prob

    _patch_actor(module, cls, update_policy)
    cls._forward_micro_batch = _forward_micro_batch


# Megatron: the entropy leaves the model in the output dict of verl.models.mcore's forward
# functions (full sequence, one micro-batch per call, in order on the last pipeline stage).
_mcore_tap: contextvars.ContextVar[list | None] = contextvars.ContextVar("npu_rl_mcore_entropy", default=None)


@PATCH.applies_to(MCORE_MODELS, also=(f"{MCORE_MODELS}.registry",))
def patch_mcore_forward(module: Any) -> None:
    for name in ("get_mcore_forward_fn", "get_mcore_forward_fused_fn"):
        getter = getattr(module, name)

        def tapped_getter(*args, _getter=getter, **kwargs):
            forward_fn = _getter(*args, **kwargs)

            def forward(*f_args, **f_kwargs):
                output = forward_fn(*f_args, **f_kwargs)
                tap = _mcore_tap.get()
                if tap is not None and isinstance(output, dict) and "entropy" in output:
                    # In the model's dtype, as verl aggregates the recomputed pass's entropy (see the FSDP tap).
                    tap.append(output["entropy"].detach().cpu())
                return output

            return forward

        setattr(module, name, tapped_getter)


@PATCH.applies_to(MEGATRON_ACTOR, also=(MEGATRON_WORKERS,))
def patch_megatron_actor(module: Any) -> None:
    cls = module.MegatronPPOActor
    original_fbb = cls.forward_backward_batch

    def update_policy(self, dataloader, original_update):
        import torch  # lazy: torch

        if self.config.use_dynamic_bsz:
            # Dynamic batches reorder the micro-batches; the entropy rows would not match the masks.
            raise RuntimeError(f"npu_rl patch {PATCH_NAME!r}: {KEY}=False with megatron needs use_dynamic_bsz=False")
        seen: list = []

        def one_update():
            for data in dataloader:
                seen.append(data)
                _require_one_update(len(seen), "a second mini-batch or epoch")
                yield data

        token = _mcore_tap.set([])
        try:
            metrics = original_update(self, one_update())
            entropys = _mcore_tap.get()
        finally:
            _mcore_tap.reset(token)
        if entropys and seen:
            batch = seen[0].batch
            length = batch["responses"].size(1)
            rows = torch.cat(entropys)[:, -length - 1 : -1]
            metrics.update({ENTROPY_KEY: rows, MASK_KEY: batch["response_mask"].cpu()})
        return metrics

    @functools.wraps(original_fbb)
    def forward_backward_batch(self, data, forward_only=False, *args, calculate_entropy=False, **kwargs):
        if _mcore_tap.get() is not None and not forward_only:
            calculate_entropy = True  # entropy_coeff 0 keeps it out of the loss
        return original_fbb(self, data, forward_only, *args, calculate_entropy=calculate_entropy, **kwargs)

    _patch_actor(module, cls, update_policy)
    cls.forward_backward_batch = forward_backward_batch
