"""Reading ``npu-smi info``: one row per NPU chip with its health and HBM use.

The table has two lines per chip: ``NPU  Name | Health | Power ...`` then
``Chip [Phy-ID] | Bus-Id | AICore  Memory-Usage  HBM-Usage``. A2 machines show
one chip per NPU; A3 machines show two chips per NPU with a Phy-ID column, which
is the N of ``/dev/davinciN``.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from dataclasses import dataclass

_NAME_ROW = re.compile(r"(\d+)\s+(\S.*)")
_CHIP_ROW = re.compile(r"(\d+)(?:\s+(\d+))?")
_BUS_ID = re.compile(r"[0-9A-Fa-f]{4}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.\d")
_USAGE = re.compile(r"(\d+)\s*/\s*(\d+)")


@dataclass(frozen=True)
class NpuChip:
    npu: int
    chip: int
    phy_id: int | None
    name: str
    health: str
    bus_id: str
    hbm_used_mb: int
    hbm_total_mb: int

    @property
    def device_id(self) -> int:
        """The N of /dev/davinciN: the Phy-ID where shown (A3), else the NPU id (A2)."""
        return self.phy_id if self.phy_id is not None else self.npu

    @property
    def hbm_free_mb(self) -> int:
        return self.hbm_total_mb - self.hbm_used_mb


def _cells(line: str) -> list[str]:
    return [c.strip() for c in line.strip().strip("|").split("|")]


def parse_info(text: str) -> list[NpuChip]:
    chips: list[NpuChip] = []
    pending: tuple[int, str, str] | None = None
    for line in text.splitlines():
        if not line.startswith("|"):
            continue
        cells = _cells(line)
        if any("Process id" in c for c in cells):
            break  # the per-process table follows; its rows look like chip rows
        if len(cells) < 3:
            continue
        head, second, rest = cells[0], cells[1], " ".join(cells[2:])
        if _BUS_ID.fullmatch(second):
            m = _CHIP_ROW.fullmatch(head)
            usage = _USAGE.findall(rest)
            if pending is None or not m or not usage:
                continue
            npu, name, health = pending
            used, total = usage[-1]  # HBM-Usage is the last "used / total" pair
            phy = int(m.group(2)) if m.group(2) is not None else None
            chips.append(NpuChip(npu, int(m.group(1)), phy, name, health, second, int(used), int(total)))
            continue
        m = _NAME_ROW.fullmatch(head)
        pending = (int(m.group(1)), m.group(2).strip(), second) if m else None
    return chips


def query(timeout: float = 30.0) -> str | None:
    """The output of ``npu-smi info``, or None where the tool is absent or fails."""
    exe = shutil.which("npu-smi")
    if not exe:
        return None
    try:
        proc = subprocess.run([exe, "info"], capture_output=True, text=True, timeout=timeout)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return proc.stdout if proc.returncode == 0 else None
