"""Reading the raw stream of a verl run as it reaches the driver.

Ray prefixes what an actor prints with its name and pid (``(TaskRunner pid=12) ...``, in colour on a
terminal) and may append ``[repeated 3x across cluster]``; verl's console logger prints each step as
``step:N - key:value - key:value`` (verl 0.6.1 ``verl/utils/logger/aggregate_logger.py``
``concat_dict_to_str``, numbers only, ``pprint.pformat``'d).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
_RAY_SOURCE = re.compile(r"^\((?P<source>[^()\s]+)(?: pid=\d+)?(?:, ip=[\d.:a-f]+)?\)\s?")
_REPEATED = re.compile(r"\s*\[repeated \d+x across cluster\].*$")
# torch.distributed's excepthook prefixes what a torchrun rank prints of its exception (an SFT run's ranks):
# "[rank0]: ValueError: ..." (torch 2.x distributed_c10d.py:1860-1877, set by ``init_process_group``).
_RANK_SOURCE = re.compile(r"^\[(?P<source>rank\d+)\]:\s?")
# tqdm's bar may share the line with no space between (the SFT trainer's "... 3.27s/it]step:2 - ...").
_STEP = re.compile(r"(?:^|[\s\]])step:(\d+) - (.*)$")
# verl's tqdm bar (ray_trainer.py fit: tqdm(total=self.total_training_steps, desc="Training Progress")).
_TQDM_TOTAL = re.compile(r"Training Progress:.*?\|\s*\d+/(\d+)\b")
# verl's _save_checkpoint prints the folder before it writes it: 0.6.1 ray_trainer.py 785; 0.9.0 logs it
# (trainer/ppo/v1/trainer_base.py:892, "INFO:<time>:Saving checkpoint to <folder>"); 0.9.0's SFT trainer prints
# it (utils/checkpoint/checkpoint_handler.py:92, "Saving checkpoint to: <folder>").
_CHECKPOINT = re.compile(
    r"(?:^local_global_step_folder: |^INFO:.*?:Saving checkpoint to |^Saving checkpoint to: )(\S+)$"
)
# verl 0.9's console logger prints numpy scalars by their repr: "acc/mean@1:np.float64(0.53125)".
_NUMPY_SCALAR = re.compile(r"np\.\w+\((.*)\)")
# npu_rl.patches.checkpoint_rotation, after a save: "npu-rl: global_step_24 is complete; removed global_step_8
# (max_actor_ckpt_to_keep 2)".
_ROTATION = re.compile(r"^npu-rl: global_step_\d+ is complete; removed (.+) \(max_actor_ckpt_to_keep (\d+)\)$")
# The last line of a Python traceback, as Ray re-raises it too: "ray.exceptions.RayTaskError(ValueError): ...".
_EXCEPTION = re.compile(r"^(?:[A-Za-z_][\w.]*\.)?[A-Z]\w*(?:Error|Exception|Exit|Interrupt)(?:\([\w.]+\))?: \S")
_WARNING = re.compile(r"\b[A-Z]\w*Warning: |^WARNING\b|\sWARNING\s")


@dataclass(frozen=True)
class Line:
    source: str  # the Ray actor or worker that printed it ("TaskRunner", "WorkerDict", "pid"), "" for the driver
    text: str  # without colour, prefix or Ray's repeat note


def read(raw: str) -> Line:
    text = _ANSI.sub("", raw.rstrip("\r\n"))
    # tqdm redraws with carriage returns: only the last state of the line counts.
    text = text.rsplit("\r", 1)[-1]
    m = _RAY_SOURCE.match(text) or _RANK_SOURCE.match(text)
    source = ""
    if m:
        source, text = m.group("source"), text[m.end() :]
    return Line(source, _REPEATED.sub("", text))


def _number(value: str) -> float | None:
    try:
        return float(value)
    except ValueError:
        return None


def step_metrics(text: str) -> tuple[int, dict[str, float]] | None:
    """(step, metrics) from a verl step line; None for any other line."""
    m = _STEP.search(text)
    if not m:
        return None
    metrics: dict[str, float] = {}
    for part in m.group(2).split(" - "):
        key, sep, value = part.rpartition(":")
        scalar = _NUMPY_SCALAR.fullmatch(value.strip())
        number = _number(scalar.group(1) if scalar else value) if sep else None
        if key and number is not None:
            metrics[key] = number
    return int(m.group(1)), metrics


def total_steps(text: str) -> int | None:
    m = _TQDM_TOTAL.search(text)
    return int(m.group(1)) if m else None


def checkpoint_folder(text: str) -> str | None:
    m = _CHECKPOINT.match(text)
    return m.group(1) if m else None


def rotation(text: str) -> str | None:
    m = _ROTATION.match(text)
    return f"removed {m.group(1)}, keeping {m.group(2)}" if m else None


def is_exception(text: str) -> bool:
    return bool(_EXCEPTION.match(text.strip()))


def is_warning(text: str) -> bool:
    return bool(_WARNING.search(text))


def finite(value: float | None) -> bool:
    return value is not None and math.isfinite(value)
