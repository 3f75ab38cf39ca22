"""Shared fixtures: paths to the repo and to ../shared (absent in a user's fresh clone)."""

from __future__ import annotations

import hashlib
import os
import platform
import shutil
import sys
import time
from collections.abc import Sequence
from importlib import metadata
from pathlib import Path

import psutil
import pytest

REPO = Path(__file__).resolve().parents[1]
SHARED = (REPO / ".." / "shared").resolve()


_CPU_START = pytest.StashKey[tuple]()  # (monotonic time, _cpu_seconds()) when the session started


def _cpu_seconds() -> tuple[float, float]:
    """(busy, total) seconds of all cores since boot; iowait counts as idle, as a waiting core is."""
    t = psutil.cpu_times()
    idle = t.idle + getattr(t, "iowait", 0.0)
    busy = t.user + t.nice + t.system + getattr(t, "irq", 0.0) + getattr(t, "softirq", 0.0)
    return busy, busy + idle


def pytest_sessionstart(session):
    session.config.stash[_CPU_START] = (time.monotonic(), _cpu_seconds())


def pytest_terminal_summary(terminalreporter, config):
    """Whether this run was bound by the CPU or by waiting: the whole machine's busy share while it ran,
    next to `--durations`. On 2 cores a run near 100% gets faster only with less work; one well under it
    (waits on Ray's health check, a watchdog, a process's exit) has room for overlap."""
    if hasattr(config, "workerinput") or _CPU_START not in config.stash:
        return  # an xdist worker: the controller reports for the run
    t0, start = config.stash[_CPU_START]
    end = _cpu_seconds()
    busy, total = end[0] - start[0], end[1] - start[1]
    if total <= 0:
        return
    wall, cores = time.monotonic() - t0, psutil.cpu_count()
    terminalreporter.write_line(
        f"cpu: {busy / total:.0%} of {cores} cores busy over {wall:.0f} s "
        f"(about {busy / total * cores * wall:.0f} core-seconds, every process on the machine)"
    )


@pytest.fixture(scope="session")
def repo_root() -> Path:
    return REPO


@pytest.fixture(scope="session")
def shared_dir() -> Path:
    if not SHARED.is_dir():
        pytest.skip(f"../shared not found at {SHARED} (only CI and developers have it)")
    return SHARED


@pytest.fixture(scope="session")
def math500(shared_dir: Path) -> Path:
    path = shared_dir / "data" / "math500" / "test.jsonl"
    if not path.is_file():
        pytest.skip(f"{path} not found")
    return path


def write_complete_checkpoint(step_dir: Path, world: int) -> Path:
    """The files of a complete verl FSDP checkpoint of ``world`` ranks (placeholder contents);
    returns its ``actor/huggingface`` directory, where a merge writes the model."""
    actor = step_dir / "actor"
    (actor / "huggingface").mkdir(parents=True, exist_ok=True)
    for kind in ("model", "optim", "extra_state"):
        for rank in range(world):
            (actor / f"{kind}_world_size_{world}_rank_{rank}.pt").write_bytes(b"shard")
    (step_dir / "data.pt").write_bytes(b"dataloader")
    return actor / "huggingface"


@pytest.fixture
def complete_checkpoint():
    return write_complete_checkpoint


# What `npu-rl model tiny` reads besides its arguments: a change to any of these makes a new model.
_TINY_INPUTS = (
    "npu_rl/model",
    "npu_rl/data/sample.py",
    "npu_rl/data/math.py",
    "npu_rl/data/arithmetic.py",
    "npu_rl/data/tools.py",
    "npu_rl/commands/model.py",
    # The ISA pins' lookup and re-exec, and the recipe schema's defaults the command reads.
    "npu_rl/commands/options.py",
    "npu_rl/versions.py",
    "npu_rl/recipe",
    "configs/versions.yaml",
    # The line's ISA pins, under which the warm start runs (npu_rl.platform.cpu_isa).
    "npu_rl/platform/cpu_isa.py",
    "configs/stacks",
    "configs/tokenizer",
    "configs/data",
)
_TINY_DISTS = ("torch", "transformers", "tokenizers", "safetensors")


class ModelCache:
    """This machine's cache of warm-started models (``NPU_RL_TEST_MODEL_CACHE``, else
    ``$XDG_CACHE_HOME/npu-rl/tiny-models``), as uv's cache is its wheels': keyed by every input of the warm
    start, so a fresh clone reuses what an earlier one made (the demo's 1600 steps cost about 160 s of CI, once
    on the host and once in the cpu-vllm image) and a change to any input makes a new one.
    ``NPU_RL_TEST_MODEL_CACHE=pytest``: the checkout's own pytest cache."""

    def __init__(self, config):
        where = os.environ.get("NPU_RL_TEST_MODEL_CACHE") or str(
            Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "npu-rl" / "tiny-models"
        )
        self.dir = config.cache.mkdir("npu_rl_tiny_models") if where == "pytest" else Path(where)
        self.dir.mkdir(parents=True, exist_ok=True)
        # What `npu-rl model tiny` reads besides its arguments and the Python it runs on.
        self._inputs = hashlib.sha256()
        for rel in _TINY_INPUTS:
            root = REPO / rel
            for f in sorted([root] if root.is_file() else root.rglob("*")):
                if f.is_file() and "__pycache__" not in f.parts:
                    self._inputs.update(f.relative_to(REPO).as_posix().encode() + f.read_bytes())

    def entry(self, recipe: str, *parts: object) -> Path:
        """The folder of the model the warm start's inputs, ``recipe``'s file (its chat template, its data) and
        ``parts`` (the argv, the Python set) make; another recipe's edit leaves it as it is."""
        key = self._inputs.copy()
        key.update((REPO / "configs" / "recipes" / f"{recipe}.yaml").read_bytes())
        key.update(repr(parts).encode())
        return self.dir / key.hexdigest()[:16]

    def keep(self, made: Path, fill) -> Path:
        """``made``, filled once by ``fill(folder)`` (whole or not at all) under a lock across processes."""
        from filelock import FileLock

        with FileLock(str(made) + ".lock"):
            if not (made / "config.json").is_file():
                partial = made.with_name(made.name + ".partial")
                shutil.rmtree(partial, ignore_errors=True)
                fill(partial)
                partial.rename(made)
        return made


