"""Check a recipe's overrides against the installed verl's own hydra config.

Composes ``verl/trainer/config/<ppo_trainer|ppo_megatron_trainer>.yaml`` with
the overrides exactly as ``verl.trainer.main_ppo`` would, so an unknown key, a
value of the wrong type or a batch layout verl rejects is reported before Ray
starts rather than minutes into a run.

verl, hydra and omegaconf (the train extra; seconds with torch) are imported inside the functions that
compose or validate (``# lazy: verl's stack``): the preflight imports this module for `npu-rl doctor` too.
"""

from __future__ import annotations

import contextlib
import io
from pathlib import Path
from typing import Any

from ..errors import UserError
from ..patches.old_log_prob import check_config as check_old_log_prob
from .sft import CONFIG_NAME as SFT_CONFIG
from .spec import hydra_args


def verl_config_dir() -> Path:
    import verl  # lazy: verl's stack

    return Path(verl.__file__).resolve().parent / "trainer" / "config"


def _key_of(override: str) -> tuple[str, bool]:
    key = override.split("=", 1)[0]
    appended = key.startswith("+")
    return key.lstrip("+~"), appended


def _select(cfg, key: str) -> Any:
    from omegaconf import OmegaConf  # lazy: verl's stack

    try:
        return OmegaConf.select(cfg, key, throw_on_missing=False)
    except Exception:  # unresolvable interpolations in verl's defaults
        return None


# Keys whose yaml default is written as an int although verl's dataclass field is a float
# (verl 0.6.1 trainer/config/rollout/rollout.yaml `top_p: 1`; workers/config/rollout.py `top_p: float`; verl 0.9.0
# rollout.yaml:164 `val_kwargs.temperature: 0`, workers/config/rollout.py:40 `temperature: float`).
_FLOAT_KEYS = {
    "actor_rollout_ref.rollout.top_p",
    "actor_rollout_ref.rollout.val_kwargs.top_p",
    "actor_rollout_ref.rollout.val_kwargs.temperature",
}


def _compatible(default: Any, value: Any) -> bool:
    from omegaconf import DictConfig, ListConfig  # lazy: verl's stack

    if default is None or value is None:
        return True
    if isinstance(default, bool) or isinstance(value, bool):
        return isinstance(default, bool) and isinstance(value, bool)
    if isinstance(default, (int, float)) and isinstance(value, (int, float)):
        return not (isinstance(default, int) and isinstance(value, float) and not value.is_integer())
    if isinstance(default, (ListConfig, list)):
        return isinstance(value, (ListConfig, list))
    if isinstance(default, str) and isinstance(value, (ListConfig, list)):
        # verl's file keys (data.train_files, ...) take one path or a list of them.
        return all(isinstance(v, str) for v in value)
    if isinstance(default, (DictConfig, dict)):
        return isinstance(value, (DictConfig, dict))
    return type(default) is type(value)


def compose_verl_config(overrides: list[str], config_name: str = "ppo_trainer"):
    """Return verl's composed config; raise UserError on unknown or mistyped keys."""
    from hydra import compose, initialize_config_dir  # lazy: verl's stack
    from hydra.core.global_hydra import GlobalHydra  # lazy: verl's stack
    from hydra.errors import HydraException  # lazy: verl's stack
    from omegaconf.errors import OmegaConfBaseException  # lazy: verl's stack

    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(verl_config_dir()), version_base=None):
        base = compose(config_name=config_name)
        try:
            cfg = compose(config_name=config_name, overrides=overrides)
        except (HydraException, OmegaConfBaseException) as err:
            first = str(err).strip().splitlines()[0]
            raise UserError(f"verl {config_name}.yaml rejects the recipe's overrides: {first}") from None
    GlobalHydra.instance().clear()

    for override in overrides:
        key, appended = _key_of(override)
        if appended:
            continue
        default, value = _select(base, key), _select(cfg, key)
        if key in _FLOAT_KEYS and isinstance(default, int) and not isinstance(default, bool):
            default = float(default)
        if not _compatible(default, value):
            raise UserError(
                f"verl config key {key!r} expects {type(default).__name__} (default {default!r}) "
                f"but the recipe gives {type(value).__name__} {value!r}"
            )
    return cfg


def validate_with_verl(cfg) -> None:
    """verl's own batch/parallelism validation (the assertions main_ppo runs)."""
    from hydra.errors import InstantiationException  # lazy: verl's stack
    from verl.utils.config import validate_config  # lazy: verl's stack

    use_ref = bool(cfg.actor_rollout_ref.actor.use_kl_loss or cfg.algorithm.use_kl_in_reward)
    use_critic = cfg.algorithm.adv_estimator == "gae"
    try:
        # validate_config also builds the actor config dataclass, as every worker will. It prints its success
        # (verl/utils/config.py 201), which is no news to a user; whatever else it prints is passed on.
        with contextlib.redirect_stdout(io.StringIO()) as said:
            validate_config(config=cfg, use_reference_policy=use_ref, use_critic=use_critic)
    except InstantiationException as err:
        msg = " ".join(str(err).split())
        raise UserError(f"verl cannot build the recipe's actor config: {msg}") from None
    except (AssertionError, ValueError) as err:
        msg = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise UserError(f"verl rejects the recipe's batch/parallel layout: {msg}") from None
    for line in said.getvalue().splitlines():
        if line.strip() and not line.startswith("[validate_config] All configuration checks passed"):
            print(line)
    try:
        check_old_log_prob(cfg)
    except ValueError as err:
        raise UserError(str(err)) from None


def validate_sft_with_verl(cfg) -> None:
    """The engine's and the optimizer's configs built as the SFT trainer builds them (verl v0.9.0
    trainer/sft_trainer.py ``_build_config``), whose dataclasses check their own values."""
    from verl.utils.config import omega_conf_to_dataclass  # lazy: verl's stack

    for key in ("engine", "optim"):
        try:
            omega_conf_to_dataclass(cfg[key])
        except Exception as err:  # noqa: BLE001 - hydra's instantiation and the dataclasses' own checks
            msg = " ".join(str(err).split()) or type(err).__name__
            raise UserError(f"verl cannot build the recipe's SFT {key} config: {msg}") from None


def check_argv(argv) -> Any:
    """Compose exactly the ``python -m verl.trainer.main_ppo`` argv of a launch (or the SFT trainer's), as hydra
    will, and validate it."""
    name, overrides = hydra_args(argv)
    cfg = compose_verl_config(overrides, name)
    if name == SFT_CONFIG:
        validate_sft_with_verl(cfg)
    else:
        validate_with_verl(cfg)
    return cfg
