"""`make demo`: the whole pipeline on CPU with the tiny recipe.

model -> data -> GRPO through Ray (verl) -> checkpoint -> merge -> evaluation
-> health report, each step through the same `npu-rl` jobs a user runs on NPU.

`make demo TASK=agent` (``--task agent``): the agent recipes on their stack line, in upstream's two stages.
The task's data; the SFT stage, tiny_agent_sft_cpu, through verl 0.9's SFT trainer on a teacher's tool
transcripts, merged as upstream merges it; npu-rl's sandbox; then multi-turn GRPO, tiny_agent_cpu, from the
SFT stage's model through verl 0.9's tool agent loop. Held-out accuracy and the tool-call rate before and
after are verl's own validation of the same loop, at step 0 and at the last step.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import time
from collections.abc import Mapping
from pathlib import Path

from . import run_files
from .cli import main as npu_rl
from .defaults import DEMO_STEPS, DEMO_WARM_START_STEPS
from .eval.table import CSV_NAME, ResultTable
from .recipe import load_recipe

RECIPE = "tiny_math_cpu"
# `--rollout vllm` (in the cpu-vllm image): the same pipeline sampling with vLLM's CPU backend, on a
# model of head size 32, the smallest vLLM's CPU attention takes (the hf model's is 16): 2 heads of 32, each
# with its own key/value head. With one key/value head shared by both (multi-query) the model learnt the
# sign far less, on either rollout: held-out 46.88 -> 62.50 with hf on the seeds' line, where 2 key/value
# heads gave 43.75 -> 85.94 and the hf model 43.75 -> 98.44 (a model of width 128 with 4 heads of 32
# collapsed to no right answer within 24 steps at the recipe's learning rate).
VLLM_SETS = {"rollout.name": "vllm", "model.path": "models/tiny-qwen2-vllm"}
VLLM_MODEL_ARGS = ["--heads", "2", "--kv-heads", "2"]
# Before its first step verl 0.9 starts a vLLM server per worker: the first step came at 140 s here, against
# the recipe's 180 s allowance for Ray, model load and the first rollout.
LINE_FIRST_STEP_S = 420


def line_sets(stack: str | None) -> dict[str, object]:
    """What the demo's recipe needs on another stack line than the default: its name, vLLM where the
    line's verl has no in-process rollout."""
    from . import versions  # lazy: the demo's own imports stay light

    if versions.other_line(stack) is None:
        return {}
    sets: dict[str, object] = {"stack": stack, "watchdog.first_step_s": LINE_FIRST_STEP_S}
    if "hf" not in versions.get("verl.rollouts", versions.load(stack=stack)):
        sets.update(VLLM_SETS)
    return sets


def _same_heads(model_dir: Path, model_args: list[str]) -> bool:
    """Whether the workspace's model has the heads the demo makes (a workspace of an earlier release may hold
    the vLLM model with one shared key/value head, which learns less: made again)."""
    config = model_dir / "config.json"
    if not config.is_file():
        return False
    import json  # lazy: only here

    have = json.loads(config.read_text(encoding="utf-8"))
    args = dict(zip(model_args[::2], model_args[1::2]))
    want = {"num_attention_heads": args.get("--heads"), "num_key_value_heads": args.get("--kv-heads")}
    return all(value is None or str(have.get(key)) == value for key, value in want.items())


def _start(workdir: Path, name: str, sets: Mapping[str, object], fresh: bool):
    """The demo's workspace made and named for every job, its recipe with ``sets`` (and their `--set`
    arguments), the earlier run's checkpoints and logs gone unless it resumes."""
    workdir = workdir.resolve()
    workdir.mkdir(parents=True, exist_ok=True)
    os.environ["NPU_RL_WORKSPACE"] = str(workdir)
    recipe = load_recipe(name, dict(sets))
    if fresh:
        for d in (run_files.checkpoint_root(recipe), run_files.log_root(recipe)):
            shutil.rmtree(d, ignore_errors=True)
    return recipe, [a for k, v in sets.items() for a in ("--set", f"{k}={v}")]


def _step(title: str) -> None:
    print(f"\n=== {title} ===", flush=True)


