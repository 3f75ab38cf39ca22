"""What a launch says differently for each verl release a stack line pins (configs/stacks/): the keys verl
moved, and what a CPU host needs said in verl's own config once the rollout is a server. The launcher's
overrides (npu_rl.launcher.overrides) are written in verl 0.6.1's keys and pass through here, as do a recipe's
verl_overrides."""

from __future__ import annotations

from typing import Any

from .. import versions
from ..cluster.raynode import logical_cpus as node_cpus
from ..errors import UserError
from ..patches.guard import VERL_0_6_1
from ..recipe.schema import Recipe

# verl 0.9 on a CPU host, beside rollout_server_on_cpu's values.
SERVER_ON_CPU = [
    # verl 0.9 runs 8 agent-loop and 8 reward-loop workers by default (config/rollout/rollout.yaml:242,
    # config/reward/reward.yaml:5), each a Ray actor with its own Python: one each on a CPU host.
    "actor_rollout_ref.rollout.agent.num_workers=1",
    "reward.num_workers=1",
    # TransferQueue's storage units are actors too (config/transfer_queue/*: 8 by default).
    "transfer_queue.backend.SimpleStorage.num_data_storage_units=2",
    # A dataclass field of the rollout config, absent from its yaml (workers/config/rollout.py:268).
    "+actor_rollout_ref.rollout.enable_sleep_mode=False",
]


def rollout_server_on_cpu(release: str, kv: list[tuple[str, Any]]) -> list[tuple[str, Any]]:
    """A CPU launch's ``(key, value)`` overrides with vLLM's CPU backend as verl 0.9's rollout server: what
    the 0.6.1 line's ``cpu`` patch changed inside verl's in-process rollout (npu_rl.patches.cpu_platform
    ``_vllm_on_cpu``), said here in verl's own keys."""
    if release == VERL_0_6_1:
        return kv
    on_cpu = {
        # vLLM offers sleep mode on CUDA only; verl sleeps and wakes the server only with free_cache_engine
        # (verl v0.9.0 workers/rollout/vllm_rollout/vllm_async_server.py:792, :817): the weights and KV cache
        # stay in host memory between rollouts.
        "actor_rollout_ref.rollout.free_cache_engine": False,
        # No graphs to capture on a CPU (cudagraph capture is verl's default, vllm_async_server.py:273).
        "actor_rollout_ref.rollout.enforce_eager": True,
        # The engine samples in bfloat16, as on NPU (verl's default, config/rollout/rollout.yaml:43); training
        # keeps model.dtype.
        "actor_rollout_ref.rollout.dtype": "bfloat16",
    }
    return [(k, on_cpu.get(k, v)) for k, v in kv] + [(k, v) for k, v in on_cpu.items() if k not in dict(kv)]


# The old_log_prob skip (``optimizations.recompute_old_log_prob: false``) from verl 0.9 on is verl's own bypass
# mode: ``_compute_old_log_prob`` copies the rollout's log-probs into ``old_log_probs`` instead of running the
# pass (verl v0.9.0 trainer/ppo/v1/trainer_base.py:1484-1493), and the rollout correction it would otherwise
# run on them is off (:1609-1613). It needs the rollout's log-probs (``calculate_log_probs``). Not the 0.6.1
# patch's shortcut (the update's own detached log-probs, a ratio of exactly 1): the update's ratio is
# pi_theta / pi_rollout, 1 up to the rollout's precision, which the consistency gate bounds on its steps.
BYPASS_OLD_LOG_PROB = ["algorithm.rollout_correction.bypass_mode=True"]


def skips_by_bypass(recipe: Recipe) -> bool:
    """The recipe skips the old_log_prob pass through verl's bypass mode (verl 0.9), not npu-rl's patch."""
    return not recipe.optimizations.recompute_old_log_prob and verl_release(recipe) != VERL_0_6_1


def verl_release(recipe: Recipe) -> str:
    """The verl release of the recipe's stack line, which decides its keys and its patches' code."""
    return versions.line_verl(recipe.stack_line)


# Keys verl moved after 0.6.1, by the first release that reads only the new place. verl 0.9.0 reads the
# reward from reward.* (trainer/ppo/reward.py:70, `config.reward.get("custom_reward_function")`;
# config/reward/reward.yaml), and its main_ppo no longer moves the top-level keys there: only the fully async
# entry point calls migrate_legacy_reward_impl (experimental/reward_loop/reward_loop.py:39-87,
# experimental/fully_async_policy/fully_async_main.py:237), so the old keys compose and are ignored.
MOVED_KEYS = {
    "custom_reward_function": "reward.custom_reward_function",
    "reward_model.reward_manager": "reward.reward_manager.name",
}


def release_key(key: str, release: str) -> str:
    """A config key in verl 0.6.1's names (the launcher's) as ``release`` names it."""
    if release == VERL_0_6_1:
        return key
    for old, new in MOVED_KEYS.items():
        if key == old or key.startswith(old + "."):
            return f"{new}{key[len(old) :]}"
    return key


def _split_prefix(key: str) -> tuple[str, str]:
    """(hydra's ``+``/``++``/``~`` prefix, the dotted key)."""
    bare = key.lstrip("+~")
    return key[: len(key) - len(bare)], bare


def for_release(override: str, release: str) -> str:
    """One ``key=value`` override as ``release`` names its key."""
    prefix, rest = _split_prefix(override)
    key, eq, value = rest.partition("=")
    return f"{prefix}{release_key(key, release)}{eq}{value}"


def verl_overrides_key(key: str, recipe: Recipe) -> str:
    """A ``verl_overrides`` key as the recipe's verl names it. Keys in verl 0.6.1's names move as the launcher's
    own do, so a recipe's overrides hold on every line. A moved key's new name on verl 0.6.1 is refused: that
    release's config has no top-level ``reward`` (verl v0.6.1 trainer/config/_generated_ppo_trainer.yaml, top-level
    keys at :6-557), so hydra would refuse it, or with ``+`` add it where nothing reads it."""
    release = verl_release(recipe)
    prefix, bare = _split_prefix(key)
    if release == VERL_0_6_1:
        for old, new in MOVED_KEYS.items():
            if bare == new or bare.startswith(new + "."):
                raise UserError(
                    f"verl_overrides: {bare!r} is no key of verl {release} (stack line {recipe.stack_line}); "
                    f"write {old + bare[len(new) :]!r}, which every stack line names for its verl"
                )
    return f"{prefix}{release_key(bare, release)}"


def logical_cpus(recipe: Recipe) -> int:
    """Ray's CPU count for a local run of the recipe (npu_rl.cluster.raynode.logical_cpus of its world)."""
    return node_cpus(recipe.resources.world_size, verl_release(recipe))