@pytest.fixture(scope="session")
def model_cache(request) -> ModelCache:
    return ModelCache(request.config)


@pytest.fixture(scope="session")
def tiny_model(model_cache):
    """``tiny_model(out, steps, recipe, args)``: the directory `npu-rl model tiny --out out --recipe recipe
    --warm-start-steps steps *args` writes, made once and copied to ``out`` (a copy each: a test may change
    it).

    Made by that command itself, once per set of inputs (the arguments, the files it reads, the versions
    of what it runs on), and kept across runs, xdist workers and clones (:class:`ModelCache`)."""
    from npu_rl import versions as stacks
    from npu_rl.cli import main

    # The Python set, the machine, and any ISA pin a line declares that the caller has set (it wins over the
    # line's, npu_rl.platform.cpu_isa).
    isa = {k for line in stacks.line_names() for k in stacks.load(stack=line).get("cpu_isa") or {}}
    versions = [sys.version, platform.machine(), *(metadata.version(d) for d in _TINY_DISTS)]
    versions += sorted((k, v) for k, v in os.environ.items() if k in isa)

    def make(out: Path, steps: int = 1000, recipe: str = "tiny_math_cpu", args: Sequence[str] = ()) -> Path:
        argv = ["--recipe", recipe, "--warm-start-steps", str(steps), *args]

        def fill(folder: Path) -> None:
            assert main(["model", "tiny", "--out", str(folder), *argv]) == 0

        made = model_cache.keep(model_cache.entry(recipe, versions, argv), fill)
        shutil.copytree(made, out, dirs_exist_ok=True)
        return out

    return make


@pytest.fixture(scope="session")
def deepseek_standin():
    """``deepseek_standin(qwen, out)``: a DeepSeek-V3-architecture model dir at toy width in ``out``, with
    the tokenizer of the tiny Qwen2 in ``qwen``, for rehearsals (which load no weights)."""

    def make(qwen: Path, out: Path) -> Path:
        """DeepSeek-V3's architecture at toy width: 61 layers, 256 routed experts, 3 dense layers, MLA."""
        import torch
        from safetensors.torch import save_file
        from transformers import DeepseekV3Config

        out.mkdir(parents=True)
        for f in qwen.iterdir():
            if f.name.startswith(("tokenizer", "special_tokens")):
                shutil.copy(f, out / f.name)
        cfg = DeepseekV3Config(
            vocab_size=512,
            hidden_size=64,
            intermediate_size=128,
            moe_intermediate_size=32,
            num_hidden_layers=61,
            num_attention_heads=4,
            num_key_value_heads=4,
            n_routed_experts=256,
            num_experts_per_tok=8,
            n_group=8,
            topk_group=4,
            q_lora_rank=32,
            kv_lora_rank=16,
            qk_rope_head_dim=8,
            qk_nope_head_dim=8,
            v_head_dim=8,
            first_k_dense_replace=3,
            architectures=["DeepseekV3ForCausalLM"],
        )
        cfg.save_pretrained(out)
        # The rehearsal loads no weights, but the preflight wants a checkpoint file in the model dir.
        save_file(
            {"model.embed_tokens.weight": torch.zeros(cfg.vocab_size, cfg.hidden_size)}, out / "model.safetensors"
        )
        return out

    return make


NOTEBOOK = REPO / "notebooks" / "npu_rl_walkthrough.ipynb"
NOTEBOOK_STEPS = 2


@pytest.fixture(scope="session")
def notebook_run(tmp_path_factory):
    """The shipped notebook executed headless against the CPU recipe, as a user runs it: model, data,
    a ``NOTEBOOK_STEPS``-step run, merge, eval, report, plots. Returns the executed notebook and its
    workspace. The dashboards test serves this run's TensorBoard and SwanLab logs."""
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    nb = nbformat.read(NOTEBOOK, as_version=4)
    work = tmp_path_factory.mktemp("notebook")
    # 50 warm-start steps, not the user's 1000: the tests read the run's files and charts, not its learning
    # (the demo's claim is tests/e2e/test_demo_learns.py's), and 950 steps cost about 95 s of CI.
    values = {"RECIPE": "tiny_math_cpu", "STEPS": NOTEBOOK_STEPS, "WARM_START_STEPS": 50, "EVAL_LIMIT": 8}
    values["WORKSPACE"] = str(work / "ws")
    # Replace the cell tagged `parameters` (papermill's convention) with the values above.
    (cell,) = [c for c in nb.cells if "parameters" in c.metadata.get("tags", [])]
    for name in values:
        assert f"{name} =" in cell.source, name
    cell.source = "\n".join(f"{k} = {v!r}" for k, v in values.items())
    mp = pytest.MonkeyPatch()
    mp.setenv("RAY_ADDRESS", "")  # a fresh local cluster, whatever the caller's shell says
    try:
        client = nbclient.NotebookClient(
            nb, timeout=600, kernel_name="python3", resources={"metadata": {"path": str(work)}}
        )
        client.execute()
    finally:
        mp.undo()
    return nb, work / "ws"
