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
    ],
)
def test_bad_recipe(workspace, capsys, monkeypatch, changes, message):
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
