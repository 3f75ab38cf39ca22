"""`npu-rl model tiny|fetch`: put a model where the recipe expects it."""

from __future__ import annotations

import argparse

from .argtypes import output_dir, positive_int



def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("model", help="build a tiny CPU model or fetch real weights")
    msub = p.add_subparsers(dest="action", metavar="ACTION")
    msub.required = True

    t = msub.add_parser("tiny", help="random tiny Qwen2 + locally trained BPE tokenizer (no download)")
    t.add_argument("--out", type=output_dir, required=True)
    t.add_argument("--recipe", default="tiny_math_cpu", help="recipe whose chat template and data to use")
    t.add_argument("--hidden-size", type=positive_int, default=64)
    t.add_argument("--layers", type=positive_int, default=2)
    t.add_argument("--seed", type=int, default=0)
    t.add_argument("--warm-start-steps", type=int, default=400,
                   help="teacher-forcing steps on the sample's worked answers (0: leave it random)")
    t.set_defaults(func=_tiny)

    f = msub.add_parser("fetch", help="download REPO_ID (or copy a local dir) and apply the recipe's tokenizer config")
    f.add_argument("source", help="hub repo id (e.g. Qwen/Qwen2.5-1.5B-Instruct) or a local directory")
    f.add_argument("--out", type=output_dir, required=True)
    f.add_argument("--recipe", default=None, help="recipe whose model.tokenizer_config to apply")
    f.set_defaults(func=_fetch)


def _tiny(args: argparse.Namespace) -> int:
    from ..data.sample import generate
    from ..model.tiny import build_tiny_model
    from ..model.tokenizer_override import resolve_override
    from ..recipe import load_recipe

    recipe = load_recipe(args.recipe)
    override = resolve_override(recipe.model.tokenizer_config)
    # Train the BPE on the kind of text it will see: problems, solutions and the chat template.
    texts = [f"{r['problem']} {r['solution']}" for r in generate(512, seed=0)]
    if override is not None:
        texts.append(override.read_text(encoding="utf-8"))
    out = build_tiny_model(args.out, texts, hidden_size=args.hidden_size, layers=args.layers, seed=args.seed,
                           chat_template_override=override)
    if args.warm_start_steps > 0:
        from ..model.warmstart import warm_start

        loss = warm_start(out, generate(256, seed=1), steps=args.warm_start_steps, seed=args.seed)
        print(f"warm start: {args.warm_start_steps} steps, final loss {loss:.3f}")
    print(f"tiny model: {out}")
    return 0


def _fetch(args: argparse.Namespace) -> int:
    from ..model.fetch import fetch_for_recipe
    from ..recipe import load_recipe

    tokenizer_config = load_recipe(args.recipe).model.tokenizer_config if args.recipe else None
    fetch_for_recipe(args.source, args.out, tokenizer_config)
    return 0