def _job(argv: list[str], ok_codes: tuple[int, ...] = (0,)) -> int:
    print("$ npu-rl " + " ".join(argv), flush=True)
    code = npu_rl(argv)
    if code not in ok_codes:
        print(f"demo: `npu-rl {' '.join(argv)}` failed with exit code {code}", file=sys.stderr)
        raise SystemExit(code)
    return code


def run(
    workdir: Path,
    steps: int,
    eval_limit: int,
    fresh: bool,
    warm_start_steps: int = DEMO_WARM_START_STEPS,
    rollout: str = "hf",
    stack: str | None = None,
) -> int:
    extra = line_sets(stack)
    if extra.get("rollout.name") == "vllm":
        rollout = "vllm"
    if rollout == "vllm" and not extra:
        from .platform.doctor import CPU_VLLM_FIX, cpu_vllm_missing  # lazy: the check

        missing = cpu_vllm_missing()
        if missing:  # before the model is built
            print(f"npu-rl: error: {missing}; fix: {CPU_VLLM_FIX}", file=sys.stderr)
            return 2
    sets = {"algorithm.total_training_steps": steps, **(VLLM_SETS if rollout == "vllm" else {}), **extra}
    recipe, set_args = _start(workdir, RECIPE, sets, fresh)
    t_start = time.monotonic()
    timings: dict[str, float] = {}

    _step("1/6 tiny Qwen2 model (random init + warm start from a fallible teacher, no download)")
    t = time.monotonic()
    model_dir = run_files.model_dir(recipe)
    model_args = VLLM_MODEL_ARGS if rollout == "vllm" else []
    if _same_heads(model_dir, model_args):
        print(f"reusing {model_dir}")
    else:
        _job(
            ["model", "tiny", "--out", str(model_dir), "--recipe", RECIPE, "--warm-start-steps", str(warm_start_steps)]
            + model_args
        )
    timings["model"] = time.monotonic() - t

    _step("2/6 data: bundled MATH-style sample (held-out test split) -> verl parquet")
    t = time.monotonic()
    _job(["data", "math", "--from", "sample", "--out", str(run_files.resolve(Path(recipe.data.train_files[0]).parent))])
    timings["data"] = time.monotonic() - t

    _step(f"3/6 GRPO training with verl on Ray ({steps} steps)")
    t = time.monotonic()
    _job(["train", "--recipe", RECIPE, *set_args])
    timings["train"] = time.monotonic() - t

    _step("4/6 merge the checkpoint into a Hugging Face model")
    t = time.monotonic()
    _job(["merge", "--recipe", RECIPE, *set_args])
    timings["merge"] = time.monotonic() - t

    _step("5/6 evaluate base vs trained on the held-out split")
    t = time.monotonic()
    _job(["eval", "--recipe", RECIPE, "--limit", str(eval_limit), *set_args])
    timings["eval"] = time.monotonic() - t
    gain = accuracy_gain(recipe)
    answers = {metric: accuracy_gain(recipe, metric) for metric in ANSWER_LABELS}

    _step("6/6 training health report")
    t = time.monotonic()
    from .report import build_report  # lazy: numpy, at step 6

    report = build_report(run_files.log_root(recipe), recipe=recipe)
    timings["report"] = time.monotonic() - t
    print(report.to_markdown())

    _summary(recipe, timings, time.monotonic() - t_start, report, gain, answers)
    return 0


def accuracy_gain(recipe, metric: str = "accuracy") -> tuple[float, float, int]:
    """(base, trained, step) held-out ``metric`` in percent, read back from the table `npu-rl eval` wrote."""
    table = ResultTable.read_csv(run_files.eval_dir(recipe) / CSV_NAME)
    (delta,) = [d for d in table.deltas() if d.metric == metric]
    return delta.baseline, delta.score, delta.step


ANSWER_LABELS = {"boxed": "boxed answers", "boxed accuracy": "right among boxed"}


