"""``npu-rl train --rehearse``: a launch run through verl's real entry point up to the device boundary.

The rehearsal executes the launch's own argv (:func:`npu_rl.launcher.spec.build_launch`
with ``rehearse=True``, which only adds the ``rehearse`` patch and its report path)
with ``python -m verl.trainer.main_ppo`` on a local Ray without accelerators.
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
from ..errors import UserError
from ..recipe.schema import Recipe
from .preflight import check_launch
from .ray_local import LocalRayHead
from .releases import logical_cpus
from .spec import build_launch

# Lines that name why a Python process died (the last one wins).
_ERROR_LINE = re.compile(r"^\s*(?:\(\w+ pid=\d+\)\s*)?([A-Za-z_.]*(?:Error|Exception)\w*: .+)$")


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
    found = [m.group(1) for line in text.splitlines() if (m := _ERROR_LINE.match(line))]
    return found[-1] if found else None


def _without(environ, run_env) -> dict[str, str]:
    """The caller's environment less every variable the run sets (the patch selection among them), as a
    pod's raylet has it (its NPU_RL_WORKSPACE, say, stays)."""
    return {k: v for k, v in environ.items() if k not in run_env}


def run_rehearsal(recipe: Recipe, timeout: float = 300.0) -> Rehearsal:
    if recipe.sft is not None:
        # The rehearse patch stops verl's PPO trainer where devices would be allocated; the SFT trainer has no
        # such stop yet. Its config is composed and built by verl (`npu-rl train --dry-run` does not; the
        # launch's preflight does), and the tiny SFT recipe runs it whole on CPU.
        raise UserError(
            f"rehearsal of {recipe.name}: an SFT recipe has no rehearsal yet; its launch is checked by verl's "
            "own SFT config when `npu-rl train` starts, and tiny_agent_sft_cpu runs the same trainer on CPU"
        )
    spec = build_launch(recipe, rehearse=True)
    check_launch(spec, recipe, host=False)
    assert spec.rehearsal_report is not None
    spec.log_dir.mkdir(parents=True, exist_ok=True)
    spec.rehearsal_report.unlink(missing_ok=True)
    log_file = spec.log_dir / "rehearsal.log"
    print(
        f"npu-rl: rehearsing {recipe.name}: {spec.argv[2]} --config-name {spec.config_name} "
        f"({len(spec.argv) - 5} overrides) on a local Ray without devices; log: {log_file}",
        flush=True,
    )
    # A Ray of its own on 127.0.0.1 (never a live cluster, never a routed interface), as `npu-rl train` uses.
    # Its raylet gets none of the run's variables, as a pod's `npu-rl ray head|worker` has none: the
    # patches and the recipe's variables must reach every worker through the argv's runtime_env.
    with (
        LocalRayHead(
            port=None, num_cpus=logical_cpus(recipe), npus=0, env=_without(os.environ, spec.env), inherit=False
        ) as head,
        open(log_file, "w", encoding="utf-8") as log,
    ):
        env = {**os.environ, **spec.env, "RAY_ADDRESS": head.address}
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
    try:
        report = json.loads(spec.rehearsal_report.read_text(encoding="utf-8"))
    except FileNotFoundError:
        why = _last_error(log_file.read_text(encoding="utf-8", errors="replace")) or "no error line"
        raise UserError(
            f"rehearsal of {recipe.name} stopped in verl before the trainer was built: {why} (log: {log_file})",
            exit_code=1,
        ) from None
    if not report.get("complete"):
        raise UserError(f"rehearsal of {recipe.name}: {report.get('error')} (log: {log_file})", exit_code=1)
    return Rehearsal(recipe.name, report["stopped_at"], report["checked"], report, log_file)


__all__ = ["Rehearsal", "run_rehearsal"]
