"""verl 0.6.1's `file` logger crashes on the first step: ``balance_batch`` logs
``global_seqlen/*`` as 0-d tensors, which ``json.dumps`` rejects, on every device.
This patch turns tensor and numpy scalars into floats before the line is written,
and flushes each line: verl never flushes the file, so a killed run (and a run
read while it trains) had nothing on disk.

verl 0.9.0 writes with orjson, which serialises numpy but not torch tensors, to a file opened unbuffered
(verl v0.9.0 utils/tracking.py:431-435): the conversion still matters there, the flush is a no-op.
"""

from __future__ import annotations

from .guard import TRACKING, VERL_0_6_1, VERL_0_9_0, Patch

PATCH_NAME = "file_logger"

FINGERPRINTS = {
    f"{TRACKING}:FileLogger.log": "56dd5887a7ea7675",
}
PATCH = Patch(PATCH_NAME, {VERL_0_6_1: FINGERPRINTS, VERL_0_9_0: {f"{TRACKING}:FileLogger.log": "4dead91e3bf487d5"}})


def to_json_scalar(value):
    item = getattr(value, "item", None)  # torch tensors and numpy scalars
    if not callable(item):
        return value
    try:
        return item()
    except (ValueError, RuntimeError):  # more than one element
        return value.tolist()


@PATCH.wrap(TRACKING, "FileLogger.log")
def _patch(original):
    def log(self, data, step):
        result = original(self, {k: to_json_scalar(v) for k, v in data.items()}, step)
        self.fp.flush()
        return result

    return log