def _summary(
    recipe,
    timings: dict[str, float],
    total: float,
    report,
    gain: tuple[float, float, int],
    answers: dict[str, tuple[float, float, int]] | None = None,
) -> None:
    from .report.scalars import load_run  # lazy: numpy, at step 6

    series = load_run(run_files.log_root(recipe))

    def values(tag: str) -> list[float]:
        s = series.get(tag)
        return [float(v) for v in s.values] if s is not None else []

    step_times = values("timing_s/step")
    scores = values("critic/score/mean")
    step = run_files.latest_step(recipe)
    print("\n=== summary ===")
    print(f"steps trained         : {step}")
    if step_times:
        print(f"seconds per step      : {statistics.median(step_times):.2f} (median of {len(step_times)})")
    if report.throughput is not None:  # the report above has the whole card; its two figures here
        for line in report.throughput.text_lines():
            if line.startswith(("verl perf/throughput", "step time")):
                print(f"throughput            : {line}")
    if scores:
        print(f"reward mean per step  : {', '.join(f'{v:.3f}' for v in scores)}")
    base, trained, at = gain
    print(f"held-out accuracy     : {base:.2f} -> {trained:.2f} at step {at} ({trained - base:+.2f} points)")
    # Format and answers apart: how many answers are boxed, and how many boxed ones are right.
    for metric, (b, t, _) in (answers or {}).items():
        print(f"{ANSWER_LABELS[metric]:<22}: {b:.2f} -> {t:.2f} ({t - b:+.2f} points)")
    print(f"checkpoints           : {run_files.checkpoint_root(recipe)}")
    print(f"merged model          : {run_files.merged_model_dir(recipe, step) if step else '-'}")
    print(f"tensorboard logs      : {run_files.tensorboard_dir(recipe)}")
    print(f"health report         : {report.html} ({report.status})")
    print("time per stage        : " + ", ".join(f"{k} {v:.0f}s" for k, v in timings.items()))
    print(f"total                 : {total:.0f}s")


AGENT_RECIPE = "tiny_agent_cpu"
AGENT_SFT_RECIPE = "tiny_agent_sft_cpu"
AGENT_STEPS = 12


