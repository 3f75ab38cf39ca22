"""The OpenCompass backend: data conversion, generated configs and command, the summary
parser on a summary CSV captured from a real OpenCompass run, and `npu-rl eval --backend
opencompass` running OpenCompass itself (in the eval environment, `make eval-venv`)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import types
from collections import Counter
from pathlib import Path

import pytest
from eval_fixtures import write_recipe
from needs import missing_setup

from npu_rl.cli import main
from npu_rl.errors import UserError
from npu_rl.eval import opencompass as oc
from npu_rl.eval.table import ResultTable

# Written by OpenCompass 0.5.4 for the CPU demo's tiny models (tests/eval/data/README.md).
SUMMARY = Path(__file__).parent / "data" / "summary_20261201_124423.csv"
BASE = oc.ModelEntry("tiny-qwen2-hf", Path("/ws/models/tiny-qwen2"), 0, baseline=True)
RL = oc.ModelEntry("tiny-qwen2-rl-16", Path("/ws/checkpoints/p/e/global_step_16/actor/huggingface"), 16)
REPO = Path(__file__).resolve().parents[2]


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
    assert path == tmp_path / "models" / "npu_rl_tiny_qwen2_rl_16.py"
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
            abbr="tiny-qwen2-rl-16",
            path="/ws/checkpoints/p/e/global_step_16/actor/huggingface",
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
    assert env["HF_DATASETS_OFFLINE"] == env["HF_HUB_OFFLINE"] == "1"


def test_parse_summary_into_the_table():
    assert SUMMARY.read_text().splitlines() == [
        "dataset,version,metric,mode,tiny-qwen2-hf,tiny-qwen2-rl-16",
        "math,a58d9d,accuracy,gen,0.00,0.00",
    ]
    rows = oc.parse_summary(SUMMARY, [RL, BASE])
    assert [(r.model, r.step, r.dataset, r.metric, r.score, r.baseline) for r in rows] == [
        ("tiny-qwen2-hf", 0, "MATH-lighteval", "accuracy", 0.0, True),
        ("tiny-qwen2-rl-16", 16, "MATH-lighteval", "accuracy", 0.0, False),
    ]
    table = ResultTable(rows)
    (delta,) = table.deltas()
    assert delta.points == 0.0
    # No relative change from a zero baseline.
    assert delta.relative is None
    md = table.to_markdown()
    assert "| tiny-qwen2-rl-16 | 16 | MATH-lighteval | accuracy | 0.00 |" in md
    assert "- MATH-lighteval accuracy: 0.00 -> 0.00 at step 16 (+0.00 points)" in md


def _variant(tmp_path: Path, base_cell: str, rl_cell: str, name: str = "s.csv") -> Path:
    """The captured summary with other cells, as OpenCompass writes them ('-': no result)."""
    header, row = SUMMARY.read_text().splitlines()
    path = tmp_path / "run" / "summary" / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"{header}\n{row.rsplit(',', 2)[0]},{base_cell},{rl_cell}\n")
    return path


def test_parse_summary_rejects_foreign_files(tmp_path):
    with pytest.raises(UserError, match="were not part"):
        oc.parse_summary(SUMMARY, [RL])
    bad = tmp_path / "x.csv"
    bad.write_text("a,b\n1,2\n")
    with pytest.raises(UserError, match="not an OpenCompass summary"):
        oc.parse_summary(bad, [RL])
    # A dataset no model has a result for: OpenCompass writes '-' in every column.
    empty = tmp_path / "e.csv"
    empty.write_text(SUMMARY.read_text().splitlines()[0] + "\nmath,-,-,-,-,-\n")
    with pytest.raises(UserError, match="no scores"):
        oc.parse_summary(empty, [BASE, RL])
    with pytest.raises(UserError, match="not a number"):
        oc.parse_summary(_variant(tmp_path, "0.00", "n/a"), [BASE, RL])


def test_a_model_without_a_score_names_its_task_log(tmp_path):
    # OpenCompass exits 0 when a model's task fails; its column is '-' and the error is in the task log.
    path = _variant(tmp_path, "12.50", "-")
    log = tmp_path / "run" / "logs" / "infer" / RL.abbr / "math_0.out"
    log.parent.mkdir(parents=True)
    log.write_text("Traceback (most recent call last):\n  ...\nOSError: Unable to load weights from x\n")
    expected = r"no score for tiny-qwen2-rl-16 \(see .*infer/tiny-qwen2-rl-16/: OSError: Unable"
    with pytest.raises(UserError, match=expected):
        oc.parse_summary(path, [BASE, RL])


def test_find_summary_takes_the_newest_run_of_this_call(tmp_path):
    for stamp in ("20250101_000000", "20250812_101500"):
        d = tmp_path / stamp / "summary"
        d.mkdir(parents=True)
        (d / f"summary_{stamp}.csv").write_text(SUMMARY.read_text())
    assert oc.find_summary(tmp_path).parent.parent.name == "20250812_101500"
    # A run that wrote no summary must not be answered with an older run's.
    earlier = oc.run_dirs(tmp_path)
    assert earlier == {"20250101_000000", "20250812_101500"}
    (tmp_path / "20250901_000000").mkdir()
    with pytest.raises(UserError, match="no summary CSV"):
        oc.find_summary(tmp_path, exclude=earlier)
    with pytest.raises(UserError, match="no summary CSV"):
        oc.find_summary(tmp_path / "none")
    assert oc.run_dirs(tmp_path / "none") == set()


def _fake_opencompass(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("#!/bin/sh\nexit 0\n")
    path.chmod(0o755)
    return path


def test_find_executable_order(tmp_path, monkeypatch):
    monkeypatch.delenv(oc.EXECUTABLE_ENV, raising=False)
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    assert oc.find_executable(project_root=tmp_path) is None
    venv = _fake_opencompass(tmp_path / oc.EVAL_VENV / "bin" / "opencompass")
    assert oc.find_executable(project_root=tmp_path) == str(venv)
    on_path = _fake_opencompass(tmp_path / "bin" / "opencompass")
    monkeypatch.setenv("PATH", str(on_path.parent))
    assert oc.find_executable(project_root=tmp_path) == str(on_path)
    env = _fake_opencompass(tmp_path / "env" / "opencompass")
    monkeypatch.setenv(oc.EXECUTABLE_ENV, str(env))
    assert oc.find_executable(project_root=tmp_path) == str(env)
    explicit = _fake_opencompass(tmp_path / "x" / "oc")
    assert oc.find_executable(explicit, project_root=tmp_path) == str(explicit)
    # A path that was asked for and is not there is an error, not a fallback.
    with pytest.raises(UserError, match="--opencompass: .* is not an executable file"):
        oc.find_executable(tmp_path / "nope" / "opencompass", project_root=tmp_path)
    monkeypatch.setenv(oc.EXECUTABLE_ENV, str(tmp_path / "nope"))
    with pytest.raises(UserError, match=f"{oc.EXECUTABLE_ENV}: .* is not an executable file"):
        oc.find_executable(project_root=tmp_path)
    monkeypatch.setenv(oc.EXECUTABLE_ENV, "no-such-command")
    with pytest.raises(UserError, match="not a command on PATH"):
        oc.find_executable(project_root=tmp_path)


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
    assert (
        str(ws / "ckpt" / "proj" / "exp" / "global_step_280" / "actor" / "huggingface")
        in (root / "configs" / "models" / configs[1]).read_text()
    )
    out = capsys.readouterr().out
    assert "--datasets math_gen_a58d9d" in out and "--max-num-workers 4" in out
    assert f"COMPASS_DATA_CACHE={root / 'data'}" in out


def test_run_without_opencompass_says_where_it_runs(tmp_path, monkeypatch):
    monkeypatch.setattr(oc.shutil, "which", lambda name: None)
    with pytest.raises(UserError, match="eval image"):
        oc.run(["opencompass"], {}, tmp_path / "log")
    monkeypatch.delenv(oc.EXECUTABLE_ENV, raising=False)
    monkeypatch.setattr(oc, "find_executable", lambda explicit=None, **kw: None)
    with pytest.raises(UserError, match="make eval-venv"):
        oc.require_executable()


def test_run_reports_a_failing_command_with_its_status(tmp_path):
    script = tmp_path / "oc"
    script.write_text("#!/bin/sh\necho started; pwd > where\nexit 3\n")
    script.chmod(0o755)
    with pytest.raises(UserError, match="exited with status 3") as err:
        oc.run([str(script)], dict(os.environ), tmp_path / "out" / "opencompass.log", cwd=tmp_path / "out")
    assert err.value.exit_code == 3
    assert (tmp_path / "out" / "opencompass.log").read_text() == "started\n"
    assert (tmp_path / "out" / "where").read_text().strip() == str(tmp_path / "out")


# --- bad input: one `npu-rl: error:` line, exit 2, before OpenCompass starts ------------------


@pytest.fixture
def cli_workspace(tmp_path, monkeypatch, complete_checkpoint):
    """Placeholder base and merged models (never loaded) and a CPU recipe on the bundled sample."""
    ws = tmp_path / "ws"
    merged = complete_checkpoint(ws / "checkpoints" / "proj" / "exp" / "global_step_2", world=1)
    for d in (ws / "models" / "tiny", merged):
        d.mkdir(parents=True, exist_ok=True)
        (d / "config.json").write_text("{}")
        (d / "model.safetensors").write_bytes(b"")
    monkeypatch.setenv("NPU_RL_WORKSPACE", str(ws))
    return write_recipe(tmp_path / "r.yaml", source_dir="sample")


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--opencompass", "/no/such/bin/opencompass"], "--opencompass: /no/such/bin/opencompass is not an executable"),
        (["--max-out-len", "0"], "--max-out-len must be positive"),
        (["--batch-size", "-1"], "--batch-size must be positive"),
    ],
)
def test_cli_bad_input_is_one_error_line(cli_workspace, capsys, extra, message):
    assert main(["eval", "--recipe", str(cli_workspace), "--backend", "opencompass", *extra]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"npu-rl: error: {message}") and err.count("\n") == 1


def test_cli_opencompass_options_need_the_opencompass_backend(cli_workspace, capsys):
    assert main(["eval", "--recipe", str(cli_workspace), "--backend", "local", "--max-out-len", "8"]) == 2
    assert capsys.readouterr().err == "npu-rl: error: --max-out-len applies to --backend opencompass only\n"


def test_cli_without_opencompass_says_how_to_get_it(cli_workspace, capsys, monkeypatch, tmp_path):
    monkeypatch.delenv(oc.EXECUTABLE_ENV, raising=False)
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    monkeypatch.setenv("NPU_RL_HOME", str(tmp_path))  # a checkout without .venv-eval
    (tmp_path / "configs").symlink_to(REPO / "configs")
    assert main(["eval", "--recipe", str(cli_workspace), "--backend", "opencompass"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("npu-rl: error: 'opencompass' is not installed here") and "make eval-venv" in err
    assert err.count("\n") == 1


# --- OpenCompass itself -------------------------------------------------------------------------


def _opencompass() -> str:
    """The eval environment's opencompass; CI creates it (.ci/run: make eval-venv), so there a
    missing one fails instead of skipping."""
    exe = oc.find_executable()
    if exe is None:
        missing_setup(
            "no OpenCompass here",
            f"`make eval-venv` creates .venv-eval (or point {oc.EXECUTABLE_ENV} at an opencompass command)",
        )
    return exe


@pytest.fixture(scope="module")
def tiny_models(tmp_path_factory):
    """`npu-rl model tiny` twice: a random base and a briefly warm-started 'trained' model."""
    _opencompass()  # skip before building anything
    root = tmp_path_factory.mktemp("oc_models")
    for name, steps in (("base", "0"), ("trained", "8")):
        assert main(["model", "tiny", "--out", str(root / name), "--warm-start-steps", steps]) == 0
    return root / "base", root / "trained"


def _oc_workspace(tmp_path: Path, tiny_models, complete_checkpoint, step: int) -> tuple[Path, Path]:
    """A workspace with the base model and the trained one as the merged checkpoint of ``step``."""
    base, trained = tiny_models
    ws = tmp_path / "ws"
    shutil.copytree(base, ws / "models" / "tiny")
    merged = complete_checkpoint(ws / "checkpoints" / "proj" / "exp" / f"global_step_{step}", world=1)
    shutil.copytree(trained, merged, dirs_exist_ok=True)
    return ws, write_recipe(tmp_path / "r.yaml", source_dir="sample")


N_PROBLEMS = 8


@pytest.mark.slow
def test_opencompass_runs_base_and_trained_into_the_table(
    tmp_path, tiny_models, complete_checkpoint, monkeypatch, capsys
):
    exe = _opencompass()
    ws, recipe = _oc_workspace(tmp_path, tiny_models, complete_checkpoint, step=8)
    monkeypatch.setenv("NPU_RL_WORKSPACE", str(ws))
    out = tmp_path / "eval"
    args = [
        "eval",
        "--recipe",
        str(recipe),
        "--backend",
        "opencompass",
        "--limit",
        str(N_PROBLEMS),
        "--max-out-len",
        "16",
        "--batch-size",
        "4",
        "--out",
        str(out),
    ]
    assert main(args) == 0, capsys.readouterr().err
    printed = capsys.readouterr().out
    root = out / "opencompass"
    # The command our code ran, with OpenCompass found in the eval environment.
    assert f"COMPASS_DATA_CACHE={root / 'data'} {exe} --config-dir {root / 'configs'}" in printed
    assert "--models npu_rl_tiny_hf npu_rl_tiny_rl_8 --datasets math_gen_a58d9d" in printed

    # OpenCompass read our math.json (the bundled sample's first problems), nothing downloaded.
    (run_dir,) = [p for p in (root / "outputs").iterdir() if p.is_dir()]
    problems = [v["problem"] for v in json.loads(oc.math_json_path(root / "data").read_text()).values()]
    assert len(problems) == N_PROBLEMS
    for abbr in ("tiny-hf", "tiny-rl-8"):
        preds = json.loads((run_dir / "predictions" / abbr / "math.json").read_text())
        assert len(preds) == N_PROBLEMS
        prompts = [p["origin_prompt"][-1]["prompt"] for p in preds.values()]
        assert [p.startswith(f"Problem:\n{q}\nSolution:") for p, q in zip(prompts, problems)] == [True] * N_PROBLEMS
    # Its task parameters went to our folder, not the caller's working directory.
    assert (root / "tmp").is_dir()

    # The table comes from OpenCompass's own summary CSV.
    (summary,) = (run_dir / "summary").glob("summary_*.csv")
    header, *lines = summary.read_text().splitlines()
    assert header == "dataset,version,metric,mode,tiny-hf,tiny-rl-8"
    assert len(lines) == 1 and lines[0].startswith("math,a58d9d,accuracy,gen,")
    table = ResultTable.read_csv(out / "eval_table.csv")
    assert [(r.model, r.step, r.dataset, r.metric) for r in table.rows] == [
        ("tiny-hf", 0, "MATH-lighteval", "accuracy"),
        ("tiny-rl-8", 8, "MATH-lighteval", "accuracy"),
    ]
    assert [r.score for r in table.rows] == [float(c) for c in lines[0].split(",")[4:]]
    assert all(0.0 <= r.score <= 100.0 for r in table.rows)
    assert "| tiny-rl-8 | 8 | MATH-lighteval | accuracy |" in printed


@pytest.mark.slow
def test_opencompass_failing_model_is_one_error_line(tmp_path, tiny_models, complete_checkpoint, monkeypatch, capsys):
    """OpenCompass exits 0 when a model's task fails: the missing score must not pass as a table."""
    _opencompass()
    ws, recipe = _oc_workspace(tmp_path, tiny_models, complete_checkpoint, step=4)
    (ws / "checkpoints" / "proj" / "exp" / "global_step_4" / "actor" / "huggingface" / "model.safetensors").write_bytes(
        b"not safetensors"
    )
    monkeypatch.setenv("NPU_RL_WORKSPACE", str(ws))
    args = [
        "eval",
        "--recipe",
        str(recipe),
        "--backend",
        "opencompass",
        "--limit",
        "2",
        "--max-out-len",
        "4",
        "--out",
        str(tmp_path / "eval"),
    ]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert err.startswith("npu-rl: error: ") and err.count("\n") == 1
    assert "OpenCompass has no score for tiny-rl-4 (see " in err and "/logs/infer/tiny-rl-4/: " in err
    # The exception from the task log: the weights could not be read.
    assert "SafetensorError" in err
    assert not (tmp_path / "eval" / "eval_table.csv").exists()


@pytest.mark.setup
def test_eval_environment_is_the_eval_lock():
    """`make eval-venv` installs configs/locks/eval.txt as it is: every locked package at its pin."""
    from npu_rl.envs import locks

    exe = _opencompass()
    python = Path(exe).with_name("python")
    if not python.is_file():
        pytest.skip(f"{exe} is not in a virtual environment")
    locked = {p.name: p.version for p in locks.read(locks.get("eval")) if not p.marker}
    code = (
        "import json, sys; from importlib import metadata; "
        "print(json.dumps({n: metadata.version(n) for n in sys.argv[1:]}))"
    )
    installed = json.loads(
        subprocess.run([str(python), "-c", code, *locked], capture_output=True, text=True, check=True).stdout
    )
    assert {n: v for n, v in installed.items() if locked[n] != v} == {}
