"""Preflight checks: is this host (or container) ready to run a recipe's job?

``run_checks`` returns one result per check for the doctor's table;
``preflight`` is what jobs call before starting Ray: it raises ``UserError``
with the first failure's one-line fix.
"""

from __future__ import annotations

import os
import shutil
import sys
from dataclasses import dataclass, field
from functools import cached_property
from importlib import metadata
from pathlib import Path
from typing import Callable, Iterable, Literal

from .. import versions
from ..cluster.probe import port_free
from ..errors import UserError
from ..launcher import run_files
from ..recipe.schema import Recipe
from . import cann, devices, npusmi

Status = Literal["ok", "warn", "fail"]
JOBS = ("train", "merge", "eval")

GiB = 1024**3
# Ray keeps its object store in /dev/shm; Docker's default 64 MB makes it fall
# back to disk or fail. The compose file's default shm_size is above the NPU figure.
MIN_SHM = {"npu": 16 * GiB, "cpu": 256 * 1024**2}
# An FSDP checkpoint holds fp32 weights (2x the bf16 files), two Adam moments
# (4x) and an HF copy (1x): about 7x the model's weight files per saved step.
CHECKPOINT_FACTOR = 7
# HCCL opens this many host ports from HCCL_IF_BASE_PORT.
HCCL_PORT_SPAN = 16


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
class _Context:
    recipe: Recipe
    job: str
    host: Host
    ports: tuple[int, ...]

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


def _ok(name: str, detail: str) -> CheckResult:
    return CheckResult(name, "ok", detail)


def _fail(name: str, detail: str, fix: str) -> CheckResult:
    return CheckResult(name, "fail", detail, fix)


def _gib(n: float) -> str:
    return f"{n / GiB:.1f} GiB" if n >= GiB else f"{n / 1024**2:.0f} MiB"


def _image_fix(ctx: _Context) -> str:
    variant = ctx.recipe.resources.platform.removeprefix("npu-")
    return f"rebuild the image with `npu-rl image build --variant {variant}` (versions come from configs/versions.yaml)"


def _stand_in() -> str | None:
    """What a stand-in image lacks (``NPU_RL_STAND_IN``, set by its base), or None on a real one."""
    return os.environ.get(cann.STAND_IN_MARKER) or None


STAND_IN_FIX = ("this image is built on the stand-in base and can only rehearse (`npu-rl train --rehearse`); "
                "build on the Ascend base image to train")


def check_verl(ctx: _Context) -> CheckResult:
    pin = str(versions.get("verl.version"))
    try:
        have = metadata.version("verl")
    except metadata.PackageNotFoundError:
        return _fail("verl", f"not installed (pin {pin})", f"pip install verl=={pin}, or use the npu-rl image")
    if have != pin:
        return _fail("verl", f"{have}, pin is {pin}", f"pip install verl=={pin} (pin in configs/versions.yaml)")
    return _ok("verl", have)


def check_torch_npu(ctx: _Context) -> CheckResult:
    pin = str(versions.get("ascend.torch_npu"))
    try:
        have = metadata.version("torch_npu")
    except metadata.PackageNotFoundError:
        return _fail("torch_npu", f"not installed (pin {pin})", _image_fix(ctx))
    # Ascend publishes post releases (2.5.1.post1) of the pinned torch version.
    if have != pin and not have.startswith(pin + "."):
        return _fail("torch_npu", f"{have}, pin is {pin}", _image_fix(ctx))
    if _stand_in():
        return _fail("torch_npu", f"{have} installed but hidden: without CANN it cannot load", STAND_IN_FIX)
    return _ok("torch_npu", have)


def check_cann(ctx: _Context) -> CheckResult:
    pin = str(versions.get("ascend.cann"))
    have = cann.toolkit_version(ctx.host.ascend_root)
    where = ctx.host.ascend_root / "ascend-toolkit"
    if have is None:
        if _stand_in():
            return _fail("CANN", f"no toolkit under {where}: {_stand_in()}", STAND_IN_FIX)
        return _fail("CANN", f"no toolkit under {where}", _image_fix(ctx))
    if not cann.same_version(have, pin):
        return _fail("CANN", f"{have}, pin is {pin}", _image_fix(ctx))
    return _ok("CANN", have)


