"""Everything a recipe reads before training, made idempotent: the model, the data and
(megatron recipes with ``prepare.weight_conversion``) the converted weights.

Each step first looks for its output and skips with one line when it is there, so
compose's ``prepare`` service and a restarted Kubernetes job can run it every time.
"""

from __future__ import annotations

import json
import shlex
import shutil
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from .. import run_files
from ..data import agent_sources, sft_sources
from ..data.deepscaler import prepare as convert_deepscaler
from ..data.math import prepare as convert_math
from ..data.sample import sample_dir
from ..errors import UserError
from ..exit_codes import Exit
from ..model.fetch import check_model_dir, fetch_for_recipe
from ..model.fp8_cast import WEIGHT_INDEX, copy_hf_side_files
from ..recipe.schema import Recipe
from . import megatron

# Conversion tools name their output directory with a flag starting with this
# (npu-rl model fp8-cast's --output-bf16-hf-path, verl's --output_path).
OUTPUT_FLAG = "--output"
PARTIAL_SUFFIX = ".partial"


def prepare(recipe: Recipe, model_source: str | None = None, data_source: Path | None = None) -> None:
    """Run the model, data and weight-conversion steps of ``recipe``, skipping what is present."""
    prepare_model(recipe, model_source)
    prepare_data(recipe, data_source)
    convert_weights(recipe)


# --- model -----------------------------------------------------------------------------------


def model_complete(path: Path) -> bool:
    """A HF model directory with weights, and every shard its index names (an interrupted
    download leaves some shards missing)."""
    try:
        check_model_dir(path)
    except UserError:
        return False
    index = path / WEIGHT_INDEX
    if not index.is_file():
        return True
    try:
        shards = set(json.loads(index.read_text(encoding="utf-8"))["weight_map"].values())
    except (ValueError, KeyError, TypeError):
        return False
    return all((path / s).is_file() for s in shards)


def fetch_target(recipe: Recipe) -> Path:
    """Where the published weights go: ``model.path``, or the conversion's input when the
    recipe trains on converted weights."""
    conv = recipe.prepare.weight_conversion
    return run_files.resolve(conv.hf_path) if conv else run_files.model_dir(recipe)


def prepare_model(recipe: Recipe, source: str | None = None) -> None:
    target = fetch_target(recipe)
    # With a conversion, either end being there is enough: the published copy may have
    # been deleted after conversion to save space.
    for path in dict.fromkeys((run_files.model_dir(recipe), target)):
        if model_complete(path):
            print(f"model: {path} already present", flush=True)
            return
    source = source or recipe.model.hub_id
    if not source:
        raise UserError(
            f"model.path {recipe.model.path}: no weights in {target}; pass --model-source HUB_ID_OR_DIR "
            "or set model.hub_id in the recipe"
        )
    fetch_for_recipe(source, target, recipe.model.tokenizer_config)


# --- data ------------------------------------------------------------------------------------


def data_files(recipe: Recipe) -> list[Path]:
    return [run_files.resolve(f) for f in (*recipe.data.train_files, *recipe.data.val_files)]


def recipe_source_dir(source_dir: str) -> Path:
    """``data.source_dir``: relative to the workspace; 'sample' is the bundled sample, as in
    `npu-rl data math --from sample`."""
    if source_dir == "sample":
        return sample_dir()
    return run_files.resolve(source_dir)


def data_source(recipe: Recipe, source: Path | None) -> Path | None:
    """The raw data directory to convert (``data.format`` says which shape); None means the hub."""
    if source is not None:
        if not source.is_dir():
            raise UserError(f"--data-source {source}: directory not found")
        return source
    if recipe.data.source_dir:
        path = recipe_source_dir(recipe.data.source_dir)
        if path.is_dir():
            return path
        print(f"data: data.source_dir {path} not found, loading {recipe.data.hub_dataset} from the hub", flush=True)
    return None


# What each conversion writes, beside data.train_files[0] (and, for dapo-math, data.val_files[0]).
WRITES = {
    "math-lighteval": "train.parquet and test.parquet",
    "deepscaler": "train.parquet and test.parquet",
    "dapo-math": "train.parquet beside data.train_files[0], test.parquet beside data.val_files[0]",
    "code-problems": "train.parquet and validation.parquet",
    "retool-sft": "train.parquet (transcripts: messages and tools)",
    "agent-sft": "train.parquet (transcripts: messages and tools)",
}
# The agent sets' raw files, read from disk only (their hub names, to download).
AGENT_SETS = {
    "dapo-math": "BytedTsinghua-SIA/DAPO-Math-17k",
    "code-problems": "PrimeIntellect/verifiable-coding-problems",
    "retool-sft": "JoeYing/ReTool-SFT",
    "agent-sft": "Gen-Verse/Open-AgentRL-SFT-3K",
}


