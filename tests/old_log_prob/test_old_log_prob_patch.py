"""The old_log_prob patch's pieces, on small tensors and stand-in verl modules (no training run)."""

from __future__ import annotations

import types

import pytest
import torch
from verl.trainer.ppo.core_algos import agg_loss, get_policy_loss_fn
from verl.utils.config import omega_conf_to_dataclass

from npu_rl.patches import old_log_prob as olp


def _actor_config(skip: bool):
    from omegaconf import OmegaConf

    cfg = OmegaConf.create(
        {
            "_target_": "npu_rl.patches.old_log_prob.FSDPActorConfig",
            "strategy": "fsdp",
            "ppo_micro_batch_size_per_gpu": 1,
            olp.KEY: not skip,
        }
    )
    return omega_conf_to_dataclass(cfg)


def _batch(seed=0, rows=6, length=5):
    g = torch.Generator().manual_seed(seed)
    log_prob = (-torch.rand(rows, length, generator=g)).requires_grad_()
    advantages = torch.randn(rows, length, generator=g)
    mask = torch.ones(rows, length)
    mask[0, 3:] = 0
    return log_prob, advantages, mask


def test_policy_loss_uses_the_updates_own_log_probs():
    loss_fn = olp._on_policy_loss_getter(get_policy_loss_fn)("vanilla")
    log_prob, adv, mask = _batch()
    nan = torch.full_like(log_prob, float("nan"))
    skip_loss, skip_metrics = loss_fn(
        old_log_prob=nan,
        log_prob=log_prob,
        advantages=adv,
        response_mask=mask,
        loss_agg_mode="token-mean",
        config=_actor_config(True),
    )
    ref_loss, ref_metrics = get_policy_loss_fn("vanilla")(
        old_log_prob=log_prob.detach(),
        log_prob=log_prob,
        advantages=adv,
        response_mask=mask,
        loss_agg_mode="token-mean",
        config=_actor_config(True),
    )
    assert torch.isfinite(skip_loss) and skip_loss.item() != 0
    torch.testing.assert_close(skip_loss, ref_loss)
    assert skip_metrics["actor/pg_clipfrac"] == ref_metrics["actor/pg_clipfrac"] == 0
    skip_loss.backward()
    assert log_prob.grad.abs().sum() > 0  # the gradient flows through log_prob, not the detached copy
    # switch off: the given old_log_prob is used (NaN stays NaN)
    kept, _ = loss_fn(
        old_log_prob=nan,
        log_prob=log_prob,
        advantages=adv,
        response_mask=mask,
        loss_agg_mode="token-mean",
        config=_actor_config(False),
    )
    assert torch.isnan(kept)


@pytest.mark.parametrize("mode", ["token-mean", "seq-mean-token-sum", "seq-mean-token-mean", "seq-mean-token-sum-norm"])
def test_entropy_metric_aggregates_the_whole_batch_like_verl(mode):
    entropy, _, mask = _batch(1, rows=8)
    entropy = entropy.detach().abs()
    # two workers, micro-batches of unequal token counts: a mean of means would differ
    metrics = {olp.ENTROPY_KEY: [entropy[:3], entropy[3:]], olp.MASK_KEY: [mask[:3], mask[3:]], "actor/x": [1.0]}
    value = olp.entropy_metric(metrics, mode)
    assert value == pytest.approx(agg_loss(entropy, mask, mode).item(), abs=1e-7)
    assert set(metrics) == {"actor/x"}  # the side channel does not reach verl's reduce_metrics
    with pytest.raises(RuntimeError, match="reported no entropy"):
        olp.entropy_metric({"actor/x": [1.0]}, mode)


def test_placeholder_is_nan_with_the_batch_shape_and_temperature():
    from verl import DataProto

    batch = DataProto.from_dict(tensors={"responses": torch.zeros(4, 7, dtype=torch.long)})
    out = olp.skipped_log_prob(batch, temperature=0.7)
    assert out.batch["old_log_probs"].shape == (4, 7) and torch.isnan(out.batch["old_log_probs"]).all()
    assert torch.isnan(out.batch["entropys"]).all()
    assert out.meta_info["temperature"] == 0.7


def test_megatron_path_with_stand_in_modules():
    """Stand-ins reproduce the call pattern of verl 0.6.1's MegatronPPOActor (megatron is not installed here)."""
    forward_calls = []

    def forward_fn(model, input_ids, calculate_entropy):
        forward_calls.append(calculate_entropy)
        rows, seq = input_ids.shape
        out = {"log_probs": -torch.ones(rows, seq)}
        if calculate_entropy:
            out["entropy"] = input_ids.float()  # recognisable values
        return out

    mcore = types.SimpleNamespace(
        get_mcore_forward_fn=lambda hf: forward_fn, get_mcore_forward_fused_fn=lambda hf: forward_fn
    )
    olp.patch_mcore_forward(mcore, check=False)

    class Actor:
        def __init__(self, skip):
            self.config = types.SimpleNamespace(
                use_dynamic_bsz=False, entropy_coeff=0.0, get=lambda k, d=None: (not skip) if k == olp.KEY else d
            )

        def forward_backward_batch(
            self,
            data,
            forward_only=False,
            post_process_fn=None,
            calculate_entropy=False,
            micro_batch_size=None,
            **kwargs,
        ):
            for micro in data.split(micro_batch_size):  # like verl: micro-batches in order
                mcore.get_mcore_forward_fn(None)(None, micro.batch["input_ids"], calculate_entropy)
            return {"output": []}

        def update_policy(self, dataloader):
            for data in dataloader:
                self.forward_backward_batch(data, calculate_entropy=self.config.entropy_coeff != 0, micro_batch_size=2)
            return {"actor/pg_loss": [0.0]}

    module = types.SimpleNamespace(MegatronPPOActor=Actor, get_policy_loss_fn=get_policy_loss_fn)
    olp.patch_megatron_actor(module, check=False)
    assert module.get_policy_loss_fn("vanilla") is not get_policy_loss_fn("vanilla")

    from verl import DataProto

    ids = torch.arange(5 * 9).reshape(5, 9)
    mask = torch.ones(5, 3)
    data = DataProto.from_dict(tensors={"input_ids": ids, "responses": ids[:, -3:], "response_mask": mask})
    metrics = Actor(skip=True).update_policy(iter([data]))
    assert forward_calls == [True, True, True]  # entropy computed in the update's own forward
    torch.testing.assert_close(metrics[olp.ENTROPY_KEY], ids[:, -4:-1].float())  # aligned as verl's loss_func
    torch.testing.assert_close(metrics[olp.MASK_KEY], mask)
    with pytest.raises(RuntimeError, match="second mini-batch"):
        Actor(skip=True).update_policy(iter([data, data]))
    forward_calls.clear()
    assert olp.ENTROPY_KEY not in Actor(skip=False).update_policy(iter([data, data]))
    assert forward_calls == [False] * 6