def check_driver(ctx: _Context) -> CheckResult:
    have = cann.driver_version(ctx.host.ascend_root)
    if have is None:
        path = ctx.host.ascend_root / "driver"
        return _fail(
            "driver",
            f"no {path}/version.info",
            f"install the Ascend driver on the host and mount {devices.HOST_MOUNTS[0]} read-only into the container",
        )
    return _ok("driver", have)


def check_devices(ctx: _Context) -> CheckResult:
    missing = devices.missing_control_devices(ctx.host.dev_root)
    if missing:
        return _fail(
            "devices",
            f"{ctx.host.dev_root}/{missing[0]} missing",
            "pass " + " ".join(f"--device /dev/{m}" for m in missing) + " (or use compose/docker-compose.yml)",
        )
    try:
        chosen = devices.select(ctx.found, ctx.devices_needed, ctx.host.device_spec)
    except UserError as err:
        return _fail("devices", f"{len(ctx.found)} found, {ctx.devices_needed} needed", str(err))
    ids = ",".join(map(str, ctx.found))
    return _ok("devices", f"{len(ctx.found)} found ({ids}), using {','.join(map(str, chosen))}")


def check_hbm(ctx: _Context) -> CheckResult:
    if ctx.smi is None:
        return CheckResult("HBM", "warn", "npu-smi not available; HBM not checked",
                           f"mount {devices.HOST_MOUNTS[2]} and {devices.HOST_MOUNTS[1]} read-only")
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
            return _fail(
                "HBM",
                f"NPU {dev}: {chip.hbm_free_mb} MB free of {chip.hbm_total_mb} MB",
                f"rollout.gpu_memory_utilization={util} needs {need_mb} MB free on NPU {dev}: stop the processes "
                "`npu-smi info` lists on it, pick other devices (NPU_DEVICE) or lower rollout.gpu_memory_utilization",
            )
        if chip.health != "OK":
            return _fail("HBM", f"NPU {dev} health {chip.health}", f"NPU {dev} is unhealthy: use another device")
        shown.append(f"{dev}: {chip.hbm_free_mb // 1024} GiB")
    if not shown:
        return CheckResult("HBM", "warn", "npu-smi lists none of the selected devices", "")
    return _ok("HBM", "free " + ", ".join(shown))


def check_shm(ctx: _Context) -> CheckResult:
    need = MIN_SHM[ctx.recipe.resources.device]
    try:
        total = ctx.host.disk_usage(ctx.host.shm_path)[0]
    except OSError:
        return _fail("shm", f"{ctx.host.shm_path} missing", "mount a tmpfs at /dev/shm (docker run --shm-size=64g)")
    if total < need:
        # Ray falls back to /tmp for its object store: fatal for NPU-sized batches, only slower on CPU.
        status: Status = "fail" if ctx.npu else "warn"
        return CheckResult("shm", status, f"{ctx.host.shm_path} is {_gib(total)}, Ray wants {_gib(need)}",
                           "give the container more shared memory (docker run --shm-size=64g, compose SHM_SIZE)")
    return _ok("shm", _gib(total))


def _existing_parent(path: Path) -> Path:
    while not path.exists() and path != path.parent:
        path = path.parent
    return path


def _weights_bytes(model_dir: Path) -> int:
    return sum(p.stat().st_size for pat in ("*.safetensors", "*.bin") for p in model_dir.glob(pat))


def check_disk(ctx: _Context) -> CheckResult:
    target = run_files.resolve(ctx.recipe.checkpoint.dir)
    weights = _weights_bytes(run_files.model_dir(ctx.recipe))
    factor = CHECKPOINT_FACTOR if ctx.job == "train" else 2  # merge writes one fp32 HF copy
    need = max(weights * factor, GiB)
    free = ctx.host.disk_usage(_existing_parent(target))[2]
    if free < need:
        return _fail("disk", f"{_gib(free)} free at {target}, a checkpoint needs about {_gib(need)}",
                     "free space there or point checkpoint.dir at a larger volume")
    return _ok("disk", f"{_gib(free)} free at {target}")


