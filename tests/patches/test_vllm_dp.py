"""The vllm_dp patch: what vLLM's engine receives for the DeepSeek recipe.

vLLM cannot be installed here, so verl 0.6.1's own ``vLLMRollout`` class (its source, read from the
installed verl) runs against a recorder standing in for ``vllm.LLM``; the recipe's launch is the real
one (``build_launch`` -> the argv composed with verl's hydra config -> verl's RolloutConfig)."""

from __future__ import annotations

import contextlib
import logging
import os
import types

import pytest
import torch
import torch.distributed as dist

from npu_rl.launcher.spec import build_launch
from npu_rl.launcher.verl_config import check_argv
from npu_rl.patches import guard, vllm_dp
from npu_rl.recipe.loader import load_recipe

RECIPE = "deepseek_r1_671b_a3"
WORLD = 256


class _Recorder:
    """Stands in for vllm.LLM: keeps the engine arguments and the VLLM_DP_* environment of the call."""

    calls: list[dict] = []

    def __init__(self, **kwargs):
        env = {k: v for k, v in os.environ.items() if k.startswith("VLLM_DP_")}
        _Recorder.calls.append({"kwargs": kwargs, "env": env})


class _SamplingParams:
    temperature, top_k, top_p, min_p, repetition_penalty, max_tokens, n, logprobs, detokenize = (
        1.0,
        -1,
        1.0,
        0.0,
        1.0,
        16,
        1,
        None,
        True,
    )

    def __init__(self, **kwargs):
        self.__dict__.update(kwargs)


def _verl_rollout_module() -> types.ModuleType:
    """A module holding verl 0.6.1's real vLLMRollout class, its vLLM names replaced by stand-ins."""
    from omegaconf import ListConfig
    from verl.workers.rollout.base import BaseRollout

    path = guard.module_file(vllm_dp.VLLM_ROLLOUT)
    module = types.ModuleType(vllm_dp.VLLM_ROLLOUT)
    module.__file__ = str(path)

    def no_op_decorator(*args, **kwargs):
        return lambda fn: fn

    module.__dict__.update(
        BaseRollout=BaseRollout,
        LLM=_Recorder,
        SamplingParams=_SamplingParams,
        torch=torch,
        ListConfig=ListConfig,
        CompilationConfig=dict,
        CompilationMode=None,
        _use_compilation_mode=True,
        VLLM_SLEEP_LEVEL=1,
        get_lora_rank_from_adapter=lambda p: 0,
        get_vllm_max_lora_rank=lambda r: r,
        logger=logging.getLogger("vllm_rollout_recorder"),
        GPUMemoryLogger=no_op_decorator,
        contextmanager=contextlib.contextmanager,
        DataProto=object,
        Generator=types.GenericAlias,
        Any=object,
    )
    exec(compile(guard.static_source(path, "vLLMRollout"), str(path), "exec"), module.__dict__)
    return module


def _model_config():
    hf = types.SimpleNamespace(max_position_embeddings=163840, rope_scaling=None)
    return types.SimpleNamespace(
        local_path="/workspace/models/DeepSeek-R1-bf16",
        hf_config=hf,
        lora_rank=0,
        tokenizer=types.SimpleNamespace(pad_token_id=1),
        trust_remote_code=True,
    )


@pytest.fixture(scope="module")
def deepseek_launch():
    spec = build_launch(load_recipe(RECIPE))
    cfg = check_argv(spec.argv)
    return spec, cfg


def _engine_call(monkeypatch, spec, cfg, rank):
    from verl.utils.config import omega_conf_to_dataclass
    from verl.workers.config import RolloutConfig

    for k in list(os.environ):
        if k.startswith("VLLM_DP_"):
            monkeypatch.delenv(k)
    # Exactly the worker environment the launch gives every Ray worker (its runtime_env env_vars).
    for k, v in spec.env.items():
        if k.startswith("VLLM_"):
            monkeypatch.setenv(k, v)
    monkeypatch.setenv("MASTER_PORT", "29444")
    monkeypatch.setattr(dist, "get_world_size", lambda *a: WORLD)
    monkeypatch.setattr(dist, "get_rank", lambda *a: rank)

    def all_gather_object(out, obj):
        out[:] = [f"10.0.{r // 16}.1" for r in range(WORLD)]  # 16 ranks per node

    monkeypatch.setattr(dist, "all_gather_object", all_gather_object)
    module = _verl_rollout_module()
    vllm_dp.patch_vllm_rollout(module)  # checks the fingerprint of the installed verl source
    _Recorder.calls.clear()
    config: RolloutConfig = omega_conf_to_dataclass(cfg.actor_rollout_ref.rollout)
    rollout = module.vLLMRollout(config, _model_config(), None)
    (call,) = _Recorder.calls
    return call, rollout


