"""Kubernetes manifests for a multi-node recipe: a Volcano ``Job`` or a KubeRay ``RayJob``.

Each file holds the recipe as a ConfigMap (mounted at /etc/npu-rl/recipe.yaml) and one gang-scheduled job of
``nnodes`` pods, each requesting the recipe's NPUs per node on nodes labelled with the platform's
``accelerator-type``; pods take the image's entrypoint (it sources CANN's environment): ``args`` start with ``npu-rl``.

Volcano (batch.volcano.sh/v1alpha1): the ``head`` task runs
``npu-rl ray head --nodes N --devices D -- npu-rl train --recipe ... --prepare``, the ``worker`` task
``npu-rl ray worker --devices D`` (head host from the ``svc`` plugin); the head exits with the training's exit
code, ``TaskCompleted`` on the head completes the job, and a failed or evicted pod restarts the whole job
(resuming from the last checkpoint) up to ``maxRetry`` times. KubeRay (ray.io/v1): ``rayStartParams`` register
the NPUs; with ``ray.io/overwrite-container-cmd`` the pods run ``npu-rl ray head|worker``, which export the
HCCL/Gloo interface variables, then run the operator's generated ``ray start``; the RayJob entrypoint waits for
all NPUs and trains, and Volcano gang-schedules the cluster (``ray.io/scheduler-name: volcano``).

An SFT recipe (``sft:``) trains under torchrun on one node, without Ray: its Volcano Job is one ``trainer`` pod
running ``npu-rl train --prepare --merge STEP``, which leaves the merged model its RL recipe starts from; a
RayJob's cluster would sit unused, so KubeRay is refused.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, field, replace
from pathlib import Path, PurePosixPath

import yaml
from jinja2 import Environment

from .. import defaults, exit_codes, run_files, versions
from ..cluster.raynode import logical_cpus, registered_resources
from ..errors import UserError
from ..image.spec import spec as image_spec
from ..paths import recipes_dir
from ..platform.devices import HOST_MOUNTS
from ..recipe import load_recipe, parse_recipe
from ..recipe.schema import Recipe
from .templating import environment

TARGETS = defaults.K8S_TARGETS
RECIPE_DIR = PurePosixPath("/etc/npu-rl")
RECIPE_FILE = "recipe.yaml"
WORKSPACE = PurePosixPath("/workspace")  # NPU_RL_WORKSPACE of the image
# Below the ports a node picks for itself (20000 up to the kernel's ephemeral range) and clear of Ray's
# fixed defaults (8265 dashboard, 10001 client server).
JOB_PORTS = (6400, 7999)
RAY_TOKEN_DIR = PurePosixPath("/etc/npu-rl-ray")
RAY_TOKEN_KEY = "token"
# HCCL reads the NPU NICs' addresses from here when it talks across nodes.
K8S_HOST_MOUNTS = (*HOST_MOUNTS, "/etc/hccn.conf")


@dataclass(frozen=True)
class Accelerator:
    resource: str | None  # extended resource of the Ascend device plugin (None: CPU pods)
    node_type: str | None  # value of the node label `accelerator-type`
    max_devices: int  # NPUs on one node (CPU: worker processes)
    image_variant: str
    host_mounts: tuple[str, ...] = K8S_HOST_MOUNTS


ACCELERATORS = {
    "npu-a2": Accelerator("huawei.com/Ascend910", "module-910b-8", 8, "a2"),
    "npu-a3": Accelerator("huawei.com/Ascend910", "module-a3-16", 16, "a3"),
    # CPU pods (smoke tests of the multi-node path, and the suite's 2-node CPU run): no device
    # plugin, no node label, no Ascend host files; `--devices` counts worker processes.
    "cpu": Accelerator(None, None, 64, "cpu", host_mounts=()),
}


@dataclass(frozen=True)
class K8sOptions:
    image: str | None = None  # default: <images.registry>/<tag of the platform's image>
    queue: str = defaults.K8S_QUEUE
    pvc: str = defaults.K8S_PVC
    shm_size: str = defaults.K8S_SHM_SIZE
    max_retry: int = defaults.K8S_MAX_RETRY
    wait_timeout_s: int = defaults.NODES_TIMEOUT_S
    ray_port: int | None = None  # default: job_port(job name)
    ray_token_secret: str | None = None  # default: <job name>-ray-token
    extra_labels: dict[str, str] = field(default_factory=dict)


def job_name(recipe: Recipe) -> str:
    """A DNS-1035 label (it names the Volcano Service too): lower case, dashes, at most 63 characters."""
    slug = re.sub(r"[^a-z0-9]+", "-", recipe.name.lower()).strip("-")
    name = f"npu-rl-{slug}"[:63].rstrip("-")
    return name


def job_port(name: str) -> int:
    """The GCS port of a job's head: one per job name, so two jobs whose hostNetwork heads share a node do
    not both take Ray's 6379 (every other Ray port a node picks free at start: npu_rl.cluster.rayports)."""
    digest = int.from_bytes(hashlib.sha256(name.encode()).digest()[:4], "big")
    return JOB_PORTS[0] + digest % (JOB_PORTS[1] - JOB_PORTS[0] + 1)