def check_model(ctx: _Context) -> CheckResult:
    from ..model.fetch import check_model_dir

    path = run_files.model_dir(ctx.recipe)
    try:
        check_model_dir(path)
    except UserError as err:
        return _fail("model", f"not ready at {path}", str(err))
    return _ok("model", str(path))


def check_data(ctx: _Context) -> CheckResult:
    files = list(ctx.recipe.data.val_files)
    if ctx.job == "train":
        files = list(ctx.recipe.data.train_files) + files
    for f in files:
        path = run_files.resolve(f)
        if not path.is_file():
            return _fail("data", f"{path} missing", f"run `npu-rl prepare --recipe {ctx.recipe.name}`")
    return _ok("data", f"{len(files)} file(s)")


def check_checkpoints(ctx: _Context) -> CheckResult:
    steps = run_files.saved_steps(ctx.recipe)
    root = run_files.checkpoint_root(ctx.recipe)
    if not steps:
        damaged = "".join(f"; global_step_{s} is incomplete: {p}" for s, p in run_files.damaged_steps(ctx.recipe))
        return _fail("checkpoints", f"none under {root}{damaged}",
                     f"train first: `npu-rl train --recipe {ctx.recipe.name}`")
    return _ok("checkpoints", f"steps {', '.join(map(str, steps))}")


def required_ports(ctx: _Context) -> list[int]:
    ports = list(ctx.ports)
    base = ctx.recipe.env.get("HCCL_IF_BASE_PORT")
    if ctx.npu and ctx.job == "train" and base and base.isdigit():
        ports += range(int(base), int(base) + HCCL_PORT_SPAN)
    return ports


def check_ports(ctx: _Context) -> CheckResult:
    ports = required_ports(ctx)
    busy = [p for p in ports if not port_free(p)]
    if busy:
        return _fail("ports", f"port {busy[0]} in use",
                     f"stop the process listening on {busy[0]} (ss -ltnp) or change the port in the recipe env")
    return _ok("ports", f"{len(ports)} free" if ports else "none needed")


Check = Callable[[_Context], CheckResult]
# Which checks a job runs; the NPU-only ones are skipped for platform cpu.
JOB_CHECKS: dict[str, list[Check]] = {
    "train": [check_verl, check_torch_npu, check_cann, check_driver, check_devices, check_hbm, check_shm,
              check_model, check_data, check_disk, check_ports],
    "eval": [check_verl, check_torch_npu, check_cann, check_driver, check_devices, check_hbm, check_model,
             check_data],
    "merge": [check_verl, check_checkpoints, check_disk],
}
NPU_ONLY = {check_torch_npu, check_cann, check_driver, check_devices, check_hbm}


def run_checks(
    recipe: Recipe, for_job: str = "train", *, host: Host | None = None, ports: Iterable[int] = ()
) -> list[CheckResult]:
    if for_job not in JOB_CHECKS:
        raise ValueError(f"unknown job {for_job!r} (expected one of {', '.join(JOBS)})")
    ctx = _Context(recipe, for_job, host or Host(), tuple(ports))
    return [check(ctx) for check in JOB_CHECKS[for_job] if ctx.npu or check not in NPU_ONLY]


def _warn(message: str) -> None:
    print(f"npu-rl: warning: {message}", file=sys.stderr)


def preflight(
    recipe: Recipe,
    *,
    for_job: str,
    host: Host | None = None,
    ports: Iterable[int] = (),
    warn: Callable[[str], None] = _warn,
) -> None:
    """Raise ``UserError`` naming the first failed check and its fix; warnings go to ``warn``."""
    for result in run_checks(recipe, for_job, host=host, ports=ports):
        if result.status == "fail":
            raise UserError(f"{result.name}: {result.detail}; fix: {result.fix}")
        if result.status == "warn":
            warn(f"{result.name}: {result.detail}")
