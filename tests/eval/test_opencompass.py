"""The OpenCompass path without OpenCompass: data conversion, generated configs and
command, and the summary parser on a summary CSV in OpenCompass's format."""

from __future__ import annotations

import json
import sys
import types
from collections import Counter
from pathlib import Path

import pytest
from eval_fixtures import write_recipe

from npu_rl.cli import main
from npu_rl.errors import UserError
from npu_rl.eval import opencompass as oc
from npu_rl.eval.table import ResultTable

SUMMARY = Path(__file__).parent / "data" / "summary_20250812_101500.csv"
BASE = oc.ModelEntry("qwen2.5-1.5b-instruct-hf", Path("/models/base"), 0, baseline=True)
RL = oc.ModelEntry("qwen2.5-1.5b-instruct-rl-280", Path("/ckpt/global_step_280/actor/huggingface"), 280)


def _rows(math500: Path) -> list[dict]:
    return [json.loads(line) for line in math500.read_text(encoding="utf-8").splitlines() if line.strip()]


def test_math_json_from_math500(math500, tmp_path):
    rows = _rows(math500)
    path = oc.write_math_json(rows, tmp_path / "data")
    assert path == tmp_path / "data" / "data" / "math" / "math.json"
    data = json.loads(path.read_text(encoding="utf-8"))
    assert len(data) == len(rows) == 500
    # Keys "{type}_{n}", n counting 0.. within each type.
    per_type = Counter(r["subject"] for r in rows)
    for kind, count in per_type.items():
        assert {k for k in data if k.rsplit("_", 1)[0] == kind} == {f"{kind}_{i}" for i in range(count)}
    first = data[f"{rows[0]['subject']}_0"]
    assert first == {
        "problem": rows[0]["problem"],
        "level": f"Level {rows[0]['level']}",
        "type": rows[0]["subject"],
        "solution": rows[0]["solution"],
    }
    # OpenCompass's MATHDataset keeps the last \boxed{} of each solution as the reference.
    assert all("\\boxed" in v["solution"] for v in data.values())


def test_math_json_keeps_lighteval_fields_and_rejects_untyped_rows():
    rows = [
        {"problem": "p1", "level": "Level 1", "type": "Algebra", "solution": "\\boxed{1}"},
        {"problem": "p2", "level": "Level 5", "type": "Geometry", "solution": "\\boxed{2}"},
        {"problem": "p3", "level": "Level 2", "type": "Algebra", "solution": "\\boxed{3}"},
    ]
    data = oc.to_math_json(rows)
    assert list(data) == ["Algebra_0", "Geometry_0", "Algebra_1"]
    assert data["Algebra_1"]["level"] == "Level 2"
    with pytest.raises(UserError, match="row 0"):
        oc.to_math_json([{"problem": "p", "solution": "s"}])


def test_model_config_is_the_recipes_shape(tmp_path, monkeypatch):
    (path,) = oc.write_model_configs(tmp_path, [RL], max_out_len=1024, batch_size=32, num_gpus=1)
    assert path == tmp_path / "models" / "npu_rl_qwen2_5_1_5b_instruct_rl_280.py"
    # Execute it as OpenCompass would, against a stand-in for opencompass.models.
    fake = types.ModuleType("opencompass.models")
    fake.HuggingFacewithChatTemplate = object()
    monkeypatch.setitem(sys.modules, "opencompass", types.ModuleType("opencompass"))
    monkeypatch.setitem(sys.modules, "opencompass.models", fake)
    scope: dict = {}
    exec(compile(path.read_text(), str(path), "exec"), scope)
    assert scope["models"] == [
        dict(
            type=fake.HuggingFacewithChatTemplate,
            abbr="qwen2.5-1.5b-instruct-rl-280",
            path="/ckpt/global_step_280/actor/huggingface",
            max_out_len=1024,
            batch_size=32,
            run_cfg=dict(num_gpus=1),
        )
    ]


def test_command_and_environment(tmp_path):
    cmd = oc.build_command(tmp_path / "cfg", [BASE, RL], tmp_path / "out", max_num_workers=4)
    assert cmd[0] == "opencompass"
    models = cmd[cmd.index("--models") + 1 : cmd.index("--datasets")]
    assert models == [BASE.config_name, RL.config_name]
    assert cmd[cmd.index("--datasets") + 1] == "math_gen_a58d9d"
    assert cmd[cmd.index("--config-dir") + 1] == str(tmp_path / "cfg")
    assert cmd[cmd.index("--work-dir") + 1] == str(tmp_path / "out")
    assert cmd[-2:] == ["--max-num-workers", "4"]
    assert "--max-num-workers" not in oc.build_command(tmp_path, [RL], tmp_path, max_num_workers=1)
    env = oc.command_env(tmp_path / "data", {"PATH": "/bin"})
    assert env["COMPASS_DATA_CACHE"] == str(tmp_path / "data") and env["PATH"] == "/bin"


