"""`npu-rl prepare` and `npu-rl train --prepare`: each step runs when its output is missing and
is skipped when it is there, so compose and a restarted Kubernetes job can run it every time."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import yaml

from npu_rl import run_files
from npu_rl.cli import main
from npu_rl.errors import UserError
from npu_rl.exit_codes import Exit
from npu_rl.launcher import megatron
from npu_rl.launcher import prepare as prepare_job
from npu_rl.model.tokenizer_override import load_override, resolve_override
from npu_rl.recipe import load_recipe

RECIPE = "tiny_math_cpu"  # no model.hub_id; data.source_dir is the bundled sample


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("tiny") / "model"
    assert main(["model", "tiny", "--out", str(out), "--warm-start-steps", "0"]) == 0
    return out


@pytest.fixture()
def ws(tmp_path, monkeypatch) -> Path:
    ws = tmp_path / "ws"
    ws.mkdir()
    monkeypatch.setenv("NPU_RL_WORKSPACE", str(ws))
    return ws


def _outputs(recipe) -> list[Path]:
    model = run_files.model_dir(recipe)
    return [*model.iterdir(), *prepare_job.data_files(recipe)]


def _mtimes(paths: list[Path]) -> dict[Path, int]:
    return {p: p.stat().st_mtime_ns for p in paths}


def test_first_run_fetches_and_converts_and_a_second_run_skips_both(tiny, ws, capsys):
    recipe = load_recipe(RECIPE)
    assert main(["prepare", "--recipe", RECIPE, "--model-source", str(tiny)]) == 0
    model = ws / recipe.model.path
    assert prepare_job.model_complete(model)
    # The recipe's chat template was applied, as `npu-rl model fetch --recipe` does.
    applied = json.loads((model / "tokenizer_config.json").read_text())
    expected = load_override(resolve_override(recipe.model.tokenizer_config))["chat_template"]
    assert applied["chat_template"] == expected
    import pyarrow.parquet as pq

    for f in prepare_job.data_files(recipe):
        assert {"data_source", "prompt", "reward_model"} <= set(pq.read_schema(f).names), f
    before = _mtimes(_outputs(recipe))
    capsys.readouterr()

    # No source this time: nothing may be fetched or rewritten.
    assert main(["prepare", "--recipe", RECIPE]) == 0
    out = capsys.readouterr().out
    assert f"model: {model} already present" in out
    assert out.count("already present") == 2
    assert _mtimes(_outputs(recipe)) == before


def test_missing_model_without_a_source_names_model_path_and_the_fix(ws, capsys):
    assert main(["prepare", "--recipe", RECIPE]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    assert "model.path models/tiny-qwen2" in err and "--model-source" in err and "model.hub_id" in err
    # It failed before the data step.
    assert not any(f.exists() for f in prepare_job.data_files(load_recipe(RECIPE)))


def test_an_interrupted_download_is_not_taken_as_a_model(tiny, tmp_path):
    model = tmp_path / "m"
    shutil.copytree(tiny, model)
    assert prepare_job.model_complete(model)
    index = {"metadata": {}, "weight_map": {"a": "model.safetensors", "b": "model-00002-of-00002.safetensors"}}
    (model / prepare_job.WEIGHT_INDEX).write_text(json.dumps(index))
    assert not prepare_job.model_complete(model)
    (model / "model-00002-of-00002.safetensors").write_bytes(b"")
    assert prepare_job.model_complete(model)


def test_empty_sources_fall_back_to_the_recipe(tiny, ws, monkeypatch):
    """Compose passes unset variables as empty strings; they mean model.hub_id / data.source_dir."""
    calls = []
    monkeypatch.setattr(prepare_job, "prepare", lambda recipe, **kw: calls.append(kw))
    assert main(["prepare", "--recipe", RECIPE, "--model-source", "", "--data-source", ""]) == 0
    assert calls == [{"model_source": None, "data_source": None}]


def test_data_source_order(ws, tmp_path, capsys):
    recipe = load_recipe(RECIPE)
    from npu_rl.data.sample import sample_dir

    assert prepare_job.data_source(recipe, None) == sample_dir()  # data.source_dir: sample
    raw = tmp_path / "raw"
    raw.mkdir()
    assert prepare_job.data_source(recipe, raw) == raw
    with pytest.raises(UserError, match=r"--data-source .*nope: directory not found"):
        prepare_job.data_source(recipe, tmp_path / "nope")
    # A source_dir that is not there falls back to the hub, saying so.
    elsewhere = load_recipe(RECIPE, {"data.source_dir": "data/MATH-lighteval"})
    assert prepare_job.data_source(elsewhere, None) is None
    assert f"{ws / 'data/MATH-lighteval'} not found, loading {recipe.data.hub_dataset}" in capsys.readouterr().out
    unset = load_recipe(RECIPE, {"data.source_dir": None})
    assert prepare_job.data_source(unset, None) is None


def test_data_from_an_explicit_directory_and_only_when_a_file_is_missing(ws, tmp_path, capsys):
    from npu_rl.data.sample import sample_dir

    recipe = load_recipe(RECIPE)
    raw = tmp_path / "raw"
    shutil.copytree(sample_dir(), raw)
    prepare_job.prepare_data(recipe, raw)
    train, test = prepare_job.data_files(recipe)
    assert "already present" not in capsys.readouterr().out
    # Only the test split is gone: the conversion runs again and both files are written.
    test.unlink()
    before = train.stat().st_mtime_ns
    prepare_job.prepare_data(recipe, raw)
    assert test.is_file() and train.stat().st_mtime_ns != before


def test_data_files_the_conversion_does_not_write_are_an_error(ws):
    recipe = load_recipe(RECIPE, {"data.val_files": ["data/math-sample/validation.parquet"]})
    with pytest.raises(UserError, match=r"validation\.parquet is not a file the math-lighteval conversion writes"):
        prepare_job.prepare_data(recipe)


# --- weight conversion ---------------------------------------------------------------------

# Stands in for the FP8 cast and verl's converter: logs its name, copies the input's
# weights into its output (which must not exist yet), or exits with --fail's code.
FAKE_TOOL = """\
import shutil, sys
from pathlib import Path
a = dict(zip(sys.argv[1::2], sys.argv[2::2]))
with open(a["--log"], "a") as f:
    f.write(Path(sys.argv[0]).name + "\\n")