def image_variant(recipe: Recipe) -> str:
    """The image a recipe's pods run: the platform's, except a CPU recipe that samples with vLLM, whose
    engine only the cpu-vllm image has (the cpu image has no vLLM)."""
    variant = ACCELERATORS[recipe.resources.platform].image_variant
    if variant == "cpu" and recipe.rollout.name == "vllm":
        return "cpu-vllm"
    return variant


def image_ref(variant: str, line: str | None = None) -> str:
    """An image variant as manifests name it: in the registry of configs/versions.yaml; another stack line's
    tag names its line (npu-rl:<version>-<line>-<variant>)."""
    registry = str(versions.get("images.registry")).rstrip("/")
    spec = image_spec(variant)
    if versions.other_line(line):
        spec = replace(spec, line=line)
    return f"{registry}/{spec.tag}"


def default_image(recipe: Recipe) -> str:
    """The image of the recipe's platform and stack line: a recipe of another line than the default one runs
    in that line's image, whose verl its patches and keys are for (in another, its preflight refuses it)."""
    return image_ref(image_variant(recipe), recipe.stack_line)


def _with_nodes(recipe: Recipe, nodes: int | None) -> Recipe:
    if nodes is None or nodes == recipe.resources.nnodes:
        return recipe
    if nodes < 1:
        raise UserError(f"--nodes must be >= 1 (got {nodes})")
    data = recipe.model_dump(mode="json", exclude_unset=True)
    data["resources"]["nnodes"] = nodes
    # Re-validated: batch sizes must still divide over the new device count.
    return parse_recipe(data, f"recipe {recipe.name} with --nodes {nodes}")


# Atlas A3 node labels per cluster type (`accelerator-type`, set by MindCluster's node labelling):
# A3 box servers, Atlas 900 A3 SuperPoD and Atlas 9000 A3 SuperPoD nodes. The default is the
# SuperPoD 900: 16 NPU dies per node, the hardware the DeepSeek recipe documents.
A3_CLUSTERS = {
    "box": replace(ACCELERATORS["npu-a3"], node_type="module-a3-16"),
    "superpod-900": replace(ACCELERATORS["npu-a3"], node_type="module-a3-16-super-pod"),
    "superpod-9000": replace(ACCELERATORS["npu-a3"], node_type="module-a3-8-super-pod", max_devices=8),
}
A3_DEFAULT_CLUSTER = "superpod-900"
# MindCluster's Volcano examples label Ascend 910 training jobs and their pods with this (its
# scheduler plugin selects the job's topology rules by it).
RING_CONTROLLER = {"ring-controller.atlas": "ascend-910b"}


