"""SwanLab shows a verl run as finished (or crashed) when training ends, not "running" forever.

verl 0.6.1 ends a SwanLab run only in ``Tracking.__del__`` (verl/utils/tracking.py:158-162), and
SwanLab's own end-of-run hook is an ``atexit`` one. Neither runs in verl's TaskRunner: when ``fit``
has returned, the driver lets go of the actor and Ray force-exits its process (the core worker logs
"Force exit the process ... all references to the actor were removed"), while the tracker that
``RayPPOTrainer.fit`` created (verl/trainer/ppo/ray_trainer.py:967) has not been collected.

This patch closes the trackers a ``fit`` opened as that ``fit`` returns or raises, through verl's own
closing code (``Tracking.__del__``: each backend's finish, SwanLab's among them) and only once: the
tracker is left with no backends, so its own ``__del__`` later has nothing to do. When ``fit`` raises,
the SwanLab run is first marked crashed with the error.

Importing this module does not import verl or swanlab.
"""

from __future__ import annotations

import sys
import weakref
from typing import Any

from .guard import RAY_TRAINER, TRACKING, VERL_0_6_1, Patch

PATCH_NAME = "swanlab_finish"
FINGERPRINTS = {
    # Recorded as they are made, so fit can find the tracker it made (a local of fit).
    f"{TRACKING}:Tracking.__init__": "37e10a7facdc8148",
    # The closing code this patch calls: finish of every backend in ``self.logger``.
    f"{TRACKING}:Tracking.__del__": "8671a7b3d9ac005b",
    # Makes its tracker as a local and never closes it.
    f"{RAY_TRAINER}:RayPPOTrainer.fit": "3661c861fcee4890",
}
PATCH = Patch(PATCH_NAME, {VERL_0_6_1: FINGERPRINTS})

# Trackers made and not closed yet; weak, so that this patch keeps none alive.
_open: weakref.WeakSet = weakref.WeakSet()


@PATCH.wrap(TRACKING, "Tracking.__init__")
def _patch_tracking(original):
    def __init__(self, *args, **kwargs):
        original(self, *args, **kwargs)
        _open.add(self)

    return __init__


def close(tracker: Any, error: BaseException | None = None) -> None:
    """Finish every backend of ``tracker`` once; SwanLab's run as crashed when ``error`` is given."""
    _open.discard(tracker)
    try:
        if error is not None and "swanlab" in tracker.logger:
            swanlab = tracker.logger.pop("swanlab")
            swanlab.finish(state=swanlab.State.CRASHED, error=f"{type(error).__name__}: {error}")
        tracker.__del__()
    finally:
        tracker.logger.clear()  # closed or not, never closed twice


def _close_new(before: set[int], error: BaseException | None = None) -> None:
    for tracker in [t for t in _open if id(t) not in before]:
        try:
            close(tracker, error)
        except Exception as err:  # noqa: BLE001 - as Python treats an error in __del__: said, not raised
            # A backend that fails to close must neither fail a finished run nor hide fit's own error.
            print(f"npu-rl: could not close verl's tracker: {type(err).__name__}: {err}", file=sys.stderr, flush=True)


@PATCH.wrap(RAY_TRAINER, "RayPPOTrainer.fit", also=(TRACKING,))
def _patch_fit(original):
    def fit(self, *args, **kwargs):
        before = {id(t) for t in _open}
        try:
            result = original(self, *args, **kwargs)
        except BaseException as err:
            _close_new(before, err)
            raise
        _close_new(before)
        return result

    return fit
