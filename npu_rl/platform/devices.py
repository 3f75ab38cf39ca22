"""NPU device nodes: which ``/dev/davinciN`` exist and how a selection of them is
exposed to the CANN runtime."""

from __future__ import annotations

import re
from pathlib import Path

from ..errors import UserError

_DEVICE = re.compile(r"davinci(\d+)")

# Nodes every NPU process needs besides its /dev/davinciN; the compose renderer
# mounts exactly these, and the doctor checks they are present.
CONTROL_DEVICES = ("davinci_manager", "devmm_svm", "hisi_hdc")

# Host paths a container needs read-only for the driver and npu-smi to work.
HOST_MOUNTS = (
    "/usr/local/Ascend/driver",
    "/usr/local/dcmi",
    "/usr/local/bin/npu-smi",
    "/etc/ascend_install.info",
)


def discover(dev_root: str | Path = "/dev") -> list[int]:
    """Ids of all ``davinciN`` nodes, in numeric order.

    Matches any number of digits: Ray's own detection globs ``davinci?`` and so
    sees only 10 of the 16 devices of an A3 node.
    """
    root = Path(dev_root)
    if not root.is_dir():
        return []
    ids = [int(m.group(1)) for p in root.iterdir() if (m := _DEVICE.fullmatch(p.name))]
    return sorted(ids)


def missing_control_devices(dev_root: str | Path = "/dev") -> list[str]:
    root = Path(dev_root)
    return [name for name in CONTROL_DEVICES if not (root / name).exists()]


def parse_selection(spec: str, available: list[int]) -> list[int]:
    """``"all"``, ``"3"``, ``"0,2"`` or ``"0-3"`` (physical ids) -> sorted ids, all present."""
    spec = spec.strip()
    if spec.lower() == "all":
        return list(available)
    chosen: set[int] = set()
    for part in filter(None, (x.strip() for x in spec.split(","))):
        m = re.fullmatch(r"(\d+)(?:-(\d+))?", part)
        if not m:
            raise UserError(f"NPU selection {spec!r}: {part!r} is not an id or a range like 0-3")
        lo, hi = int(m.group(1)), int(m.group(2) or m.group(1))
        if hi < lo:
            raise UserError(f"NPU selection {spec!r}: range {part!r} runs backwards")
        chosen.update(range(lo, hi + 1))
    absent = sorted(chosen - set(available))
    if absent:
        found = ",".join(map(str, available)) or "none"
        raise UserError(f"NPU selection {spec!r}: /dev/davinci{absent[0]} not found (found: {found})")
    if not chosen:
        raise UserError(f"NPU selection {spec!r} selects no device")
    return sorted(chosen)


def select(available: list[int], needed: int, spec: str | None = None) -> list[int]:
    """The devices a job uses: the first ``needed`` of the selection (default: all found)."""
    pool = parse_selection(spec, available) if spec else list(available)
    if len(pool) < needed:
        found = ",".join(map(str, pool)) or "none"
        raise UserError(
            f"the recipe needs {needed} NPU(s) but only {len(pool)} are available (/dev/davinci ids: {found}); "
            "mount more devices (NPU_DEVICE in compose/.env) or lower resources.devices_per_node"
        )
    return pool[:needed]


def visible_devices_env(selected: list[int], available: list[int]) -> dict[str, str]:
    """``ASCEND_RT_VISIBLE_DEVICES`` for the selected physical ids.

    The CANN runtime numbers the devices it can see 0..n-1 in physical order, so
    inside a container that mounts only /dev/davinci3 that device is logical 0:
    the variable takes each selected device's position among the available ones.
    """
    order = {dev: i for i, dev in enumerate(sorted(available))}
    missing = [d for d in selected if d not in order]
    if missing:
        raise UserError(f"/dev/davinci{missing[0]} is selected but not present")
    return {"ASCEND_RT_VISIBLE_DEVICES": ",".join(str(order[d]) for d in selected)}
