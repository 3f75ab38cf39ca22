"""`npu-rl data math|deepscaler --out DIR [--from PATH]`: raw math data -> verl parquet."""

from __future__ import annotations

import argparse
from pathlib import Path

from ..data.deepscaler import TRAIN_RATIO
from ..data.deepscaler import prepare as prepare_deepscaler
from ..data.math import prepare as prepare_math
from . import options
from .argtypes import open_fraction, output_dir


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "data",
        help="prepare training data",
        **options.examples(
            "npu-rl data math --from data/MATH-lighteval --out data/math",
            "npu-rl data deepscaler --from data/DeepScaleR-Preview --out data/deepscaler",
        ),
    )
    dsub = options.subcommands(p, "DATASET")
    m = dsub.add_parser(
        "math",
        help="MATH-lighteval parquet (problem, level, type, solution) -> verl format",
        **options.examples(
            "npu-rl data math --from data/MATH-lighteval --out data/math   # omit --from to load it from the hub",
            "npu-rl data math --from sample --out data/math-sample   # the bundled sample",
        ),
    )
    m.add_argument("--out", type=output_dir, required=True, help="writes OUT/train.parquet and OUT/test.parquet")
    m.add_argument(
        "--from",
        dest="source",
        default=None,
        help="directory with the raw parquet files (offline); 'sample' for the bundled demo sample; "
        "omit to load DigitalLearningGmbH/MATH-lighteval from the hub",
    )
    m.set_defaults(func=_math)
    d = dsub.add_parser(
        "deepscaler",
        help="DeepScaleR-Preview deepscaler.json (problem, answer, solution) -> verl "
        "format, split in file order as cann-recipes-train's DeepSeek-R1 run does",
        **options.examples(
            "npu-rl data deepscaler --from data/DeepScaleR-Preview --out data/deepscaler",
            "npu-rl data deepscaler --from deepscaler.json --out data/deepscaler --train-ratio 0.95",
        ),
    )
    d.add_argument("--out", type=output_dir, required=True, help="writes OUT/train.parquet and OUT/test.parquet")
    d.add_argument(
        "--from",
        dest="source",
        type=Path,
        default=None,
        help="deepscaler.json, or a directory holding it (offline); omit to load "
        "agentica-org/DeepScaleR-Preview-Dataset from the hub",
    )
    d.add_argument(
        "--train-ratio",
        type=open_fraction,
        default=TRAIN_RATIO,
        help=f"share of the file used for training (default {TRAIN_RATIO})",
    )
    d.set_defaults(func=_deepscaler)
    a = dsub.add_parser(
        "arithmetic",
        help="the agent demo's task, generated: exact products for the tool agent loop, and the SFT stage's "
        "transcripts (a teacher who calls the code interpreter half the time)",
        **options.examples("npu-rl data arithmetic --out data/arithmetic"),
    )
    a.add_argument(
        "--out",
        type=output_dir,
        required=True,
        help="writes OUT/{train,test}.parquet (RL) and OUT/{sft,sft_val}.parquet (SFT)",
    )
    a.add_argument("--seed", type=int, default=0)
    a.set_defaults(func=_arithmetic)
    for name, what, writes, example in (
        (
            "dapo-math",
            "DAPO-Math-17k (verl's rows) -> ReTool's training rows",
            "OUT/train.parquet",
            "data/DAPO-Math-17k",
        ),
        ("aime", "AIME 2025 (problem, answer) -> ReTool's validation rows", "OUT/test.parquet", "data/aime_2025"),
        (
            "code-problems",
            "PrimeIntellect verifiable-coding-problems -> the code agent's rows, tests as ground truth",
            "OUT/train.parquet and OUT/validation.parquet (one row in 100)",
            "data/verifiable-coding-problems",
        ),
        (
            "retool-sft",
            "ReTool-SFT (code and interpreter blocks in one answer) -> ReTool's SFT transcripts",
            "OUT/train.parquet (messages with tool calls, tools)",
            "data/ReTool-SFT",
        ),
        (
            "agent-sft",
            "Open-AgentRL-SFT-3K -> the code agent's SFT transcripts (coding trajectories with tool use)",
            "OUT/train.parquet (messages with tool calls, tools)",
            "data/Open-AgentRL-SFT-3K",
        ),
    ):
        c = dsub.add_parser(
            name, help=what, **options.examples(f"npu-rl data {name} --from {example} --out data/{name}")
        )
        c.add_argument("--from", dest="source", type=Path, required=True, help="the download: a file or a directory")
        c.add_argument("--out", type=output_dir, required=True, help=f"writes {writes}")
        c.set_defaults(func=_agent_set, agent_set=name)


def source_path(text: str | None) -> Path | None:
    """A raw-data source as given on the command line: 'sample' for the bundled sample, empty for none."""
    if not text:
        return None
    if text == "sample":
        from ..data.sample import sample_dir  # lazy: the job

        return sample_dir()
    return Path(text)


def _deepscaler(args: argparse.Namespace) -> int:
    prepare_deepscaler(args.out, args.source, train_ratio=args.train_ratio)
    return 0


def _agent_set(args: argparse.Namespace) -> int:
    from ..data import agent_sources, sft_sources  # lazy: pyarrow

    convert = {
        "dapo-math": agent_sources.prepare_dapo_math,
        "aime": agent_sources.prepare_aime,
        "code-problems": agent_sources.prepare_code_problems,
        "retool-sft": sft_sources.prepare_retool_sft,
        "agent-sft": sft_sources.prepare_agent_sft,
    }[args.agent_set]
    convert(args.out, args.source)
    return 0


def _arithmetic(args: argparse.Namespace) -> int:
    from ..data.arithmetic import write  # lazy: pyarrow

    counts = write(args.out, seed=args.seed)
    print(f"arithmetic: {', '.join(f'{k} {v}' for k, v in counts.items())} rows in {args.out}")
    return 0


def _math(args: argparse.Namespace) -> int:
    prepare_math(args.out, source_path(args.source))
    return 0
