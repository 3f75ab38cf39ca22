"""`npu-rl render compose|k8s|all`: generate deployment files from recipes."""

from __future__ import annotations

import argparse
from pathlib import Path

from .. import defaults
from ..paths import project_root
from . import options


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "render",
        help="render compose / Kubernetes files from recipes",
        **options.examples(
            "npu-rl render compose",
            "npu-rl render k8s --recipe deepseek_r1_671b_a3 --target kuberay --out k8s",
        ),
    )
    rsub = options.subcommands(p, "TARGET")

    c = rsub.add_parser(
        "compose",
        help="render compose/docker-compose.yml",
        **options.examples("npu-rl render compose", "npu-rl render compose --out /tmp/compose"),
    )
    c.add_argument("--out", type=Path, default=None, help="output directory (default: compose/)")
    c.set_defaults(func=_compose)

    k = rsub.add_parser(
        "k8s",
        help="render a Volcano Job or KubeRay RayJob for a recipe",
        **options.examples(
            "npu-rl render k8s --recipe deepseek_r1_671b_a3 --out k8s   # a Volcano Job",
            "npu-rl render k8s --recipe deepseek_r1_671b_a3 --target kuberay --nodes 2 --out /tmp/k8s",
        ),
    )
    options.add_recipe(k)
    k.add_argument(
        "--target",
        choices=defaults.K8S_TARGETS,
        default=defaults.K8S_TARGET,
        help=f"job kind (default {defaults.K8S_TARGET})",
    )
    k.add_argument("--nodes", type=int, default=None, help="override resources.nnodes")
    k.add_argument("--out", type=Path, required=True)
    k.add_argument("--image", default=None, help="pod image (default: <images.registry in versions.yaml>/npu-rl:<tag>)")
    k.add_argument("--queue", default=defaults.K8S_QUEUE, help="Volcano queue")
    k.add_argument("--pvc", default=defaults.K8S_PVC, help="ReadWriteMany claim mounted at /workspace")
    k.add_argument("--shm-size", default=defaults.K8S_SHM_SIZE, help="memory-backed /dev/shm per pod")
    options.add_ray_port(k, "GCS port of the job's Ray head (default: one per job name, 6400-7999)")
    k.add_argument(
        "--ray-token-secret",
        default=None,
        help="Volcano: the Secret holding the job's Ray token under the key 'token' (default <job>-ray-token)",
    )
    k.add_argument(
        "--max-retry", type=int, default=defaults.K8S_MAX_RETRY, help="job restarts on pod failure or eviction"
    )
    k.set_defaults(func=_k8s)

    a = rsub.add_parser(
        "all",
        help="re-render every committed file (compose/ and k8s/)",
        **options.examples("npu-rl render all   # after changing a recipe or configs/versions.yaml"),
    )
    a.set_defaults(func=_all)


def _compose(args: argparse.Namespace) -> int:
    from ..render.compose import render_compose  # lazy: the job

    out = args.out or project_root() / "compose"
    for path in render_compose(out):
        print(f"wrote {path}")
    return 0


def _k8s(args: argparse.Namespace) -> int:
    from ..render.k8s import K8sOptions, render_k8s  # lazy: the job

    recipe = options.load(args)
    k8s = K8sOptions(
        image=args.image,
        queue=args.queue,
        pvc=args.pvc,
        shm_size=args.shm_size,
        max_retry=args.max_retry,
        ray_token_secret=args.ray_token_secret,
        ray_port=args.ray_port,
    )
    for path in render_k8s(recipe, args.target, args.out, nodes=args.nodes, options=k8s):
        print(f"wrote {path}")
    return 0


def _all(args: argparse.Namespace) -> int:
    from ..render.committed import render_all  # lazy: the job

    for path in render_all(project_root()):
        print(f"wrote {path}")
    return 0