if "--fail" in a:
    sys.exit(int(a["--fail"]))
out = Path(next(v for k, v in a.items() if k.startswith("--output")))
out.mkdir()
for w in Path(a["--input"]).glob("*.safetensors"):
    shutil.copy(w, out / w.name)
"""


class Conversion:
    """A tiny recipe with a weight conversion whose tools are FAKE_TOOL scripts."""

    def __init__(self, root: Path, monkeypatch):
        self.tools = root / "tools"
        self.tools.mkdir()
        for name in ("cast.py", "convert.py"):
            (self.tools / name).write_text(FAKE_TOOL)
        self.log = root / "tools.log"
        self.fail: dict[str, int] = {}
        data = load_recipe(RECIPE).model_dump(mode="json", exclude_unset=True)
        data["model"]["path"] = "models/bf16"
        data["prepare"] = {
            "weight_conversion": {"hf_path": "models/hf", "bf16_path": "models/bf16", "mcore_path": "models/mcore"}
        }
        self.recipe_file = root / "conv.yaml"
        self.recipe_file.write_text(yaml.safe_dump(data))
        self.recipe = load_recipe(self.recipe_file)
        monkeypatch.setattr(megatron, "prepare_commands", self.commands)

    def commands(self, recipe) -> list[list[str]]:
        conv = recipe.prepare.weight_conversion
        hf, bf16, mcore = (str(run_files.resolve(p)) for p in (conv.hf_path, conv.bf16_path, conv.mcore_path))
        return [
            self._tool("cast.py", "--input", hf, "--output-bf16-hf-path", bf16),
            self._tool("convert.py", "--input", bf16, "--output_path", mcore),
        ]

    def _tool(self, name: str, *args: str) -> list[str]:
        fail = ["--fail", str(self.fail[name])] if name in self.fail else []
        return ["python", str(self.tools / name), *args, "--log", str(self.log), *fail]

    def ran(self) -> list[str]:
        return self.log.read_text().split() if self.log.exists() else []


@pytest.fixture()
def conversion(ws, tmp_path, monkeypatch) -> Conversion:
    return Conversion(tmp_path, monkeypatch)


def _fp8_checkpoint(tiny: Path, dst: Path) -> None:
    """The tiny model dressed as a published FP8 checkpoint (config with quantization_config)."""
    shutil.copytree(tiny, dst)
    config = json.loads((dst / "config.json").read_text())
    config["quantization_config"] = {"quant_method": "fp8"}
    (dst / "config.json").write_text(json.dumps(config))


def test_conversion_runs_in_order_and_leaves_a_loadable_bf16_model(tiny, ws, tmp_path, conversion, capsys):
    _fp8_checkpoint(tiny, tmp_path / "published")
    assert (
        main(["prepare", "--recipe", str(conversion.recipe_file), "--model-source", str(tmp_path / "published")]) == 0
    )
    assert conversion.ran() == ["cast.py", "convert.py"]
    out = capsys.readouterr().out
    assert out.index("[1/2] cast.py") < out.index("[2/2] convert.py")
    bf16 = ws / "models/bf16"
    # The published checkpoint went to hf_path; the BF16 side is a complete model without FP8 settings.
    assert prepare_job.model_complete(ws / "models/hf") and prepare_job.model_complete(bf16)
    assert "quantization_config" not in json.loads((bf16 / "config.json").read_text())
    assert (bf16 / "tokenizer.json").read_bytes() == (ws / "models/hf/tokenizer.json").read_bytes()
    assert (ws / "models/mcore/model.safetensors").is_file()
    assert not list(ws.glob("models/*.partial"))

    assert main(["prepare", "--recipe", str(conversion.recipe_file)]) == 0
    out = capsys.readouterr().out
    assert conversion.ran() == ["cast.py", "convert.py"]  # nothing ran again
    assert f"model: {bf16} already present" in out
    assert "cast.py skipped" in out and "convert.py skipped" in out


def test_only_steps_without_output_run(tiny, ws, conversion, capsys):
    _fp8_checkpoint(tiny, ws / "models/hf")
    (ws / "models/bf16").mkdir(parents=True)
    (ws / "models/bf16/model.safetensors").write_bytes((tiny / "model.safetensors").read_bytes())
    prepare_job.convert_weights(conversion.recipe)
    assert conversion.ran() == ["convert.py"]
    assert f"{ws / 'models/bf16'} already present (cast.py skipped)" in capsys.readouterr().out
    # The cast did not run, so nothing was copied into the existing BF16 directory.
    assert not (ws / "models/bf16/config.json").exists()


def test_a_failing_step_stops_with_its_name_and_exit_code_and_reruns_next_time(tiny, ws, conversion, capsys):
    _fp8_checkpoint(tiny, ws / "models/hf")
    conversion.fail["cast.py"] = 3
    # A crashed step is a failure a restarted job retries (Exit.FAILED), not a bad input (Exit.BAD_INPUT).
    assert main(["prepare", "--recipe", str(conversion.recipe_file)]) == Exit.FAILED
    err = capsys.readouterr().err.strip()
    assert err == "npu-rl: error: weight conversion step cast.py failed with exit code 3"
    assert conversion.ran() == ["cast.py"]
    assert not (ws / "models/bf16").exists() and not (ws / "models/mcore").exists()

    # A half-written output from the failed try is not mistaken for a finished one.
    (ws / "models/bf16.partial").mkdir(exist_ok=True)
    (ws / "models/bf16.partial/junk").write_text("x")
    del conversion.fail["cast.py"]
    prepare_job.convert_weights(conversion.recipe)
    assert conversion.ran() == ["cast.py", "cast.py", "convert.py"]
    assert not (ws / "models/bf16/junk").exists()


def test_a_missing_tool_fails_before_any_step_runs(ws, conversion, monkeypatch):
    (conversion.tools / "convert.py").unlink()
    with pytest.raises(UserError, match=r"prepare\.weight_conversion: convert\.py not found at .*tools/convert\.py"):
        prepare_job.convert_weights(conversion.recipe)
    assert conversion.ran() == []


def test_recipes_without_conversion_have_no_steps(ws):
    recipe = load_recipe(RECIPE)
    assert prepare_job.conversion_steps(recipe) == []


def test_the_deepseek_recipe_steps_name_their_outputs(ws):
    """The real commands (not run): each step's output is the directory its skip check looks at."""
    recipe = load_recipe("deepseek_r1_671b_a3")
    conv = recipe.prepare.weight_conversion
    steps = prepare_job.conversion_steps(recipe)
    assert [s.name for s in steps] == ["npu-rl model fp8-cast", "converter_hf_to_mcore.py"]
    assert [s.output for s in steps] == [ws / conv.bf16_path, ws / conv.mcore_path]
    assert prepare_job.fetch_target(recipe) == ws / conv.hf_path


# --- npu-rl train --prepare ----------------------------------------------------------------


def test_train_prepare_runs_before_training_and_not_on_dry_run(monkeypatch, capsys):
    import npu_rl.launcher.train as train_launcher

    order = []
    monkeypatch.setattr(prepare_job, "prepare", lambda recipe, **kw: order.append(("prepare", recipe.name, kw)))

    def fake_training(recipe, **kw):
        order.append(("train", recipe.name, {}))
        return train_launcher.TrainResult(0, 0.0, None, None, Path("log"))

    monkeypatch.setattr(train_launcher, "run_training", fake_training)
    assert main(["train", "--recipe", RECIPE, "--prepare"]) == 0
    assert order == [("prepare", RECIPE, {}), ("train", RECIPE, {})]
    order.clear()
    assert main(["train", "--recipe", RECIPE, "--prepare", "--dry-run"]) == 0
    assert order == []
    assert main(["train", "--recipe", RECIPE]) == 0
    assert order == [("train", RECIPE, {})]
