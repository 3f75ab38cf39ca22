"""``compose/docker-compose.yml`` and ``compose/.env.example`` from the recipes and pins.

The variables both files use are declared once here (``VARIABLES``), so every
``${VAR}`` in the compose file has a default and a line in ``.env.example``.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from jinja2 import Environment

from .. import run_files, versions
from ..dashboards import PORTS as DASHBOARD_PORTS
from ..defaults import DEMO_STEPS, DEMO_WARM_START_STEPS
from ..image.spec import build_args, spec
from ..paths import workspace
from ..platform.devices import CONTROL_DEVICES, HOST_MOUNTS
from ..recipe import load_recipe
from ..recipe.schema import Recipe
from .templating import environment

# The recipe `docker compose up train-qwen` runs: one Atlas A2 NPU.
TRAIN_RECIPE = "qwen2_5_1_5b_math_a2_1card"
# The same run on another stack line, in compose/docker-compose.<line>.yml: its training, rehearsal,
# merge and dashboard services in that line's image (the eval and CPU services are the default line's).
LINE_TRAIN_RECIPES = {"cann9.1-verl0.9": "qwen2_5_1_5b_math_a2_1card_verl09"}
# What a line's file leaves to the default one.
DEFAULT_LINE_ONLY = ("NPU_RL_EVAL_IMAGE", "NPU_RL_CPU_IMAGE", "NPU_RL_CPU_VLLM_IMAGE", "CPU_SHM_SIZE", "DEMO_STEPS",
                     "DEMO_WARM_START_STEPS", "SANDBOX_BIND", "SANDBOX_PORT", "SANDBOX_SLOTS")  # fmt: skip
CONTAINER_WORKSPACE = PurePosixPath("/workspace")
# Ray's object store lives in /dev/shm; npu_rl.platform.doctor.MIN_SHM is the floor.
DEFAULT_SHM = "64g"
CPU_SHM = "2g"


@dataclass(frozen=True)
class Var:
    name: str
    default: str
    doc: str

    @property
    def ref(self) -> str:
        return f"${{{self.name}:-{self.default}}}"


def variables(recipe: Recipe, line: str | None = None) -> list[Var]:
    model_dir = _in_container(run_files.model_dir(recipe))
    fallback = "download from the hub"
    if recipe.data.source_dir:
        fallback = f"{_in_container(run_files.resolve(recipe.data.source_dir))} if it exists, else {fallback}"
    build = f"npu-rl image build --variant a2{f' --stack {line}' if line else ''}"
    out = [
        Var("NPU_RL_IMAGE", spec("a2", line=line).tag, f"Ascend image of every NPU service (`{build}`)"),
        Var("NPU_RL_EVAL_IMAGE", spec("a2", "eval").tag, "Ascend image with OpenCompass, for the eval service"),
        Var("NPU_RL_CPU_IMAGE", spec("cpu").tag, "CPU image of the cpu-demo service"),
        Var("NPU_RL_CPU_VLLM_IMAGE", spec("cpu-vllm").tag, "CPU image with vLLM's CPU backend (cpu-vllm-demo)"),
        Var(
            "WORKSPACE_DIR",
            "../workspace",
            "Host directory mounted at /workspace: models, data, checkpoints and logs (relative to compose/)",
        ),
        Var("NPU_DEVICE", "0", "Physical id N of the /dev/davinciN that NPU services get (see `npu-smi info`)"),
        Var("SHM_SIZE", DEFAULT_SHM, "Shared memory of NPU services (Ray's object store; `npu-rl doctor` checks it)"),
        Var("CPU_SHM_SIZE", CPU_SHM, "Shared memory of the cpu-demo and cpu-vllm-demo services"),
        Var("DEMO_STEPS", str(DEMO_STEPS), "GRPO steps of the cpu-demo and cpu-vllm-demo services"),
        Var(
            "DEMO_WARM_START_STEPS", str(DEMO_WARM_START_STEPS), "warm-start steps of the cpu-demo service's tiny model"
        ),
        Var(
            "MODEL_SOURCE",
            recipe.model.hub_id or "",
            f"What `prepare` fetches into {model_dir} when it is missing: a hub id or a local directory under "
            "/workspace (empty: the recipe's model.hub_id)",
        ),
        Var(
            "MATH_SOURCE",
            "",
            f"Directory under /workspace with the raw MATH-lighteval parquet files (empty: {fallback})",
        ),
        Var("DASHBOARD_BIND", "127.0.0.1", "Host address of the TensorBoard, SwanLab and notebook ports"),
        Var("TENSORBOARD_PORT", str(DASHBOARD_PORTS["tensorboard"]), "Host port of TensorBoard"),
        Var("SWANLAB_PORT", str(DASHBOARD_PORTS["swanlab"]), "Host port of the SwanLab dashboard"),
        Var("NOTEBOOK_PORT", "8888", "Host port of JupyterLab (notebook and cpu-notebook)"),
        Var("SANDBOX_BIND", "127.0.0.1", "Host address of the code sandbox's port (0.0.0.0: reachable from the nodes)"),
        Var("SANDBOX_PORT", "8080", "Host port of the code sandbox's SandboxFusion API (/run_code)"),
        Var("SANDBOX_SLOTS", "4", "Executions the code sandbox runs at once"),
    ]
    return [v for v in out if not (line and v.name in DEFAULT_LINE_ONLY)]


# Passed into containers only when set on the host or in compose/.env.
PASSTHROUGH = [
    Var("HF_ENDPOINT", "https://hf-mirror.com", "Hugging Face mirror for `prepare` (e.g. in mainland China)"),
    Var("HF_TOKEN", "hf_...", "Hugging Face token, for gated models"),
    Var("JUPYTER_TOKEN", "choose-a-token", "JupyterLab login token (default: a random one, printed in the log)"),
]


def _in_container(host_path: Path) -> PurePosixPath:
    """A workspace path as the containers see it (the workspace volume is /workspace)."""
    return CONTAINER_WORKSPACE / host_path.relative_to(workspace()).as_posix()


def _quote(value: object) -> str:
    return '"' + str(value).replace("\\", "\\\\").replace('"', '\\"') + '"'


def _environment() -> Environment:
    return environment("templates/compose", _quote)


def context(line: str | None = None) -> dict:
    recipe = load_recipe(LINE_TRAIN_RECIPES[line] if line else TRAIN_RECIPE)
    vars_ = variables(recipe, line)
    return {
        "recipe": recipe,
        "line": line,
        "var": {v.name: v.ref for v in vars_},
        "variables": vars_,
        "passthrough": PASSTHROUGH,
        "ascend_args": build_args("a2", versions.load(stack=line)),
        "cpu_args": build_args("cpu"),
        "cpu_vllm_args": build_args("cpu-vllm"),
        "control_devices": [f"/dev/{d}" for d in CONTROL_DEVICES],
        "host_mounts": HOST_MOUNTS,
        "run_dir": _in_container(run_files.log_root(recipe)),
    }


def line_file(line: str) -> str:
    return f"docker-compose.{line}.yml"


def render_compose(out_dir: Path) -> list[Path]:
    """Write docker-compose.yml and .env.example into ``out_dir``, and each other stack line's
    docker-compose.<line>.yml (which reads the same .env); returns their paths."""
    env = _environment()
    out_dir.mkdir(parents=True, exist_ok=True)
    ctx = context()
    files = [("docker-compose.yml.j2", "docker-compose.yml", ctx), ("env.example.j2", ".env.example", ctx)]
    files += [("docker-compose.yml.j2", line_file(line), context(line)) for line in LINE_TRAIN_RECIPES]
    written = []
    for template, name, values in files:
        path = out_dir / name
        path.write_text(env.get_template(template).render(**values), encoding="utf-8")
        written.append(path)
    return written
