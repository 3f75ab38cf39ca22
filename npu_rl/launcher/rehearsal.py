"""``npu-rl train --rehearse``: a launch run through verl's real entry point up to the device boundary.

The rehearsal executes the launch's own argv (:func:`npu_rl.launcher.spec.build_launch`
with ``rehearse=True``, which only adds the ``rehearse`` patch and its report path): a GRPO recipe's
``python -m verl.trainer.main_ppo`` on a local Ray without accelerators, an SFT recipe's torchrun of
``verl.trainer.sft_trainer`` on this host (no Ray).
:mod:`npu_rl.patches.rehearse` documents where it stops and what it checks; this
module runs it, hands it the cluster shape to plan against, and turns its report
into a summary or one error line.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from ..cluster import proctree
from ..console import lines
from ..errors import UserError
from ..patches.rehearse import rank_file
from ..recipe.schema import Recipe
from .preflight import check_launch
from .ray_local import LocalRayHead
from .releases import logical_cpus
from .sft import ENTRY_MODULE as ENTRY_SFT
from .spec import LaunchSpec, build_launch

# Lines that name why a Python process died (the last one wins), once the console has taken off the prefix of
# the Ray actor or torchrun rank that printed them.
_ERROR_LINE = re.compile(r"^\s*([A-Za-z_.]*(?:Error|Exception)\w*: .+)$")


@dataclass
class Rehearsal:
    """A rehearsal that reached the device boundary (one that did not raises UserError)."""

    recipe: str
    stopped_at: str
    checked: list[str] = field(default_factory=list)
    report: dict = field(default_factory=dict)
    log_file: Path | None = None

    def text(self) -> str:
        lines = [f"npu-rl: rehearsal of {self.recipe} passed; stopped at {self.stopped_at}"]
        lines += [f"  checked: {c}" for c in self.checked]
        if self.log_file:
            lines.append(f"  log: {self.log_file}")
        return "\n".join(lines)


def _last_error(text: str) -> str | None:
    found = [m.group(1) for raw in text.splitlines() if (m := _ERROR_LINE.match(lines.read(raw).text))]
    return found[-1] if found else None


def _without(environ, run_env) -> dict[str, str]:
    """The caller's environment less every variable the run sets (the patch selection among them), as a
    pod's raylet has it (its NPU_RL_WORKSPACE, say, stays)."""
    return {k: v for k, v in environ.items() if k not in run_env}


def run_rehearsal(recipe: Recipe, timeout: float = 300.0) -> Rehearsal:
    spec = build_launch(recipe, rehearse=True)
    check_launch(spec, recipe, host=False)
    report_file = spec.rehearsal_report
    assert report_file is not None
    spec.log_dir.mkdir(parents=True, exist_ok=True)
    report_file.unlink(missing_ok=True)
    for old in report_file.parent.glob(rank_file(report_file, "*").name):
        old.unlink()
    log_file = spec.log_dir / "rehearsal.log"
    if recipe.sft is not None:
        where = f"torchrun's {recipe.resources.devices_per_node} rank(s) on this host"
        print(
            f"npu-rl: rehearsing {recipe.name}: {ENTRY_SFT} under {where} without devices; log: {log_file}",
            flush=True,
        )
        _run(recipe, spec, {**os.environ, **spec.env}, log_file, timeout)
    else:
        print(
            f"npu-rl: rehearsing {recipe.name}: {spec.argv[2]} --config-name {spec.config_name} "
            f"({len(spec.argv) - 5} overrides) on a local Ray without devices; log: {log_file}",
            flush=True,
        )
        # A Ray of its own on 127.0.0.1 (never a live cluster, never a routed interface), as `npu-rl train` uses.
        # Its raylet gets none of the run's variables, as a pod's `npu-rl ray head|worker` has none: the
        # patches and the recipe's variables must reach every worker through the argv's runtime_env.
        with LocalRayHead(
            port=None, num_cpus=logical_cpus(recipe), npus=0, env=_without(os.environ, spec.env), inherit=False
        ) as head:
            _run(recipe, spec, {**os.environ, **spec.env, "RAY_ADDRESS": head.address}, log_file, timeout)
    try:
        report = json.loads(report_file.read_text(encoding="utf-8"))
    except FileNotFoundError:
        why = _last_error(log_file.read_text(encoding="utf-8", errors="replace")) or "no error line"
        raise UserError(
            f"rehearsal of {recipe.name} stopped in verl before the trainer was built: {why} (log: {log_file})",
            exit_code=1,
        ) from None
    if report.get("complete") and recipe.sft is not None:
        _other_ranks(recipe, spec, report)
        report_file.write_text(json.dumps(report, indent=1, default=str), encoding="utf-8")
    if not report.get("complete"):
        raise UserError(f"rehearsal of {recipe.name}: {report.get('error')} (log: {log_file})", exit_code=1)
    return Rehearsal(recipe.name, report["stopped_at"], report["checked"], report, log_file)


def _run(recipe: Recipe, spec: LaunchSpec, env: dict[str, str], log_file: Path, timeout: float) -> None:
    with open(log_file, "w", encoding="utf-8") as log:
        log.write(f"$ {shlex.join(spec.argv)}\n")
        log.flush()
        proc = subprocess.Popen(list(spec.argv), env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            raise UserError(
                f"rehearsal of {recipe.name} did not finish within {timeout:.0f}s (log: {log_file})", exit_code=1
            ) from None
        finally:
            proctree.stop(proc, grace=10.0)


def _other_ranks(recipe: Recipe, spec: LaunchSpec, report: dict) -> None:
    """Each torchrun rank past the first started with the world and the patches rank 0 had."""
    assert spec.rehearsal_report is not None
    world = recipe.resources.devices_per_node
    want = sorted(spec.patches)
    bad = []
    for rank in range(1, world):
        path = rank_file(spec.rehearsal_report, str(rank))
        seen = json.loads(path.read_text(encoding="utf-8")) if path.is_file() else None
        if seen is None or seen["world_size"] != world or seen["patches"] != want:
            bad.append(f"rank {rank}: {seen or 'never started'}")
    if bad:
        report["complete"] = False
        report["error"] = f"torchrun's ranks did not all start with the run's world and patches: {'; '.join(bad)}"
    elif world > 1:
        report["checked"].append(f"ranks 1-{world - 1} started by torchrun with the world of {world} and the patches")


__all__ = ["Rehearsal", "run_rehearsal"]