@pytest.mark.parametrize("rank", [0, 1, 2, 130, 255])
def test_engine_receives_expert_parallel_and_the_dp_size(monkeypatch, deepseek_launch, rank):
    spec, cfg = deepseek_launch
    assert "vllm_dp" in spec.patches
    call, rollout = _engine_call(monkeypatch, spec, cfg, rank)
    kw, env = call["kwargs"], call["env"]
    assert kw["tensor_parallel_size"] == 2
    assert kw["enable_expert_parallel"] is True
    assert kw["distributed_executor_backend"] == "external_launcher"
    graph = kw["additional_config"]["torchair_graph_config"]
    assert type(kw["additional_config"]) is dict and graph["enabled"] is True and graph["graph_batch_sizes"] == [1024]
    assert kw["additional_config"]["ascend_scheduler_config"] == {"enabled": True, "enable_chunked_prefill": False}
    assert kw["enable_chunked_prefill"] is True and kw["gpu_memory_utilization"] == 0.8
    # The DP size vllm-ascend 0.9.1 builds ParallelConfig from, and this rank's place in vLLM's layout.
    dp = 64
    assert env["VLLM_DP_SIZE"] == str(dp)
    assert env["VLLM_DP_RANK"] == str((rank // 2) % dp)
    leader = (rank // (2 * dp)) * 2 * dp + rank % 2
    assert env["VLLM_DP_MASTER_IP"] == f"10.0.{leader // 16}.1"
    # Upstream's sampling reaches vLLM's SamplingParams.
    sp = rollout.sampling_params
    assert (sp.temperature, sp.top_k, sp.top_p) == (0.9, 50, 0.9)


def test_dp_groups_partition_the_ranks():
    groups: dict[int, list[tuple[int, int]]] = {}
    for r in range(WORLD):
        c = vllm_dp.dp_coords(r, WORLD, 2, 64)
        groups.setdefault(c.group, []).append((c.dp_rank, r))
    assert len(groups) == WORLD // 64  # 2 TP indices x 2 replicas
    for members in groups.values():
        assert sorted(d for d, _ in members) == list(range(64))
        leader = min(r for _, r in members)
        assert all(vllm_dp.dp_coords(r, WORLD, 2, 64).leader == leader for _, r in members)
    ports = {vllm_dp.dp_env(r, WORLD, 2, 64, ["x"] * WORLD, 29444)["VLLM_DP_MASTER_PORT"] for r in range(WORLD)}
    assert len(ports) == len(groups)


def test_inconsistent_rollout_config_is_refused(monkeypatch, deepseek_launch):
    spec, cfg = deepseek_launch
    from omegaconf import OmegaConf

    bad = OmegaConf.create(OmegaConf.to_container(cfg, resolve=True))
    bad.actor_rollout_ref.rollout.engine_kwargs.vllm.enable_expert_parallel = False
    with pytest.raises(guard.PatchVersionError, match="enable_expert_parallel is not True"):
        _engine_call(monkeypatch, spec, bad, 0)
    with pytest.raises(guard.PatchVersionError, match="does not divide"):
        vllm_dp.dp_coords(0, 256, 2, 96)


def test_guard_fails_on_a_changed_verl_source(tmp_path):
    original = guard.module_file(vllm_dp.VLLM_ROLLOUT)
    vllm_dp.PATCH.check(vllm_dp.VLLM_ROLLOUT, original)  # the installed verl is the one the patch was written for
    copy = tmp_path / "vllm_rollout_spmd.py"
    text = original.read_text()
    assert "**engine_kwargs," in text
    copy.write_text(text.replace("**engine_kwargs,", "**{k: v for k, v in engine_kwargs.items() if k != 'x'},"))
    with pytest.raises(guard.PatchVersionError, match=r"vLLMRollout\.__init__ changed"):
        vllm_dp.PATCH.check(vllm_dp.VLLM_ROLLOUT, copy)
    module = types.SimpleNamespace(__file__=str(copy), vLLMRollout=type("R", (), {}))
    with pytest.raises(guard.PatchVersionError):
        vllm_dp.patch_vllm_rollout(module)


def test_reshard_sees_the_engine_ep(monkeypatch):
    monkeypatch.setenv("VLLM_DP_SIZE", "64")
    rollout = {
        "tensor_model_parallel_size": 2,
        "expert_parallel_size": 1,
        "engine_kwargs": {"vllm": {"enable_expert_parallel": True}},
    }
    assert vllm_dp.expert_parallel_size(rollout) == 128
    rollout["engine_kwargs"]["vllm"] = {}
    assert vllm_dp.expert_parallel_size(rollout) == 1
