"""npu-rl's CPU FP8 -> BF16 cast on a tiny synthetic DeepSeek-style checkpoint, and the prepare
job's conversion commands (composed by the real code path, not run)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from npu_rl.cli import main
from npu_rl.launcher import megatron
from npu_rl.launcher import prepare as prepare_job
from npu_rl.model import fp8_cast
from npu_rl.recipe import load_recipe

# (rows, cols): 300 x 200 has partial edge blocks in both directions (300 = 2*128 + 44, 200 = 128 + 72).
SHAPES = {"model.layers.0.mlp.down_proj.weight": (300, 200), "model.layers.0.self_attn.o_proj.weight": (128, 256)}


def _reference(w8: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """Element by block, written independently of the cast: w[i, j] * scale[i // 128, j // 128]."""
    w = w8.to(torch.float32)
    out = torch.empty_like(w)
    for bi in range(scale.shape[0]):
        for bj in range(scale.shape[1]):
            rows = slice(bi * 128, min((bi + 1) * 128, w.shape[0]))
            cols = slice(bj * 128, min((bj + 1) * 128, w.shape[1]))
            out[rows, cols] = w[rows, cols] * scale[bi, bj]
    return out.to(torch.bfloat16)


@pytest.fixture()
def fp8_model(tmp_path) -> tuple[Path, dict[str, torch.Tensor]]:
    """Two shards; the down_proj scale sits in the other shard (as the published index allows)."""
    src = tmp_path / "fp8"
    src.mkdir()
    g = torch.Generator().manual_seed(0)
    tensors: dict[str, torch.Tensor] = {}
    for name, (r, c) in SHAPES.items():
        tensors[name] = (torch.randn(r, c, generator=g) * 100).to(torch.float8_e4m3fn)
        tensors[name + "_scale_inv"] = torch.rand(math.ceil(r / 128), math.ceil(c / 128), generator=g) + 0.01
    tensors["model.embed_tokens.weight"] = torch.randn(16, 8, generator=g).to(torch.bfloat16)
    shards = {
        "model-00001-of-00002.safetensors": [
            "model.layers.0.mlp.down_proj.weight",
            "model.embed_tokens.weight",
            "model.layers.0.self_attn.o_proj.weight_scale_inv",
        ],
        "model-00002-of-00002.safetensors": [
            "model.layers.0.self_attn.o_proj.weight",
            "model.layers.0.mlp.down_proj.weight_scale_inv",
        ],
    }
    weight_map = {}
    for shard, names in shards.items():
        save_file({n: tensors[n] for n in names}, str(src / shard))
        weight_map.update(dict.fromkeys(names, shard))
    (src / fp8_cast.WEIGHT_INDEX).write_text(json.dumps({"metadata": {"total_size": 1}, "weight_map": weight_map}))
    config = {
        "architectures": ["DeepseekV3ForCausalLM"],
        "quantization_config": {"quant_method": "fp8", "fmt": "e4m3", "weight_block_size": [128, 128]},
    }
    (src / "config.json").write_text(json.dumps(config))
    (src / "tokenizer.json").write_text("{}")
    return src, tensors


def test_cast_matches_an_independent_blockwise_reference(fp8_model, tmp_path):
    src, tensors = fp8_model
    dst = tmp_path / "bf16"
    assert main(["model", "fp8-cast", "--input-fp8-hf-path", str(src), "--output-bf16-hf-path", str(dst)]) == 0
    out = {}
    for f in dst.glob("*.safetensors"):
        out.update(load_file(str(f)))
    assert set(out) == {*SHAPES, "model.embed_tokens.weight"}  # scales dropped
    for name in SHAPES:
        assert out[name].dtype == torch.bfloat16
        assert torch.equal(out[name], _reference(tensors[name], tensors[name + "_scale_inv"])), name
    assert torch.equal(out["model.embed_tokens.weight"], tensors["model.embed_tokens.weight"])  # passed through
    index = json.loads((dst / fp8_cast.WEIGHT_INDEX).read_text())
    assert not any(k.endswith("_scale_inv") for k in index["weight_map"])
    assert index["weight_map"]["model.layers.0.self_attn.o_proj.weight"] == "model-00002-of-00002.safetensors"
    assert index["metadata"]["total_size"] == sum(t.numel() * t.element_size() for t in out.values())
    config = json.loads((dst / "config.json").read_text())
    assert "quantization_config" not in config and config["architectures"] == ["DeepseekV3ForCausalLM"]
    assert (dst / "tokenizer.json").is_file()
    assert prepare_job.model_complete(dst)


def test_a_rerun_skips_the_shards_already_written(fp8_model, tmp_path, capsys):
    src, _ = fp8_model
    dst = tmp_path / "bf16"
    assert fp8_cast.cast_checkpoint(src, dst, show_progress=False) == {"written": 2, "skipped": 0}
    # An interrupted run: the second shard is missing and a half-written temp file is left.
    second = dst / "model-00002-of-00002.safetensors"
    second.unlink()
    (dst / ("model-00002-of-00002.safetensors" + fp8_cast.TMP_SUFFIX)).write_bytes(b"junk")
    first = dst / "model-00001-of-00002.safetensors"
    before = first.stat().st_mtime_ns
    assert fp8_cast.cast_checkpoint(src, dst, show_progress=False) == {"written": 1, "skipped": 1}
    assert first.stat().st_mtime_ns == before and second.is_file()
    assert not list(dst.glob("*" + fp8_cast.TMP_SUFFIX))


def test_an_fp8_weight_without_its_scale_is_one_error_line(fp8_model, tmp_path, capsys):
    src, _ = fp8_model
    index = json.loads((src / fp8_cast.WEIGHT_INDEX).read_text())
    del index["weight_map"]["model.layers.0.mlp.down_proj.weight_scale_inv"]
    (src / fp8_cast.WEIGHT_INDEX).write_text(json.dumps(index))
    assert (
        main(["model", "fp8-cast", "--input-fp8-hf-path", str(src), "--output-bf16-hf-path", str(tmp_path / "o")]) == 2
    )
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("npu-rl: error: ") and "down_proj.weight_scale_inv" in err[0]


def test_a_missing_input_is_one_error_line(tmp_path, capsys):
    assert (
        main(
            [
                "model",
                "fp8-cast",
                "--input-fp8-hf-path",
                str(tmp_path / "nope"),
                "--output-bf16-hf-path",
                str(tmp_path / "o"),
            ]
        )
        == 2
    )
    assert (
        capsys.readouterr().err.strip()
        == f"npu-rl: error: --input-fp8-hf-path {tmp_path / 'nope'}: directory not found"
    )


# --- the DeepSeek recipe's prepare job, composed by the real code path ---------------------------


@pytest.fixture()
def ws(tmp_path, monkeypatch) -> Path:
    monkeypatch.setenv("NPU_RL_WORKSPACE", str(tmp_path))
    return tmp_path


def test_the_recipe_casts_with_npu_rl_and_converts_across_its_nodes(ws):
    recipe = load_recipe("deepseek_r1_671b_a3")
    conv = recipe.prepare.weight_conversion
    cast, convert = prepare_job.conversion_steps(recipe)
    assert cast.name == "npu-rl model fp8-cast" and cast.resumable and cast.nodes == 1
    assert cast.argv_writing_to(ws / "x")[:5] == [prepare_job.sys.executable, "-m", "npu_rl", "model", "fp8-cast"]
    # verl's converter of the installed verl (in the image: /opt/verl/scripts), under torchrun on every node.
    import verl

    script = Path(verl.__file__).parent.parent / "scripts/converter_hf_to_mcore.py"
    assert script.is_file() and convert.script == script
    assert convert.nodes == recipe.resources.nnodes == 16 and not convert.resumable
    argv = convert.argv_writing_to(ws / "mcore.partial", node_rank=3, master_addr="10.0.0.1")
    flags = dict(zip(argv[3:13:2], argv[4:13:2]))
    assert argv[1:3] == ["-m", "torch.distributed.run"]
    assert flags == {
        "--nnodes": "16",
        "--nproc_per_node": "1",
        "--node_rank": "3",
        "--master_addr": "10.0.0.1",
        "--master_port": str(megatron.CONVERTER_PORT),
    }
    assert argv[argv.index("--hf_model_path") + 1] == str(ws / conv.bf16_path)
    assert argv[argv.index("--output_path") + 1] == str(ws / "mcore.partial")


def test_dry_run_shows_the_commands_and_runs_nothing(ws, capsys, monkeypatch):
    monkeypatch.setattr(prepare_job, "prepare", lambda *a, **k: pytest.fail("dry run ran the job"))
    assert main(["prepare", "--recipe", "deepseek_r1_671b_a3", "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "python -m npu_rl model fp8-cast --input-fp8-hf-path" in out
    assert "on each of 16 nodes" in out and "--node_rank $NODE_RANK --master_addr $HEAD_IP" in out
    assert not (ws / "models").exists()


def test_one_node_conversion_is_a_plain_process(ws):
    recipe = load_recipe("deepseek_r1_671b_a3", {"prepare.weight_conversion.distributed": False})
    convert = prepare_job.conversion_steps(recipe)[-1]
    assert convert.nodes == 1 and "torch.distributed.run" not in convert.argv


def test_distributed_step_runs_once_per_node_with_its_rank(ws, monkeypatch):
    """run_on_nodes' dispatch with Ray replaced by a recorder: rank 0 on this node, every rank the same head."""
    import sys
    import types

    calls = []

    class Task:
        def options(self, scheduling_strategy):
            self.node = scheduling_strategy
            return self

        def remote(self, argv):
            calls.append((self.node, argv))
            return 0

    order = [2, 5, 1, 8, 3, 4, 6, 7, 9]  # one node more than the job needs; this one (10.0.0.1) is third
    nodes = [{"Alive": True, "NodeID": f"n{i}", "NodeManagerAddress": f"10.0.0.{i}"} for i in order]
    fake = types.SimpleNamespace(
        init=lambda **k: None,
        shutdown=lambda: None,
        nodes=lambda: nodes,
        get=lambda refs: refs,
        remote=lambda **k: lambda f: Task(),
        util=types.SimpleNamespace(get_node_ip_address=lambda: "10.0.0.1"),
    )
    strategies = types.SimpleNamespace(NodeAffinitySchedulingStrategy=lambda node_id, soft: node_id)
    monkeypatch.setitem(sys.modules, "ray", fake)
    monkeypatch.setitem(sys.modules, "ray.util.scheduling_strategies", strategies)
    recipe = load_recipe("deepseek_r1_671b_a3", {"resources.nnodes": 8})
    step = prepare_job.conversion_steps(recipe)[-1]
    assert prepare_job.run_on_nodes(step, ws / "out") == [0] * 8
    got = [
        (
            node,
            argv[argv.index("--node_rank") + 1],
            argv[argv.index("--master_addr") + 1],
            argv[argv.index("--nnodes") + 1],
        )
        for node, argv in calls
    ]
    assert [g[0] for g in got] == ["n1", "n2", "n5", "n8", "n3", "n4", "n6", "n7"]
    assert [g[1] for g in got] == [str(r) for r in range(8)]
    assert {g[2:] for g in got} == {("10.0.0.1", "8")}


def test_prepare_runs_the_real_cast_and_resumes_its_partial_output(fp8_model, ws, monkeypatch, capfd):
    """`npu-rl prepare`'s step runner with the recipe's own cast command (verl's converter left out):
    shards an interrupted run finished in <bf16>.partial are kept, the rest are written."""
    src, tensors = fp8_model
    recipe = load_recipe("deepseek_r1_671b_a3")
    conv = recipe.prepare.weight_conversion
    (ws / conv.hf_path).parent.mkdir(parents=True)
    src.rename(ws / conv.hf_path)
    real = megatron.prepare_commands
    monkeypatch.setattr(megatron, "prepare_commands", lambda r: real(r)[:1])
    partial = ws / (conv.bf16_path + prepare_job.PARTIAL_SUFFIX)
    fp8_cast.cast_checkpoint(ws / conv.hf_path, partial, show_progress=False)
    (partial / "model-00002-of-00002.safetensors").unlink()
    kept = partial / "model-00001-of-00002.safetensors"
    before = kept.stat().st_mtime_ns
    prepare_job.convert_weights(recipe)
    bf16 = ws / conv.bf16_path
    assert not partial.exists() and prepare_job.model_complete(bf16)
    assert (bf16 / kept.name).stat().st_mtime_ns == before
    assert "1 shard(s) written, 1 already there" in capfd.readouterr().out
    out = load_file(str(bf16 / "model-00002-of-00002.safetensors"))
    name = "model.layers.0.self_attn.o_proj.weight"
    assert torch.equal(out[name], _reference(tensors[name], tensors[name + "_scale_inv"]))
