"""`npu-rl eval`: the base model and a trained step on MATH, as one table.

``--backend opencompass`` (NPU images) repeats the recipe's OpenCompass run;
``--backend local`` (CPU, quick checks) generates with transformers over the
validation split and grades with the reward's accuracy.
"""

from __future__ import annotations

import argparse
import json
import shlex
from pathlib import Path

from ..data.math import find_split_file
from ..errors import UserError
from ..recipe.schema import Recipe
from ..run_files import eval_dir
from ..run_files import resolve as _resolve
from . import options


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "eval",
        help="evaluate the base model and a trained step (table: model, step, dataset, metric, score)",
        **options.examples(
            "npu-rl eval --recipe qwen2_5_1_5b_math_a2_1card --step 280",
            "npu-rl eval --recipe tiny_math_cpu --backend local --limit 20",
        ),
    )
    options.add_recipe(p)
    which = p.add_mutually_exclusive_group()
    which.add_argument("--step", type=int, help="evaluate the merged checkpoint of this step (default: newest saved)")
    which.add_argument("--model", type=Path, help="evaluate this Hugging Face model directory instead")
    p.add_argument(
        "--baseline", default=None, help="baseline model directory (default: the recipe's model.path; 'none' to skip)"
    )
    p.add_argument("--backend", choices=["local", "opencompass"], help="default: opencompass on NPU, local on CPU")
    p.add_argument("--out", type=Path, help="output directory (default: <logging.dir>/<project>/<experiment>/eval)")
    p.add_argument("--limit", type=int, help="evaluate only the first N problems")
    p.add_argument(
        "--batch-size", type=int, default=None, help="generation batch size (local default 8, OpenCompass 32)"
    )
    p.add_argument("--dry-run", action="store_true", help="opencompass: write data and configs, print the command")
    p.add_argument(
        "--opencompass",
        metavar="PATH",
        help="opencompass: the command to run (default: $NPU_RL_OPENCOMPASS, else `opencompass` on PATH, "
        "else the checkout's .venv-eval/bin/opencompass from `make eval-venv`)",
    )
    p.add_argument(
        "--max-out-len", type=int, default=None, help="opencompass: max_out_len of the model configs (default 1024)"
    )
    p.set_defaults(func=run, parser=p)


def model_name(recipe: Recipe) -> str:
    """The recipe's table names models like ``qwen2.5-1.5b-instruct`` and ``...-rl-280``."""
    return Path(recipe.model.path).name.lower()


def _chat_template(recipe: Recipe) -> str | None:
    from ..model.tokenizer_override import load_override, resolve_override  # lazy: the job

    override = resolve_override(recipe.model.tokenizer_config)
    return load_override(override).get("chat_template") if override else None


def _models(args: argparse.Namespace, recipe: Recipe):
    """(baseline dir or None, trained dir, trained step), every path checked before any work."""
    from ..eval.trained_model import resolve_trained_model, step_of  # lazy: the job

    if args.model is not None:
        trained = _resolve(args.model)
        _check_model(trained, "--model")
        step = step_of(trained) or 0
    else:
        trained, step = resolve_trained_model(recipe, args.step)
    baseline = None
    if (args.baseline or "").lower() != "none":
        baseline = _resolve(args.baseline or recipe.model.path)
        if not (baseline / "config.json").is_file():
            raise UserError(f"baseline model not found: {baseline} (pass --baseline PATH or --baseline none)")
        _check_model(baseline, "baseline")
    return baseline, trained, step


def _check_model(path: Path, what: str) -> None:
    """A loadable Hugging Face model directory, checked before the evaluation loads anything."""
    from ..model.fetch import check_model_dir  # lazy: the job

    try:
        check_model_dir(path)
        json.loads((path / "config.json").read_text(encoding="utf-8"))
    except UserError as err:
        raise UserError(f"{what}: {err}") from None
    except (ValueError, UnicodeDecodeError) as err:
        raise UserError(f"{what}: {path / 'config.json'} is not valid JSON ({err})") from None


def run(args: argparse.Namespace) -> int:
    recipe = options.load(args)
    if args.limit is not None and args.limit <= 0:
        raise UserError(f"--limit must be positive (got {args.limit})")
    backend = args.backend or ("local" if recipe.resources.platform == "cpu" else "opencompass")
    if backend != "opencompass":
        for flag, value in (
            ("--dry-run", args.dry_run),
            ("--opencompass", args.opencompass),
            ("--max-out-len", args.max_out_len),
        ):
            if value not in (None, False):
                raise UserError(f"{flag} applies to --backend opencompass only")
    if backend == "opencompass" and recipe.data.format != "math-lighteval":
        raise UserError(
            f"OpenCompass's math_gen_a58d9d evaluates MATH; the recipe trains on {recipe.data.format}: "
            "pass --set data.format=math-lighteval --set data.source_dir=<MATH-lighteval directory>"
        )
    baseline, trained, step = _models(args, recipe)
    out = args.out or eval_dir(recipe)
    name = model_name(recipe)
    if backend == "local":
        # Greedy answers flip with the kernels' rounding: scored on the instruction set the run trained on.
        code = options.rerun_under_isa(args, ["eval"], recipe.stack_line)
        if code is not None:
            return code
        table = _run_local(args, recipe, baseline, trained, step, name, out)
    else:
        table = _run_opencompass(args, recipe, baseline, trained, step, name, out)
        if table is None:
            return 0
    md, csv_path = table.write(out)
    print(table.to_markdown(), end="")
    print(f"table: {md} , {csv_path}")
    return 0