def _accelerator(recipe: Recipe) -> Accelerator:
    if recipe.resources.platform == "npu-a3":
        a3 = A3_CLUSTERS[recipe.resources.cluster or A3_DEFAULT_CLUSTER]
        if recipe.resources.devices_per_node > a3.max_devices:
            raise UserError(
                f"recipe {recipe.name}: resources.devices_per_node {recipe.resources.devices_per_node} "
                f"exceeds the {a3.max_devices} NPUs of a {recipe.resources.cluster} node"
            )
        return a3
    acc = ACCELERATORS.get(recipe.resources.platform)
    if acc is None:
        raise UserError(
            f"recipe {recipe.name}: Kubernetes manifests are for platforms "
            f"{', '.join(ACCELERATORS)}, not {recipe.resources.platform!r}"
        )
    if recipe.resources.devices_per_node > acc.max_devices:
        raise UserError(
            f"recipe {recipe.name}: resources.devices_per_node {recipe.resources.devices_per_node} "
            f"exceeds the {acc.max_devices} NPUs of a {recipe.resources.platform} node"
        )
    return acc


@dataclass(frozen=True)
class NextStage:
    recipe: str  # the RL recipe whose model.path is the SFT recipe's merged checkpoint
    step: int  # that checkpoint's global step


def next_stage(sft: Recipe) -> NextStage | None:
    """The project's recipe that starts from ``sft``'s merged checkpoint (None: none in configs/recipes does).
    Its step need not be the SFT run's last: the code agent's RL stage starts from step 50 of 20 epochs; a step
    the run would not keep is refused here, not after the whole run in the pod."""
    for path in sorted(recipes_dir().glob("*.yaml")):
        try:
            rl = load_recipe(path)
        except UserError:
            continue  # a broken recipe of the user's is not this one's next stage
        model = run_files.model_dir(rl)
        step = re.fullmatch(r"global_step_(\d+)", model.parent.name)
        if step and model == run_files.merged_model_dir(sft, int(step.group(1))):
            stage = NextStage(rl.name, int(step.group(1)))
            _check_kept(sft, stage)
            return stage
    return None


def _check_kept(sft: Recipe, stage: NextStage) -> None:
    ckpt, last = sft.checkpoint, sft.algorithm.total_training_steps
    saved = stage.step == last or (ckpt.save_freq > 0 and stage.step % ckpt.save_freq == 0)
    if not saved or ckpt.max_to_keep is not None:
        why = "rotation may remove it" if saved else f"checkpoint.save_freq {ckpt.save_freq} never saves it"
        raise UserError(
            f"recipe {stage.recipe} starts from global_step_{stage.step} of {sft.name}, which its run would not "
            f"keep ({why}): the pod's merge would fail after the whole run"
        )


def _recipe_yaml(recipe: Recipe) -> str:
    # The fields the recipe sets, as written: defaults come from the npu-rl in the image.
    return yaml.safe_dump(recipe.model_dump(mode="json", exclude_unset=True), sort_keys=False, allow_unicode=True)