def _local_source(recipe: Recipe, source: Path | None, field: str, hub: str) -> Path:
    """An agent set's raw files: read from disk only (download ``hub`` first)."""
    given = source or (recipe_source_dir(getattr(recipe.data, field)) if getattr(recipe.data, field) else None)
    if given is None or not given.exists():
        raise UserError(
            f"data: data.{field} {given or '(unset)'} not found: download {hub} (huggingface-cli download "
            f"--repo-type dataset {hub} --local-dir DIR) and set data.{field} (or --data-source) to DIR"
        )
    return given


def _prepare_agent_data(recipe: Recipe, source: Path | None) -> None:
    d = recipe.data
    train_dir = run_files.resolve(d.train_files[0]).parent
    raw = _local_source(recipe, source, "source_dir", AGENT_SETS[d.format])
    if d.format != "dapo-math":
        convert = {
            "code-problems": agent_sources.prepare_code_problems,
            "retool-sft": sft_sources.prepare_retool_sft,
            "agent-sft": sft_sources.prepare_agent_sft,
        }[d.format]
        convert(train_dir, raw)
        return
    agent_sources.prepare_dapo_math(train_dir, raw)
    val_dir = run_files.resolve(d.val_files[0]).parent
    agent_sources.prepare_aime(val_dir, _local_source(recipe, None, "val_source_dir", "yentinglin/aime_2025"))


def prepare_data(recipe: Recipe, source: Path | None = None) -> None:
    convert: Callable[[Path, Path | None, str], dict[str, int]]
    convert = convert_deepscaler if recipe.data.format == "deepscaler" else convert_math

    files = data_files(recipe)
    if all(f.is_file() for f in files):
        print(f"data: {', '.join(map(str, files))} already present", flush=True)
        return
    if recipe.data.format in AGENT_SETS:
        _prepare_agent_data(recipe, source)
    else:
        convert(
            run_files.resolve(recipe.data.train_files[0]).parent, data_source(recipe, source), recipe.data.hub_dataset
        )
    missing = [f for f in files if not f.is_file()]
    if missing:
        raise UserError(
            f"data: {missing[0]} is not a file the {recipe.data.format} conversion writes (it writes "
            f"{WRITES[recipe.data.format]}); fix data.train_files / data.val_files"
        )


# --- weight conversion -----------------------------------------------------------------------


@dataclass(frozen=True)
class ConversionStep:
    argv: list[str]
    output: Path
    # > 1: the command runs once on each of that many nodes (torchrun's --node_rank / --master_addr
    # are filled per node, see run_on_nodes).
    nodes: int = 1

    @property
    def script(self) -> Path | None:
        return next((Path(a) for a in self.argv if a.endswith(".py")), None)

    @property
    def name(self) -> str:
        if self.argv[: len(megatron.FP8_CAST)] == megatron.FP8_CAST:
            return "npu-rl model fp8-cast"
        return (self.script or Path(self.argv[0])).name

    @property
    def resumable(self) -> bool:
        """The step keeps what an interrupted run wrote and carries on from it (npu-rl's FP8 cast
        skips the shards it finished); every other tool starts over."""
        return self.argv[: len(megatron.FP8_CAST)] == megatron.FP8_CAST

    def argv_writing_to(self, output: Path, node_rank: int = 0, master_addr: str = "127.0.0.1") -> list[str]:
        """The command with its output flag pointed at ``output``; ``python`` is this interpreter,
        which in the images is the one with verl, torch and Megatron installed."""
        argv = [
            a.replace(megatron.NODE_RANK, str(node_rank)).replace(megatron.MASTER_ADDR, master_addr) for a in self.argv
        ]
        argv[_output_index(argv)] = str(output)
        if argv[0] == "python":
            argv[0] = sys.executable
        return argv

    def describe(self) -> str:
        """The command as `npu-rl prepare --dry-run` shows it."""
        fields = {megatron.NODE_RANK: "$NODE_RANK", megatron.MASTER_ADDR: "$HEAD_IP"}
        command = " ".join(fields.get(a) or shlex.quote(a) for a in self.argv)
        where = (
            f"on each of {self.nodes} nodes (NODE_RANK 0 on the Ray head, HEAD_IP its address)"
            if self.nodes > 1
            else "here"
        )
        return f"{self.name} -> {self.output}, {where}:\n    {command}"


def _output_index(argv: list[str]) -> int:
    for i, arg in enumerate(argv[:-1]):
        if arg.startswith(OUTPUT_FLAG):
            return i + 1
    raise ValueError(f"conversion command names no {OUTPUT_FLAG}* directory: {argv}")


def conversion_steps(recipe: Recipe) -> list[ConversionStep]:
    steps = []
    for argv in megatron.prepare_commands(recipe):
        nodes = megatron.converter_nodes(recipe) if megatron.NODE_RANK in argv else 1
        steps.append(ConversionStep(argv, Path(argv[_output_index(argv)]), nodes))
    return steps


def _present(path: Path) -> bool:
    return path.is_dir() and any(path.iterdir())