def test_parse_summary_into_the_table():
    rows = oc.parse_summary(SUMMARY, [RL, BASE])
    assert [(r.model, r.step, r.dataset, r.metric, r.score, r.baseline) for r in rows] == [
        ("qwen2.5-1.5b-instruct-hf", 0, "MATH-lighteval", "accuracy", 43.48, True),
        ("qwen2.5-1.5b-instruct-rl-280", 280, "MATH-lighteval", "accuracy", 55.06, False),
    ]
    table = ResultTable(rows)
    (delta,) = table.deltas()
    assert delta.points == pytest.approx(11.58)
    # The recipe reports this as a 26.6% improvement.
    assert round(delta.relative, 1) == 26.6
    md = table.to_markdown()
    assert "| qwen2.5-1.5b-instruct-rl-280 | 280 | MATH-lighteval | accuracy | 55.06 |" in md
    assert "(+11.58 points, +26.6%)" in md


def test_parse_summary_rejects_foreign_files(tmp_path):
    with pytest.raises(UserError, match="were not part"):
        oc.parse_summary(SUMMARY, [RL])
    bad = tmp_path / "x.csv"
    bad.write_text("a,b\n1,2\n")
    with pytest.raises(UserError, match="not an OpenCompass summary"):
        oc.parse_summary(bad, [RL])
    empty = tmp_path / "e.csv"
    empty.write_text("dataset,version,metric,mode,m\nmath,a58d9d,accuracy,gen,-\n")
    with pytest.raises(UserError, match="no scores"):
        oc.parse_summary(empty, [oc.ModelEntry("m", Path("/m"), 1)])


def test_find_summary_takes_the_newest_run(tmp_path):
    for stamp in ("20250101_000000", "20250812_101500"):
        d = tmp_path / stamp / "summary"
        d.mkdir(parents=True)
        (d / f"summary_{stamp}.csv").write_text(SUMMARY.read_text())
    assert oc.find_summary(tmp_path).parent.parent.name == "20250812_101500"
    with pytest.raises(UserError, match="no OpenCompass summary"):
        oc.find_summary(tmp_path / "none")


def _lighteval_parquet(path: Path, rows: list[dict]) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    path.parent.mkdir(parents=True, exist_ok=True)
    table = [
        {"problem": r["problem"], "level": f"Level {r['level']}", "type": r["subject"], "solution": r["solution"]}
        for r in rows
    ]
    pq.write_table(pa.Table.from_pylist(table), path)


def test_cli_dry_run_writes_data_and_configs(tmp_path, math500, monkeypatch, capsys, complete_checkpoint):
    ws = tmp_path / "ws"
    _lighteval_parquet(ws / "raw" / "data" / "test-00000-of-00001.parquet", _rows(math500))
    merged = complete_checkpoint(ws / "ckpt" / "proj" / "exp" / "global_step_280", world=4)
    for d in (ws / "models" / "Qwen2.5-1.5B-Instruct", merged):
        d.mkdir(parents=True, exist_ok=True)
        (d / "config.json").write_text("{}")
        (d / "model.safetensors").write_bytes(b"")
    recipe = write_recipe(
        tmp_path / "r.yaml", model_path="models/Qwen2.5-1.5B-Instruct", platform="npu-a2", source_dir="raw"
    )
    recipe.write_text(recipe.read_text() + "checkpoint:\n  dir: ckpt\n")
    monkeypatch.setenv("NPU_RL_WORKSPACE", str(ws))

    assert main(["eval", "--recipe", str(recipe), "--dry-run", "--limit", "120"]) == 0
    root = ws / "logs" / "proj" / "exp" / "eval" / "opencompass"
    assert len(json.loads((root / "data" / "data" / "math" / "math.json").read_text())) == 120
    configs = sorted(p.name for p in (root / "configs" / "models").iterdir())
    assert configs == ["npu_rl_qwen2_5_1_5b_instruct_hf.py", "npu_rl_qwen2_5_1_5b_instruct_rl_280.py"]
    assert str(ws / "ckpt" / "proj" / "exp" / "global_step_280" / "actor" / "huggingface") in (
        root / "configs" / "models" / configs[1]
    ).read_text()
    out = capsys.readouterr().out
    assert "--datasets math_gen_a58d9d" in out and "--max-num-workers 4" in out
    assert f"COMPASS_DATA_CACHE={root / 'data'}" in out


def test_run_without_opencompass_says_where_it_runs(tmp_path, monkeypatch):
    monkeypatch.setattr(oc.shutil, "which", lambda name: None)
    with pytest.raises(UserError, match="eval image"):
        oc.run(["opencompass"], {}, tmp_path / "log")
