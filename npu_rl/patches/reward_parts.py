"""The reward's parts in every step's metrics: ``reward/acc``, ``reward/format``, ``reward/cot``,
``reward/boxed``, ``reward/unevaluated`` (and an agent's: ``reward/turns``, ``reward/tool_calls``, ...); on
verl 0.9 also what each rollout's agent loop timed (``AGENT_TIMINGS``).

verl logs a training step's reward only as one score (``critic/score/mean``); the
per-sample parts the reward returns beside it (``npu_rl.reward.math``'s dict) reach
the batch (``RayPPOTrainer.fit`` puts ``reward_extra_infos_dict`` into
``batch.non_tensor_batch``) but no metric, so a run cannot show whether its reward
rose for the answers or for the format, nor how often the policy restates a
computation instead of answering (``unevaluated``). Validation logs them already
(``val-aux/<source>/<part>/mean@N``).

verl computes the step's data metrics with ``compute_data_metrics(batch=...)``,
called once per step in ``fit`` after the reward's parts are in the batch; the
patch wraps that name and adds each part's mean over the step's samples.
"""

from __future__ import annotations

import numpy as np

from .guard import METRIC_UTILS, RAY_TRAINER, TRAINER_BASE, VERL_0_6_1, VERL_0_9_0, Patch

PATCH_NAME = "reward_parts"
PREFIX = "reward/"
# The numeric parts each reward returns per sample (tests/patches/test_reward_parts.py checks them): npu_rl.reward.math,
# npu_rl.reward.agent and npu_rl.reward.code_tests; a part no sample of a step carries is left out of its metrics.
MATH_PARTS = ("acc", "format", "cot", "boxed", "unevaluated")
AGENT_PARTS = ("acc", "boxed", "unevaluated", "turns", "tool_calls", "tool_errors")
CODE_PARTS = ("acc", "passed", "sandbox_errors", "turns", "tool_calls", "tool_errors")
PARTS = tuple(dict.fromkeys(MATH_PARTS + AGENT_PARTS + CODE_PARTS))
FINGERPRINTS = {
    f"{RAY_TRAINER}:RayPPOTrainer.fit": "3661c861fcee4890",
    f"{METRIC_UTILS}:compute_data_metrics": "683347d0d391b74b",
}
# verl 0.9 keeps the step's batch in TransferQueue: the reward's parts stay in each sample's
# extra_fields["reward_extra_info"] (trainer/ppo/v1/agent_loop_tq.py:175) and _compute_metrics reads only the
# tensors it needs back (trainer/ppo/v1/trainer_base.py:1713-1735), so the patch reads that field after it.
FINGERPRINTS_0_9_0 = {f"{TRAINER_BASE}:PPOTrainer._compute_metrics": "831b29389ca2d095"}
PATCH = Patch(PATCH_NAME, {VERL_0_6_1: FINGERPRINTS, VERL_0_9_0: FINGERPRINTS_0_9_0})


def part_means(non_tensor_batch) -> dict[str, float]:
    """``reward/<part>``: the mean of each part the step's samples carry."""
    out = {}
    for part in PARTS:
        values = non_tensor_batch.get(part)
        if values is not None and len(values):
            out[PREFIX + part] = float(np.mean(np.asarray(values, dtype=np.float64)))
    return out


@PATCH.wrap(RAY_TRAINER, "compute_data_metrics", also=(METRIC_UTILS,), releases=(VERL_0_6_1,))
def patch_ray_trainer(original):
    def compute_data_metrics(batch, *args, **kwargs):
        metrics = original(batch, *args, **kwargs)
        metrics.update(part_means(batch.non_tensor_batch))
        return metrics

    return compute_data_metrics


def step_parts(extra_fields: list, tags: list) -> dict[str, list]:
    """Each part's values over a verl 0.9 step's samples (padding left out), from their ``extra_fields``."""
    infos = [
        (extra or {}).get("reward_extra_info") or {}
        for extra, tag in zip(extra_fields, tags)
        if not (tag or {}).get("is_padding", False)
    ]
    return {part: [i[part] for i in infos if part in i] for part in PARTS}


# What each rollout's agent loop timed (AgentLoopMetrics, verl v0.9.0 experimental/agent_loop/agent_loop.py:81;
# the tool agent loop times generation and the tool calls apart, tool_agent_loop.py:234 and :319). The legacy
# AgentLoopManager logs their means under these names (agent_loop.py:1256-1287); trainer v1 keeps them in each
# sample's "metrics" field and logs none, so the throughput card could not tell generation from waiting on tools.
AGENT_TIMINGS = {
    "generate_sequences": "timing_s/agent_loop/generate_sequences/mean",
    "tool_calls": "timing_s/agent_loop/tool_calls/mean",
}


def agent_loop_means(per_sample: list, tags: list) -> dict[str, float]:
    """The step's mean of each agent loop timing over its samples (padding left out)."""
    rows = [m for m, tag in zip(per_sample, tags) if isinstance(m, dict) and not (tag or {}).get("is_padding", False)]
    out = {}
    for key, metric in AGENT_TIMINGS.items():
        values = [float(m[key]) for m in rows if isinstance(m.get(key), (int, float))]
        if values:
            out[metric] = float(np.mean(values))
    return out


@PATCH.wrap(TRAINER_BASE, "PPOTrainer._compute_metrics", releases=(VERL_0_9_0,))
def patch_trainer_base(original):
    def _compute_metrics(self, batch, metrics, *args, **kwargs):
        result = original(self, batch, metrics, *args, **kwargs)
        import transfer_queue as tq  # lazy: verl 0.9's stack

        got = tq.kv_batch_get(keys=batch.keys, partition_id=batch.partition_id, select_fields=["extra_fields"])
        metrics.update(part_means(step_parts(got.pop("extra_fields").tolist(), list(batch.tags))))
        try:
            timed = tq.kv_batch_get(keys=batch.keys, partition_id=batch.partition_id, select_fields=["metrics"])
        except Exception:  # noqa: BLE001 - an agent loop that timed nothing: no timings, the step goes on
            return result
        metrics.update(agent_loop_means(timed.pop("metrics").tolist(), list(batch.tags)))
        return result

    return _compute_metrics
