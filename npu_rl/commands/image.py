"""`npu-rl image build [--variant a2|a3|cpu|cpu-vllm] [--target runtime|eval] [--tag T]
[--base-image REF | --stand-in] [--stack LINE] [--push]`."""

from __future__ import annotations

import argparse

from ..image.spec import ASCEND_TARGETS, VARIANTS
from ..paths import project_root
from . import options


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "image",
        help="build or push the container images",
        **options.examples("npu-rl image build --variant a2", "npu-rl image build --variant cpu"),
    )
    isub = options.subcommands(p, "ACTION")
    b = isub.add_parser(
        "build",
        help="build an image with the pins from configs/versions.yaml",
        **options.examples(
            "npu-rl image build --variant a2   # npu-rl:<version>-a2, for Atlas A2",
            "npu-rl image build --variant a3 --target eval --tag registry.example.com/npu-rl:a3-eval --push",
        ),
    )
    b.add_argument(
        "--variant",
        choices=VARIANTS,
        default="a2",
        help="Atlas A2, Atlas A3, the CPU image, or the CPU image with vLLM's CPU backend (cpu-vllm)",
    )
    b.add_argument(
        "--target",
        choices=ASCEND_TARGETS,
        default=None,
        help="Ascend stage: runtime (default) or eval (adds OpenCompass)",
    )
    b.add_argument("--tag", default=None, help="image tag (default: npu-rl:<version>-<variant>)")
    b.add_argument("--push", action="store_true", help="push the tag after building")
    b.add_argument("--host", default=None, help="Docker API address (default: DOCKER_HOST or the local socket)")
    b.add_argument(
        "--base-image",
        default=None,
        help="image to build on (default: the pin; for the CPU image, a local stand-in made "
        "with mmdebstrap when python:<version>-slim-bookworm cannot be pulled)",
    )
    b.add_argument(
        "--stand-in",
        action="store_true",
        help="a2/a3: build on a stand-in of the base image made here (its Python layer, no CANN; "
        "tagged ...-standin): it rehearses to the device boundary, it cannot train on an NPU",
    )
    b.add_argument(
        "--stack",
        default=None,
        metavar="LINE",
        help="the stack line (configs/stacks/) whose a2/a3 image to build (default: stacks.default); "
        "tagged npu-rl:<version>-<line>-<variant>",
    )
    b.add_argument("--no-cache", action="store_true", help="build every layer again")
    b.add_argument("--verbose", "-v", action="store_true", help="print every build output line")
    b.set_defaults(func=_build)


def _build(args: argparse.Namespace) -> int:
    from ..cluster import proctree  # lazy: the job
    from ..image.build import build_variant  # lazy: the job

    # A stop ends what the build started (the podman service, mmdebstrap) through their cleanup.
    try:
        with proctree.signals_raise():
            built = build_variant(
                args.variant,
                root=project_root(),
                target=args.target,
                tag=args.tag,
                push=args.push,
                host=args.host,
                nocache=args.no_cache,
                verbose=args.verbose,
                base_image=args.base_image,
                stand_in=args.stand_in,
                stack=args.stack,
            )
    except proctree.Terminated as stop:
        return stop.exit_code
    print(
        f"built {built.tag} on {built.base}: {built.size_bytes / 1e9:.2f} GB in {built.seconds:.0f} s"
        + (" and pushed it" if args.push else "")
    )
    return 0