def describe(recipe: Recipe) -> list[str]:
    """What `npu-rl prepare` would do, for --dry-run: where the model and data come from and
    each weight-conversion command, with whether its output is already there."""
    conv = recipe.prepare.weight_conversion
    lines = [
        f"model: {fetch_target(recipe)}" + (f" (from {recipe.model.hub_id})" if recipe.model.hub_id else ""),
        f"data: {', '.join(map(str, data_files(recipe)))}",
    ]
    steps = conversion_steps(recipe)
    for i, step in enumerate(steps, 1):
        done = " [already present, skipped]" if _present(step.output) else ""
        lines.append(f"weights: [{i}/{len(steps)}] {step.describe()}{done}")
    if conv is None:
        lines.append("weights: no prepare.weight_conversion")
    return lines


def convert_weights(recipe: Recipe) -> None:
    steps = conversion_steps(recipe)
    pending = []
    for step in steps:
        if _present(step.output):
            print(f"weights: {step.output} already present ({step.name} skipped)", flush=True)
        else:
            pending.append(step)
    # Checked before the first step runs: the second step's script missing after an hour-long first one is a waste.
    for step in pending:
        if step.script is not None and not step.script.is_file():
            raise UserError(f"prepare.weight_conversion: {step.name} not found at {step.script}")
    for i, step in enumerate(pending, 1):
        _run_step(recipe, step, f"[{i}/{len(pending)}]")


def _run_step(recipe: Recipe, step: ConversionStep, counter: str) -> None:
    # The tool writes next to the output and the result is renamed into place only on
    # success, so an interrupted conversion is not taken as done; a resumable tool keeps
    # what it finished before, any other starts over.
    partial = step.output.with_name(step.output.name + PARTIAL_SUFFIX)
    if not step.resumable:
        shutil.rmtree(partial, ignore_errors=True)
    partial.parent.mkdir(parents=True, exist_ok=True)
    print(f"weights: {counter} {step.name} -> {step.output}", flush=True)
    # Output goes straight to the console: these tools show their own progress.
    if step.nodes > 1:
        codes = run_on_nodes(step, partial)
        code = next((c for c in codes if c != 0), 0)
    else:
        code = subprocess.run(step.argv_writing_to(partial)).returncode
    if code != 0:
        # A crash or a lost node, not a bad input: a restarted job resumes the conversion.
        raise UserError(f"weight conversion step {step.name} failed with exit code {code}", exit_code=Exit.FAILED)
    if not partial.is_dir():
        raise UserError(f"weight conversion step {step.name} exited 0 but wrote nothing to {partial}")
    conv = recipe.prepare.weight_conversion
    if conv is not None and conv.bf16_path and step.output == run_files.resolve(conv.bf16_path):
        copy_hf_side_files(run_files.resolve(conv.hf_path), partial)
    if step.output.is_dir():
        step.output.rmdir()  # empty (see _present); rename cannot replace a directory
    partial.rename(step.output)


def _run_argv(argv: list[str]) -> int:
    return subprocess.run(argv, check=False).returncode


def run_on_nodes(step: ConversionStep, output: Path) -> list[int]:
    """Run a distributed step once on each of ``step.nodes`` Ray nodes, node rank 0 on this
    (the head) node, as torchrun's static rendezvous wants; returns every node's exit code.

    `npu-rl train --prepare` runs inside the Ray job (`npu-rl ray head -- ...`), so the job's
    pods are Ray nodes; the output directory is on the volume they all mount.
    """
    try:
        import ray  # lazy: ray
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy  # lazy: ray
    except ImportError as e:
        raise UserError(
            f"weight conversion step {step.name} runs on {step.nodes} nodes through Ray, which is not installed here"
        ) from e
    try:
        ray.init(address="auto", ignore_reinit_error=True, log_to_driver=True)
    except ConnectionError as e:
        raise UserError(
            f"weight conversion step {step.name} runs on {step.nodes} nodes but no Ray cluster is "
            "running: run it inside the job (`npu-rl train --prepare` under `npu-rl ray head`), or "
            "set prepare.weight_conversion.distributed=false for a one-node conversion"
        ) from e
    here = ray.util.get_node_ip_address()
    alive = [n for n in ray.nodes() if n.get("Alive")]
    alive.sort(key=lambda n: n["NodeManagerAddress"] != here)  # this node first: rank 0
    if len(alive) < step.nodes or alive[0]["NodeManagerAddress"] != here:
        raise UserError(
            f"weight conversion step {step.name} needs {step.nodes} Ray nodes including this one, "
            f"the cluster has {len(alive)}"
        )
    try:
        task = ray.remote(num_cpus=0)(_run_argv)
        refs = [
            task.options(scheduling_strategy=NodeAffinitySchedulingStrategy(n["NodeID"], soft=False)).remote(
                step.argv_writing_to(output, rank, here)
            )
            for rank, n in enumerate(alive[: step.nodes])
        ]
        return ray.get(refs)
    finally:
        ray.shutdown()  # the training that follows connects to the cluster as a driver of its own