def run_agent(workdir: Path, steps: int, fresh: bool) -> int:
    """The agent demo (module docstring): 0 where held-out accuracy rose."""
    import subprocess  # lazy: the agent demo's sandbox

    from .cluster import proctree  # lazy: the agent demo's
    from .cluster.probe import free_port  # lazy: the agent demo's

    port = free_port()
    sft, sft_args = _start(workdir, AGENT_SFT_RECIPE, {}, fresh)
    sft_steps = sft.algorithm.total_training_steps
    sets = {
        "algorithm.total_training_steps": steps,
        "checkpoint.val_before_train": True,
        "checkpoint.test_freq": steps,
        "checkpoint.save_freq": steps,
        "sandbox.port": port,
    }
    recipe, set_args = _start(workdir, AGENT_RECIPE, sets, fresh)
    t_start = time.monotonic()
    timings: dict[str, float] = {}

    _step("1/6 tiny Qwen2 model, untrained, with the tool call's tags as tokens")
    t = time.monotonic()
    _job(["model", "tiny", "--out", str(run_files.model_dir(sft)), "--recipe", AGENT_SFT_RECIPE, *VLLM_MODEL_ARGS])
    timings["model"] = time.monotonic() - t

    _step("2/6 data: exact products (held-out test split) and a teacher's transcripts, tool calls in half of them")
    t = time.monotonic()
    _job(["data", "arithmetic", "--out", str(run_files.resolve(Path(recipe.data.train_files[0]).parent))])
    timings["data"] = time.monotonic() - t

    _step(f"3/6 SFT on the transcripts with verl's SFT trainer ({sft_steps} steps), then merged")
    t = time.monotonic()
    _job(["train", "--recipe", AGENT_SFT_RECIPE, *sft_args])
    _job(["merge", "--recipe", AGENT_SFT_RECIPE, *sft_args])
    timings["sft"] = time.monotonic() - t
    # The GRPO recipe starts from the merged model, where upstream's RL scripts point (model.path).
    if run_files.model_dir(recipe) != run_files.merged_model_dir(sft, sft_steps):
        print(f"demo: {AGENT_RECIPE}'s model.path is not {AGENT_SFT_RECIPE}'s merged model", file=sys.stderr)
        return 1

    _step(f"4/6 the sandbox: npu-rl sandbox serve on port {port}")
    argv = [
        sys.executable,
        "-m",
        "npu_rl",
        "sandbox",
        "serve",
        "--port",
        str(port),
        "--slots",
        str(recipe.sandbox.slots),
    ]
    print("$ " + " ".join(["npu-rl", *argv[3:]]), flush=True)
    sandbox = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True)
    try:
        first = sandbox.stdout.readline() if sandbox.stdout else ""
        if "serving http://" not in first:
            sandbox.wait(timeout=30)
            print(f"demo: the sandbox did not start (exit {sandbox.returncode})", file=sys.stderr)
            return sandbox.returncode or 1
        print(first.rstrip(), flush=True)

        _step(f"5/6 multi-turn GRPO with verl's tool agent loop on Ray ({steps} steps)")
        t = time.monotonic()
        _job(["train", "--recipe", AGENT_RECIPE, *set_args])
        timings["train"] = time.monotonic() - t
    finally:
        proctree.stop(sandbox, grace=30.0)  # and any jail's process it leaves

    _step("6/6 training health report")
    from .report import build_report  # lazy: numpy, at the last step
    from .report.scalars import load_run  # lazy: numpy, at the last step

    report = build_report(run_files.log_root(recipe), recipe=recipe)
    print(report.to_markdown())
    series = load_run(run_files.log_root(recipe))
    print("\n=== summary ===")
    gains = {}
    for part in ("acc", "tool_calls", "turns"):
        tag = next((k for k in series if k.startswith("val-") and f"/{part}/mean@" in k), None)
        if tag is None:
            continue
        points = dict(zip(series[tag].steps, series[tag].values))
        first, last = min(points), max(points)
        gains[part] = (float(points[first]), float(points[last]), last)
    labels = {"acc": "held-out accuracy", "tool_calls": "tool calls per answer", "turns": "turns per answer"}
    for part, (before, after, at) in gains.items():
        scale, unit = (100.0, " points") if part == "acc" else (1.0, "")
        print(
            f"{labels[part]:<22}: {before * scale:.2f} -> {after * scale:.2f} at step {at} "
            f"({(after - before) * scale:+.2f}{unit})"
        )
    print(f"health report         : {report.html} ({report.status})")
    print("time per stage        : " + ", ".join(f"{k} {v:.0f}s" for k, v in timings.items()))
    print(f"total                 : {time.monotonic() - t_start:.0f}s")
    acc = gains.get("acc")
    return 0 if acc and acc[1] > acc[0] else 1


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m npu_rl.demo", description=__doc__.splitlines()[0])
    p.add_argument("--workdir", type=Path, default=Path("workspace/demo"))
    p.add_argument("--steps", type=int, default=DEMO_STEPS, help="GRPO steps to train")
    p.add_argument("--eval-limit", type=int, default=64, help="held-out problems to evaluate")
    p.add_argument(
        "--warm-start-steps",
        type=int,
        default=DEMO_WARM_START_STEPS,
        help="teacher-forcing steps of the tiny model's warm start (fewer: a quicker, weaker base)",
    )
    p.add_argument("--resume", action="store_true", help="keep earlier checkpoints and logs (resume training)")
    p.add_argument(
        "--rollout",
        choices=("hf", "vllm"),
        default=os.environ.get("DEMO_ROLLOUT", "hf"),
        help="the rollout engine: hf, or vllm (vLLM's CPU backend: the cpu-vllm image, `make image-cpu-vllm`)",
    )
    p.add_argument(
        "--stack",
        default=os.environ.get("STACK") or None,
        help="the stack line (configs/stacks/) to run on; run this from that line's environment (.venv-<line>)",
    )
    p.add_argument(
        "--task",
        choices=("math", "agent"),
        default=os.environ.get("TASK") or "math",
        help="math: the tiny MATH recipe; agent: the tool-calling recipe (tiny_agent_cpu) on its stack line",
    )
    args = p.parse_args(argv)
    if args.task == "agent":
        steps = args.steps if args.steps != DEMO_STEPS else AGENT_STEPS
        return run_agent(args.workdir, steps, fresh=not args.resume)
    return run(
        args.workdir,
        args.steps,
        args.eval_limit,
        fresh=not args.resume,
        warm_start_steps=args.warm_start_steps,
        rollout=args.rollout,
        stack=args.stack,
    )


if __name__ == "__main__":
    raise SystemExit(main())
