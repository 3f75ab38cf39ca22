"""Bad input fails with one line naming the problem, exit code 2, before Ray starts."""

from __future__ import annotations

import socket
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml

from npu_rl.cli import main
from npu_rl.paths import recipes_dir

TINY = yaml.safe_load((recipes_dir() / "tiny_math_cpu.yaml").read_text())


@pytest.fixture(scope="module")
def workspace(tmp_path_factory) -> Path:
    ws = tmp_path_factory.mktemp("ws")
    assert main(["model", "tiny", "--out", str(ws / "models/tiny-qwen2"), "--warm-start-steps", "0"]) == 0
    assert main(["data", "math", "--from", "sample", "--out", str(ws / "data/math-sample")]) == 0
    train = pq.read_table(ws / "data/math-sample/train.parquet")
    pq.write_table(train.slice(0, 0), ws / "data/zero.parquet")
    pq.write_table(train.slice(0, 2), ws / "data/two.parquet")
    return ws


def _run(ws: Path, recipe: dict, capsys, monkeypatch, *extra: str) -> tuple[int, str]:
    monkeypatch.setenv("NPU_RL_WORKSPACE", str(ws))
    path = ws / "recipe.yaml"
    path.write_text(yaml.safe_dump(recipe))
    capsys.readouterr()
    code = main(["train", "--recipe", str(path), *extra])
    captured = capsys.readouterr()
    out_text, err_text = captured.out, captured.err
    err = err_text.strip().splitlines()
    assert err, "expected an error line"
    assert "[ray]" not in err_text and "running:" not in out_text, "Ray was started"
    return code, err[-1]


def _with(**changes) -> dict:
    recipe = yaml.safe_load(yaml.safe_dump(TINY))
    for dotted, value in changes.items():
        node = recipe
        *parents, leaf = dotted.split("__")
        for p in parents:
            node = node[p]
        node[leaf] = value
    return recipe


@pytest.mark.parametrize(
    "changes,message",
    [
        ({"algorithm__lrr": 1.0}, "unknown field 'algorithm.lrr'"),
        ({"algorithm__train_batch_size": "many"}, "field 'algorithm.train_batch_size'"),
        ({"resources__platform": "gpu"}, "field 'resources.platform'"),
        ({"model__path": "models/nope"}, "model directory not found"),
        ({"data__train_files": ["data/missing.parquet"]}, "data.train_files: data file not found"),
        ({"resources__devices_per_node": 3}, "not divisible by resources.nnodes * resources.devices_per_node (3)"),
        ({"verl_overrides": {"trainer.no_such_key": 1}}, "rejects the recipe's overrides"),
        (
            {"verl_overrides": {"actor_rollout_ref.actor.checkpoint.async_save": True}},
            "checkpoint.max_to_keep needs synchronous saves",
        ),
        # Each of these used to start Ray and fail (or hang) 20-46 s later in a verl worker.
        ({"reward__function": "nope.py"}, "reward.function: file not found"),
        ({"reward__name": "no_such_fn"}, "defines no 'no_such_fn'"),
        ({"algorithm__ppo_micro_batch_size_per_device": 64}, "(64) is larger than the per-rank mini-batch"),
        ({"algorithm__ppo_micro_batch_size_per_device": 3}, "(3) does not divide the per-rank mini-batch"),
        ({"rollout__name": "foo"}, "field 'rollout.name'"),
        ({"data__train_files": []}, "field 'data.train_files': List should have at least 1 item"),
        ({"data__train_files": ["data/zero.parquet"]}, "data.train_files: 0 row(s)"),
        (
            {"data__train_files": ["data/two.parquet"]},
            "data.train_files: 2 row(s) in data/two.parquet; algorithm.train_batch_size is 8",
        ),
        ({"resources__nnodes": 2}, "resources.nnodes is 2 but no cluster is given"),
        ({"algorithm__lr": float("inf")}, "field 'algorithm.lr': Input should be a finite number"),
        ({"algorithm__kl_loss_coef": float("nan")}, "field 'algorithm.kl_loss_coef': Input should be a finite"),
        ({"algorithm__rollout_n": True}, "algorithm: rollout_n must be a number, not true"),
    ],
)
def test_bad_recipe(workspace, capsys, monkeypatch, changes, message):
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    code, line = _run(workspace, _with(**changes), capsys, monkeypatch)
    assert code == 2
    assert line.startswith("npu-rl: error:")
    assert message in line


def test_data_file_without_needed_columns(workspace, capsys, monkeypatch):
    bad = workspace / "data" / "bad.parquet"
    pq.write_table(pa.table({"question": ["1+1?"]}), bad)
    code, line = _run(workspace, _with(data__train_files=["data/bad.parquet"]), capsys, monkeypatch)
    assert code == 2
    assert "bad.parquet lacks column(s) prompt, data_source, reward_model" in line