def context(recipe: Recipe, target: str, opts: K8sOptions) -> dict:
    acc = _accelerator(recipe)
    res = recipe.resources
    name = job_name(recipe)
    opts = replace(opts, ray_port=opts.ray_port or job_port(name))
    devices = str(res.devices_per_node)
    recipe_path = str(RECIPE_DIR / RECIPE_FILE)
    # --prepare: the model, data and (megatron) converted weights land on the shared volume once;
    # a restarted job finds them there and skips straight to training.
    train = ["npu-rl", "train", "--recipe", recipe_path, "--prepare"]
    sandbox = _sandbox(recipe, name, opts)
    if sandbox is not None:
        train += ["--set", f"sandbox.url={sandbox['url']}"]
    wait = [
        "npu-rl",
        "ray",
        "wait",
        "--nodes",
        str(res.nnodes),
        "--devices",
        devices,
        "--timeout",
        str(opts.wait_timeout_s),
    ]
    # CPU pods of a verl 0.9 recipe register the logical CPUs its workers' bundles and actors take, which a
    # small host lacks (npu_rl.cluster.raynode.logical_cpus); NPU hosts and verl 0.6.1's CPU pods count their own.
    release = versions.line_verl(recipe.stack_line)
    cpus: list[str] = []
    if res.platform == "cpu" and release != versions.VERL_0_6_1:
        cpus = ["--cpus", str(logical_cpus(res.devices_per_node, release))]
    sft = recipe.sft is not None
    stage = next_stage(recipe) if sft else None

    def job_codes(codes: tuple[exit_codes.Exit, ...]) -> list[exit_codes.Exit]:
        return [c for c in codes if not sft or c in exit_codes.SFT]

    if sft:
        # No Ray: the pod trains under torchrun, then merges the step the RL recipe reads (newest if none does).
        head_args = [*train, "--merge", *([str(stage.step)] if stage else [])]
        worker_args: list[str] = []
    elif target == "volcano":
        head_args = [
            "npu-rl",
            "ray",
            "head",
            "--nodes",
            str(res.nnodes),
            "--devices",
            devices,
            "--port",
            str(opts.ray_port),
            "--wait-timeout",
            str(opts.wait_timeout_s),
            *cpus,
            "--",
            *train,
        ]
        worker_args = ["npu-rl", "ray", "worker", "--devices", devices, "--port", str(opts.ray_port), *cpus]
    else:
        head_args = ["npu-rl", "ray", "head", "--devices", devices, *cpus]
        worker_args = ["npu-rl", "ray", "worker", "--devices", devices, *cpus]
    labels = {
        "app.kubernetes.io/name": "npu-rl",
        "app.kubernetes.io/instance": name,
        "npu-rl/recipe": recipe.name,
        **(RING_CONTROLLER if acc.resource else {}),
        **opts.extra_labels,
    }
    return {
        "name": name,
        "configmap_name": f"{name}-recipe",
        "labels": labels,
        "recipe": recipe,
        "recipe_yaml": _recipe_yaml(recipe),
        "recipe_dir": str(RECIPE_DIR),
        "recipe_file": RECIPE_FILE,
        "nnodes": res.nnodes,
        "workers": res.nnodes - 1,
        "devices": res.devices_per_node,
        "accelerator": acc,
        "image": opts.image or default_image(recipe),
        "opts": opts,
        "workspace": str(WORKSPACE),
        "host_mounts": [{"name": f"host-{i}", "path": p} for i, p in enumerate(acc.host_mounts)],
        "env": {**recipe.env},
        "sft": sft,
        "next_stage": stage,
        "head_task": "trainer" if sft else "head",
        "head_args": head_args,
        "worker_args": worker_args,
        "entrypoint": " ".join(wait) + " && " + " ".join(train),
        # Volcano's job policies match the pod's exit code (npu_rl.exit_codes, docs/clusters.md "When a run fails").
        "restart_codes": [{"code": int(c), "name": c.name} for c in job_codes(exit_codes.RESTART)],
        "abort_codes": [
            {"code": int(c), "name": c.name, "why": exit_codes.ABORT_WHY[c]} for c in job_codes(exit_codes.ABORT)
        ],
        "ray_version": versions.get("common.ray"),
        # Volcano: the job's Ray token from a Secret the user makes (npu_rl.cluster.rayauth), mounted as a
        # file; KubeRay makes and injects its own (authOptions).
        "ray_token": (
            {
                "secret": opts.ray_token_secret or f"{name}-ray-token",
                "key": RAY_TOKEN_KEY,
                "dir": str(RAY_TOKEN_DIR),
                "path": str(RAY_TOKEN_DIR / RAY_TOKEN_KEY),
            }
            if target == "volcano" and not sft
            else None
        ),
        "sandbox": sandbox,
        # rayStartParams values are pasted into a shell command line, hence the inner quotes.
        "npu_resources": '"' + json.dumps(registered_resources(res.devices_per_node)).replace('"', '\\"') + '"',
    }