def _run_local(args, recipe: Recipe, baseline, trained, step, name, out: Path):
    from ..eval.dataset import load_problems  # lazy: the job
    from ..eval.grading import load_grader  # lazy: the job
    from ..eval.local import evaluate  # lazy: the job
    from ..eval.table import ResultTable  # lazy: the job

    val_files: list[str | Path] = [_resolve(f) for f in recipe.data.val_files]
    load_problems(val_files, args.limit)  # fail on a missing/bad file before loading any model
    grader = load_grader(recipe.reward.function, recipe.reward.name)
    common = dict(
        limit=args.limit,
        max_new_tokens=recipe.data.max_response_length,
        batch_size=args.batch_size or 8,
        chat_template=_chat_template(recipe),
        grader=grader,
    )
    table = ResultTable()
    runs = ([(baseline, name, 0, True)] if baseline else []) + [(trained, f"{name}-rl-{step}", step, False)]
    for model_dir, label, s, is_base in runs:
        result = evaluate(model_dir, val_files, model_label=label, step=s, **common)
        result.write_samples(out / "samples" / f"{label}.jsonl")
        print(f"{label}: {result.correct}/{result.n} correct ({result.accuracy:.2f}%)", flush=True)
        table.extend(result.rows(baseline=is_base))
    return table


def _run_opencompass(args, recipe: Recipe, baseline, trained, step, name, out: Path):
    from ..eval import opencompass as oc  # lazy: the job
    from ..eval.table import ResultTable  # lazy: the job
    from ..launcher.prepare import recipe_source_dir  # lazy: the job

    for flag, value in (("--batch-size", args.batch_size), ("--max-out-len", args.max_out_len)):
        if value is not None and value <= 0:
            raise UserError(f"{flag} must be positive (got {value})")
    if not recipe.data.source_dir:
        raise UserError("recipe data.source_dir is not set: OpenCompass needs the raw MATH-lighteval test split")
    # 'sample' is the bundled MATH-style sample, as for `npu-rl prepare` and `npu-rl data math --from sample`.
    source = recipe_source_dir(recipe.data.source_dir)
    test_file = find_split_file(source, "test") if source.is_dir() else None
    if test_file is None:
        raise UserError(f"no MATH test split (test-*.parquet) under {source} (data.source_dir)")
    # Where OpenCompass is, before any file is written (a dry run only prints the command).
    executable = oc.find_executable(args.opencompass) if args.dry_run else oc.require_executable(args.opencompass)
    rows = oc.read_math_split(test_file)[: args.limit]
    root = out / "opencompass"
    math_json = oc.write_math_json(rows, root / "data")
    entries = ([oc.ModelEntry(f"{name}-hf", baseline, 0, True)] if baseline else []) + [
        oc.ModelEntry(f"{name}-rl-{step}", trained, step)
    ]
    oc.write_model_configs(
        root / "configs",
        entries,
        batch_size=args.batch_size or 32,
        max_out_len=args.max_out_len or 1024,
        # OpenCompass's LocalRunner places tasks on NPUs; on CPU a task must ask for none.
        num_gpus=0 if recipe.resources.platform == "cpu" else 1,
    )
    work_dir = root / "outputs"
    cmd = oc.build_command(
        root / "configs",
        entries,
        work_dir,
        max_num_workers=recipe.resources.devices_per_node,
        executable=executable or "opencompass",
    )
    env = oc.command_env(root / "data")
    print(f"{len(rows)} problems -> {math_json}")
    data_env = f"COMPASS_DATA_CACHE={shlex.quote(env['COMPASS_DATA_CACHE'])}"
    print(f"cd {shlex.quote(str(root))} && {data_env} {shlex.join(cmd)}", flush=True)
    if args.dry_run:
        return None
    earlier = oc.run_dirs(work_dir)
    # OpenCompass writes its task parameters to ./tmp: run it inside our folder.
    oc.run(cmd, env, root / "opencompass.log", cwd=root)
    summary = oc.find_summary(work_dir, exclude=earlier)
    print(f"OpenCompass summary: {summary}")
    return ResultTable(oc.parse_summary(summary, entries))
