"""`npu-rl model tiny|fetch|fp8-cast`: put a model where the recipe expects it."""

from __future__ import annotations

import argparse
from pathlib import Path

from ..model.warmstart import FORMAT_ERROR, SIGN_ERROR, warm_start
from . import options
from .argtypes import output_dir, positive_int, probability


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "model",
        help="build a tiny CPU model or fetch real weights",
        **options.examples(
            "npu-rl model tiny --out models/tiny-qwen2",
            "npu-rl model fetch Qwen/Qwen2.5-1.5B-Instruct --out models/Qwen2.5-1.5B-Instruct",
        ),
    )
    msub = options.subcommands(p, "ACTION")

    t = msub.add_parser(
        "tiny",
        help="random tiny Qwen2 + locally trained BPE tokenizer (no download)",
        **options.examples(
            "npu-rl model tiny --out models/tiny-qwen2   # the model of tiny_math_cpu",
            "npu-rl model tiny --out models/tiny-qwen2-vllm --heads 2 --kv-heads 2   # head size 32, for vLLM on CPU",
        ),
    )
    t.add_argument("--out", type=output_dir, required=True)
    options.add_recipe(t, required=False, default="tiny_math_cpu", help="recipe whose chat template and data to use")
    t.add_argument("--hidden-size", type=positive_int, default=64)
    t.add_argument("--layers", type=positive_int, default=2)
    t.add_argument(
        "--heads",
        type=positive_int,
        default=4,
        help="attention heads (head size: hidden size / heads; vLLM's CPU attention needs 32 or more: --heads 2)",
    )
    t.add_argument("--kv-heads", type=positive_int, default=2, help="key/value heads (a divisor of --heads)")
    t.add_argument("--seed", type=int, default=0)
    t.add_argument(
        "--warm-start-steps",
        type=int,
        default=1000,
        help="teacher-forcing steps on the sample's worked answers (0: leave it random)",
    )
    t.add_argument(
        "--sign-error",
        type=probability,
        default=SIGN_ERROR,
        help=f"how often the warm start's teacher gets the answer's sign wrong (default {SIGN_ERROR})",
    )
    t.add_argument(
        "--format-error",
        type=probability,
        default=FORMAT_ERROR,
        help=f"how often the warm start's teacher leaves the answer unboxed (default {FORMAT_ERROR})",
    )
    t.set_defaults(func=_tiny, parser=t)

    f = msub.add_parser(
        "fetch",
        help="download REPO_ID (or copy a local dir) and apply the recipe's tokenizer config",
        **options.examples(
            "npu-rl model fetch Qwen/Qwen2.5-1.5B-Instruct --out models/Qwen2.5-1.5B-Instruct "
            "--recipe qwen2_5_1_5b_math_a2_1card",
            "npu-rl model fetch /mnt/share/Qwen2.5-1.5B-Instruct --out models/Qwen2.5-1.5B-Instruct",
        ),
    )
    f.add_argument("source", help="hub repo id (e.g. Qwen/Qwen2.5-1.5B-Instruct) or a local directory")
    f.add_argument("--out", type=output_dir, required=True)
    options.add_recipe(f, required=False, help="recipe whose model.tokenizer_config to apply")
    f.set_defaults(func=_fetch)

    c = msub.add_parser(
        "fp8-cast",
        help="cast a DeepSeek-V3/R1 FP8 HF checkpoint to BF16 on the CPU (resumable)",
        **options.examples(
            "npu-rl model fp8-cast --input-fp8-hf-path models/DeepSeek-R1 "
            "--output-bf16-hf-path models/DeepSeek-R1-bf16",
        ),
    )
    # Flag names as DeepSeek's inference/fp8_cast_bf16.py, which this replaces (it needs CUDA and triton).
    c.add_argument("--input-fp8-hf-path", required=True, metavar="DIR", help="the FP8 checkpoint as published")
    c.add_argument(
        "--output-bf16-hf-path",
        required=True,
        metavar="DIR",
        help="where the BF16 checkpoint goes; shards already there are kept (a rerun resumes)",
    )
    c.set_defaults(func=_fp8_cast)


def _tiny(args: argparse.Namespace) -> int:
    from ..data.sample import generate, splits  # lazy: the job
    from ..model.tiny import AGENT_TOKENS, build_tiny_model  # lazy: the job
    from ..model.tokenizer_override import resolve_override  # lazy: the job

    recipe = options.load(args)
    if recipe.sft is not None and args.warm_start_steps > 0:
        # An SFT recipe's model is what its SFT stage starts from: untrained, the format is the stage's to teach.
        print(f"no warm start: {recipe.name} is an SFT recipe, whose run teaches the format (npu-rl train)")
        args.warm_start_steps = 0
    if args.warm_start_steps > 0:
        # The warm start trains: on the line's instruction set (npu_rl.platform.cpu_isa).
        code = options.rerun_under_isa(args, ["model", "tiny"], recipe.stack_line)
        if code is not None:
            return code
    override = resolve_override(recipe.model.tokenizer_config)
    # The agent recipes' models: the tool's tags as tokens (the SFT recipes are the agent recipes' SFT stages).
    agent = recipe.rollout.multi_turn.enabled or recipe.sft is not None
    # Train the BPE on the kind of text it will see: problems, solutions (an agent's transcripts) and the
    # chat template.
    if agent:
        from ..data import arithmetic  # lazy: the job

        conversations = arithmetic.transcripts(arithmetic.problems(seed=0)["train"], seed=args.seed)
        texts = [" ".join(m["content"] for m in c) for c in conversations]
    else:
        texts = [f"{r['problem']} {r['solution']}" for r in generate(512, seed=0)]
    if override is not None:
        texts.append(override.read_text(encoding="utf-8"))
    out = build_tiny_model(
        args.out,
        texts,
        hidden_size=args.hidden_size,
        layers=args.layers,
        heads=args.heads,
        kv_heads=args.kv_heads,
        seed=args.seed,
        chat_template_override=override,
        extra_tokens=AGENT_TOKENS if agent else (),
    )
    if args.warm_start_steps > 0 and agent:
        from ..agent.tool_config import CODE_TOOL_SCHEMA  # lazy: the job
        from ..model.agent_warmstart import warm_start_agent  # lazy: the job

        loss = warm_start_agent(out, conversations, [CODE_TOOL_SCHEMA], steps=args.warm_start_steps, seed=args.seed)
        print(f"warm start: {args.warm_start_steps} steps on the tool transcripts, final loss {loss:.3f}")
    elif args.warm_start_steps > 0:
        # The RL train split: the held-out test split stays unseen until evaluation.
        loss = warm_start(
            out,
            splits()["train"],
            steps=args.warm_start_steps,
            sign_error=args.sign_error,
            format_error=args.format_error,
            seed=args.seed,
        )
        import torch  # lazy: loaded by the warm start already

        kernels = torch.backends.cpu.get_cpu_capability()
        print(f"warm start: {args.warm_start_steps} steps, final loss {loss:.3f}, on torch's {kernels} kernels")
    print(f"tiny model: {out}")
    return 0


def _fp8_cast(args: argparse.Namespace) -> int:
    from ..model.fp8_cast import cast_checkpoint  # lazy: the job

    cast_checkpoint(Path(args.input_fp8_hf_path), Path(args.output_bf16_hf_path))
    return 0


def _fetch(args: argparse.Namespace) -> int:
    from ..model.fetch import fetch_for_recipe  # lazy: the job

    recipe = options.load(args)
    tokenizer_config = recipe.model.tokenizer_config if recipe else None
    fetch_for_recipe(args.source, args.out, tokenizer_config)
    return 0