def _sandbox(recipe: Recipe, name: str, opts: K8sOptions) -> dict | None:
    """The job's sandbox pods (recipe.sandbox), in the CPU image (it has bubblewrap and the code's numpy and
    sympy), or None where the recipe runs no code or names a sandbox of its own (``sandbox.url``)."""
    sb = recipe.sandbox
    if not sb.enabled or sb.url is not None:
        return None
    service = f"{name[: 63 - len('-sandbox')]}-sandbox"
    # A CPU per slot and one for the service; each slot's memory limit and the service's own half GiB.
    return {
        "name": service,
        # The job's labels but the NPU topology's (MindCluster's ring-controller): these pods hold no NPU.
        "labels": {
            "app.kubernetes.io/name": "npu-rl",
            "app.kubernetes.io/instance": name,
            "npu-rl/recipe": recipe.name,
            **opts.extra_labels,
        },
        "url": f"http://{service}:{sb.port}/run_code",
        "port": sb.port,
        "replicas": sb.replicas,
        "image": image_ref("cpu"),
        "cpu": str(sb.slots + 1),
        "memory": f"{sb.slots * sb.memory_mb + 512}Mi",
        # The slots' working directories and /tmp are tmpfs (`--disk-mb`, 64 MiB each): in memory, not here.
        "disk": "1Gi",
        "args": [
            "npu-rl",
            "sandbox",
            "serve",
            "--host",
            "0.0.0.0",
            "--port",
            str(sb.port),
            "--slots",
            str(sb.slots),
            "--memory-mb",
            str(sb.memory_mb),
            "--max-memory-mb",
            str(sb.memory_mb),
        ],
    }


def _environment() -> Environment:
    # JSON scalars are valid YAML and need no escaping rules of their own.
    return environment("templates/k8s", lambda v: json.dumps(v, ensure_ascii=False))


def render_text(recipe: Recipe, target: str, nodes: int | None = None, options: K8sOptions | None = None) -> str:
    if target not in TARGETS:
        raise UserError(f"unknown Kubernetes target {target!r} (expected one of {', '.join(TARGETS)})")
    if target == "kuberay" and recipe.sft is not None:
        raise UserError(
            f"recipe {recipe.name} is an SFT recipe: verl's SFT trainer runs under torchrun without Ray, so a "
            "RayJob's Ray cluster would hold the NPUs unused; render it with --target volcano (this project's "
            "KubeRay clusters are scheduled by Volcano too)"
        )
    recipe = _with_nodes(recipe, nodes)
    return _environment().get_template(f"{target}.yaml.j2").render(**context(recipe, target, options or K8sOptions()))


def output_name(recipe: Recipe, target: str) -> str:
    return f"{recipe.name}.{target}.yaml"


def render_k8s(
    recipe: Recipe, target: str, out_dir: Path, nodes: int | None = None, options: K8sOptions | None = None
) -> list[Path]:
    """Write ``<recipe>.<target>.yaml`` (ConfigMap + Job/RayJob) into ``out_dir``; returns its path."""
    text = render_text(recipe, target, nodes, options)
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / output_name(recipe, target)
    path.write_text(text, encoding="utf-8")
    return [path]


# The renderings committed under k8s/ (recipe, target, nodes override); `npu-rl render all`
# rewrites them and tests/k8s compares them with fresh renderings.
COMMITTED: list[tuple[str, str, int | None]] = [
    ("qwen2_5_1_5b_math_a2_4card", "volcano", None),
    ("qwen2_5_1_5b_math_a2_4card", "kuberay", None),
    ("deepseek_r1_671b_a3", "volcano", None),
    ("deepseek_r1_671b_a3", "kuberay", None),
    ("qwen3_32b_grpo_a3", "volcano", None),
    ("qwen3_32b_grpo_a3", "kuberay", None),
    ("qwen3_235b_a22b_grpo_a3", "volcano", None),
    ("qwen3_235b_a22b_grpo_a3", "kuberay", None),
    # The agent recipes: their sandbox pods beside the job (docs/agents.md, docs/sandbox.md).
    ("qwen3_4b_retool_dapo_a3", "volcano", None),
    ("qwen3_4b_retool_dapo_a3", "kuberay", None),
    ("qwen3_1_7b_code_toolcall_a2", "volcano", None),
    ("qwen3_1_7b_code_toolcall_a2", "kuberay", None),
    # Their SFT stages: one trainer pod, no Ray (KubeRay refuses them).
    ("qwen3_4b_retool_sft_a3", "volcano", None),
    ("qwen3_1_7b_code_toolcall_sft_a2", "volcano", None),
]


def render_committed(out_dir: Path) -> list[Path]:
    written: list[Path] = []
    for recipe_name, target, nodes in COMMITTED:
        written += render_k8s(load_recipe(recipe_name), target, out_dir, nodes=nodes)
    return written