def test_ray_port_in_use(workspace, capsys, monkeypatch):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        code, line = _run(workspace, TINY, capsys, monkeypatch, "--ray-port", str(port))
    assert code == 2
    assert f"port {port} in use" in line


def test_unknown_recipe_name(capsys):
    assert main(["recipe", "validate", "--recipe", "no_such_recipe"]) == 2
    assert "unknown recipe 'no_such_recipe'" in capsys.readouterr().err


@pytest.mark.parametrize(
    "text,message",
    [
        (b"name: a\nname: b\n", "duplicate key 'name' (line 2)"),
        ("name: x\n".encode("utf-16"), "not UTF-8 text"),
        (b"\xff\xfe\x00garbage", "not UTF-8 text"),
    ],
)
def test_unreadable_recipe_files(tmp_path, capsys, text, message):
    path = tmp_path / "r.yaml"
    path.write_bytes(text)
    assert main(["train", "--recipe", str(path), "--dry-run"]) == 2
    assert message in capsys.readouterr().err


@pytest.mark.parametrize("value", ["[1", "@x", "*undefined", "!!python/name:os.system"])
def test_set_values_that_are_not_yaml(capsys, value):
    assert main(["train", "--recipe", "tiny_math_cpu", "--set", f"algorithm.lr={value}", "--dry-run"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"npu-rl: error: --set 'algorithm.lr={value}'")


def test_set_on_a_recipe_that_is_not_a_mapping(tmp_path, capsys):
    (tmp_path / "empty.yaml").write_text("")
    assert main(["train", "--recipe", str(tmp_path / "empty.yaml"), "--set", "a=1", "--dry-run"]) == 2
    assert "a recipe must be a YAML mapping" in capsys.readouterr().err


@pytest.mark.parametrize(
    "argv,message",
    [
        (["train", "--recipe", "tiny_math_cpu", "--ray-port", "70000"], "port 70000 is outside 0-65535"),
        (["ray", "head", "--port", "-1", "--devices", "1"], "port -1 is outside 0-65535"),
        (["doctor", "--recipe", "tiny_math_cpu", "--port", "x"], "'x' is not a port number"),
        (["data", "math", "--from", "sample", "--out", "{file}"], "exists and is not a directory"),
        (["data", "math", "--from", "sample", "--out", "/proc/npu-rl/x"], "cannot create /proc/npu-rl/x"),
        (["model", "tiny", "--out", "{tmp}/m", "--hidden-size", "0"], "--hidden-size: 0 must be >= 1"),
        (["model", "fetch", "bad id!!", "--out", "{tmp}/f"], "could not download 'bad id!!'"),
        (["eval", "--recipe", "tiny_math_cpu", "--model", "{broken}"], "config.json is not valid JSON"),
        (["eval", "--recipe", "tiny_math_cpu", "--model", "{tmp}"], "not a Hugging Face model directory"),
        (["report", "--run", "{tmp}", "--thresholds", "{thresholds}"], "not valid YAML"),
        (["train"], "the following arguments are required: --recipe"),
    ],
)
def test_bad_arguments_are_one_line(tmp_path, argv, message):
    import subprocess
    import sys

    (tmp_path / "file").write_text("x")
    broken = tmp_path / "broken"
    broken.mkdir()
    for name in ("config.json", "tokenizer_config.json", "model.safetensors"):
        (broken / name).write_text("{not json")
    (tmp_path / "t.yaml").write_text("a: [1\n")
    subs = {"file": tmp_path / "file", "tmp": tmp_path, "broken": broken, "thresholds": tmp_path / "t.yaml"}
    argv = [a.format(**subs) for a in argv]
    out = subprocess.run(
        [sys.executable, "-m", "npu_rl", *argv],
        capture_output=True,
        text=True,
        timeout=120,
        env={**__import__("os").environ, "NPU_RL_WORKSPACE": str(tmp_path)},
    )
    assert out.returncode == 2, out.stderr
    assert "Traceback" not in out.stderr
    lines = out.stderr.strip().splitlines()
    assert lines[-1].startswith("npu-rl: error:") and message in lines[-1], out.stderr


@pytest.mark.parametrize("function", ["", "npu_rl.reward.math.nope", "..x"])
def test_reward_modules_that_cannot_be_found(capsys, function):
    # Found by the fuzz test: an empty name raised ValueError from the import machinery.
    code = main(["train", "--recipe", "tiny_math_cpu", "--set", f"reward.function='{function}'", "--dry-run"])
    assert code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("npu-rl: error:") and "reward.function" in err[0]
