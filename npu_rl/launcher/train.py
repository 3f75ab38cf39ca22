"""Run verl GRPO for a recipe: preflight, Ray, ``verl.trainer.main_ppo``, resume.

The launch is built once (:func:`npu_rl.launcher.spec.build_launch`); the
preflight checks that object and this module executes it, adding only what is
specific to this host: the NPUs it selects and the address of the Ray head.
"""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

from .. import run_files
from ..agent import tool_config
from ..agent.outage import VerdictWatch
from ..agent.outage import verdict_error as outage_verdict
from ..cluster import proctree
from ..cluster.crossnode import check_cluster
from ..cluster.membership import connected
from ..cluster.nodewatch import Departure, NodeWatch
from ..console.ticks import clock as clock_text
from ..console.train import EVERY_ENV, TrainConsole, choose_mode
from ..errors import UserError
from ..exit_codes import Exit
from ..patches.consistency import verdict_error
from ..platform import devices
from ..recipe.schema import Recipe
from .preflight import check_launch, sft_total_steps
from .ray_local import LocalRayHead
from .releases import logical_cpus
from .spec import LaunchSpec, build_launch
from .watchdog import StepClock, Watchdog, dump_stacks, hang_message

_LOG_LOCK = threading.Lock()  # Ray's output thread and the run's stream share console.log
# After a failed run, how long a node's departure that caused it may take to show in Ray's node table.
_DEPARTURE_SETTLE_S = 10.0
SFT_PROGRESS_EVERY_S = 15.0


@dataclass
class TrainResult:
    exit_code: int
    seconds: float
    start_step: int | None
    end_step: int | None
    log_file: Path  # the attempt's console.log
    error: str | None = None  # one line: why the run failed (npu-rl stopped it, or verl's own exception)


def run_training(recipe: Recipe, *, ray_port: int | None = None, verbose: bool = False) -> TrainResult:
    spec = build_launch(recipe)
    for note in spec.notes:
        print(f"npu-rl: {note}", flush=True)
    # An SFT recipe may end by its epochs: re-run after it finished (a restarted pod), it would start torchrun
    # on every device to train nothing.
    total = sft_total_steps(recipe) if recipe.sft is not None else recipe.algorithm.total_training_steps
    if total is not None and spec.start_step is not None and spec.start_step >= total:
        a = recipe.algorithm
        last = "total_training_steps" if a.total_training_steps is not None else f"the last of {a.total_epochs} epochs,"
        print(
            f"npu-rl: {recipe.logging.experiment} already finished: global_step_{spec.start_step} reached "
            f"{last} {total}; nothing to train (raise algorithm.total_training_steps to go on)",
            flush=True,
        )
        return TrainResult(0, 0.0, spec.start_step, spec.start_step, run_files.console_log(recipe))
    address = os.environ.get("RAY_ADDRESS")
    if not address and recipe.resources.nnodes > 1:
        raise UserError(
            f"resources.nnodes is {recipe.resources.nnodes} but no cluster is given: bring one up with "
            "`npu-rl ray head --nodes N -- npu-rl train ...` and `npu-rl ray worker` (or set RAY_ADDRESS)"
        )
    check_launch(spec, recipe, ports=[ray_port] if ray_port else ())
    spec.log_dir.mkdir(parents=True, exist_ok=True)
    run_files.tensorboard_dir(recipe).mkdir(parents=True, exist_ok=True)
    if spec.attest_file is not None:
        spec.attest_file.unlink(missing_ok=True)
    if spec.consistency_file is not None:
        spec.consistency_file.unlink(missing_ok=True)
    if recipe.rollout.multi_turn.enabled:
        tool_config.path(recipe).parent.mkdir(parents=True, exist_ok=True)
        tool_config.path(recipe).write_text(tool_config.text(recipe), encoding="utf-8")
    if spec.outage_file is not None:
        spec.outage_file.unlink(missing_ok=True)
    log_file = run_files.new_console_log(recipe)
    mode = choose_mode(verbose, sys.stdout)
    resumed = spec.start_step is not None and recipe.checkpoint.resume == "auto"
    print(
        f"npu-rl: {'resuming' if resumed else 'training'} {recipe.logging.experiment}"
        + (f" from global_step_{spec.start_step}" if resumed else "")
        + (f" for {total} steps" if total else "")
        + f"; verl's and Ray's output: {log_file}"
        + ("" if mode == "raw" else " (--verbose shows it here)"),
        flush=True,
    )
    gated = spec.consistency_file is not None
    gate_max = recipe.consistency.max_probs_diff_mean if gated else None
    gate_min_corr = recipe.consistency.min_probs_corr if gated else None
    with (
        open(log_file, "a", encoding="utf-8") as log,
        TrainConsole(
            mode=mode,
            total=total,
            start_step=spec.start_step or 0,
            gate_max=gate_max,
            gate_min_corr=gate_min_corr,
            gate_every=recipe.consistency.every,
            # An SFT step takes a second, a GRPO step a minute or more: on a pipe, a line per step of SFT would
            # bury the run's events (NPU_RL_PROGRESS_EVERY still decides where set).
            every_s=SFT_PROGRESS_EVERY_S if recipe.sft is not None and EVERY_ENV not in os.environ else None,
        ) as console,
    ):
        code, error = _attempt(spec, recipe, address, ray_port, log, console)
    seconds = time.monotonic() - console.state.started
    if code == 0:  # after the live line is gone, so that this is the screen's last line
        saved = run_files.latest_step(recipe)
        trained = console.state.last[0] if console.state.last else spec.start_step or 0
        # checkpoint.save_freq -1 saves nothing: say so rather than name a step folder that is not there.
        where = f"global_step_{saved}" if saved is not None else f"step {trained} (no checkpoint saved)"
        print(
            f"npu-rl: finished at {where} in {clock_text(seconds)}; verl's and Ray's output: {log_file}",
            flush=True,
        )
    run_files.rotate_checkpoints(recipe)
    return TrainResult(code, seconds, spec.start_step, run_files.latest_step(recipe), log_file, error)


def _attempt(
    spec: LaunchSpec, recipe: Recipe, address: str | None, ray_port: int | None, log: TextIO, console: TrainConsole
) -> tuple[int, str | None]:
    """One run of verl from the newest checkpoint: (exit code, the one-line reason when it failed)."""
    clock = StepClock(recipe.watchdog, heavy_every=(recipe.checkpoint.save_freq, recipe.checkpoint.test_freq))
    if recipe.sft is not None:
        # torchrun's ranks on this node, no Ray (npu_rl.launcher.sft); a cluster's RAY_ADDRESS is not theirs.
        ranks_env = {} if recipe.resources.platform == "cpu" else _select_npus(recipe.resources.devices_per_node)[1]
        code, error = _run(spec, ranks_env, log, clock, console)
    elif address:
        # A multi-node cluster brought up by `npu-rl ray head`; the spec's runtime_env reaches its workers.
        with _cluster(address):
            if recipe.resources.nnodes > 1:
                facts = check_cluster(run_files.checkpoint_root(recipe), exclude=set(spec.env))
                print(
                    f"npu-rl: {len(facts)} nodes agree on versions and variables and share "
                    f"{run_files.checkpoint_root(recipe)}",
                    flush=True,
                )
            nodes = NodeWatch(lambda: clock.last_step).start()
            try:
                code, error = _run(spec, {"RAY_ADDRESS": address}, log, clock, console, nodes)
                # >128: a signal (the pod stopped), no failure; SANDBOX_DOWN: npu-rl stopped it, nodes all there
                if code not in (0, Exit.HUNG, Exit.SANDBOX_DOWN) and code < 128:
                    code, error = _departed(nodes.settle(_DEPARTURE_SETTLE_S), code, error, nodes.ended)
                elif code == Exit.HUNG:
                    # A frozen node stalls the run like a hung rank until Ray's health check gives up on
                    # it, which may happen while the watchdog dumps: a node that left explains the stall.
                    code, error = _departed(nodes.settle(0), code, error)
            finally:
                nodes.stop()
    else:
        res = recipe.resources
        # CPU workers take worker slots registered under the NPU resource (npu_rl.patches.cpu_platform).
        npus = res.devices_per_node
        device_env: dict[str, str] = {}
        if res.platform != "cpu":
            npus, device_env = _select_npus(res.devices_per_node)
        head = LocalRayHead(
            port=ray_port,
            num_cpus=max(logical_cpus(recipe), os.cpu_count() or 1),
            npus=npus,
            env={**spec.env, **device_env},
            log=lambda line: _keep(log, f"npu-rl: {line}\n"),
            output=lambda line: _keep(log, f"[ray] {line}" if line else ""),
        )
        with head:
            code, error = _run(spec, {**device_env, "RAY_ADDRESS": head.address}, log, clock, console)
    if code not in (0, Exit.TERMINATED) and spec.outage_file is not None:
        down = outage_verdict(spec.outage_file)
        if down:  # the code tool stopped the rollout (npu_rl.agent.outage)
            kept = run_files.latest_step(recipe)
            code, error = (
                Exit.SANDBOX_DOWN,
                (f"{down}; checkpoints up to step {kept} are kept" if kept else f"{down}; no checkpoint was saved")
                + "; re-run once the sandbox answers to resume",
            )
    if code not in (0, Exit.TERMINATED, Exit.SANDBOX_DOWN) and spec.consistency_file is not None:
        gate = verdict_error(spec.consistency_file)
        if gate:  # the gate raised in the TaskRunner, and verl exited on it
            code, error = Exit.INCONSISTENT, gate
    if error is None and code != 0 and code < 128 and code != Exit.TERMINATED:
        # verl's own failure: its exception's last line, not the traceback, reaches the terminal.
        error = f"training exited with code {code}" + (f": {why}" if (why := console.error_line()) else "")
        kept = run_files.latest_step(recipe)
        error += f"; checkpoints up to step {kept} are kept, re-run to resume" if kept else "; no checkpoint was saved"
    return code, error


def _keep(log: TextIO, text: str) -> None:
    with _LOG_LOCK:
        log.write(text)
        log.flush()


def _select_npus(needed: int) -> tuple[int, dict[str, str]]:
    """This host's NPUs for the run (``NPU_DEVICES`` narrows the choice): count and visibility env."""
    found = devices.discover()
    selected = devices.select(found, needed, os.environ.get("NPU_DEVICES"))
    return len(selected), devices.visible_devices_env(selected, found)


def attestation_error(spec: LaunchSpec, training_started: bool) -> str | None:
    """Why the run's patches cannot be trusted, from what its workers reported (None: all active)."""
    if spec.attest_file is None:
        return None  # an SFT launch: its ranks are torchrun's children, with the launch's environment
    try:
        verdict = json.loads(spec.attest_file.read_text(encoding="utf-8"))
    except FileNotFoundError:
        if training_started:
            return (
                "training started but no Ray worker reported its patches: the npu_rl patches did not reach "
                "verl's TaskRunner (is npu_rl installed on every node?)"
            )
        return None
    except ValueError:
        return f"unreadable worker report {spec.attest_file}"
    return verdict.get("error")


@contextlib.contextmanager
def _cluster(address: str) -> Iterator[None]:
    try:
        session = connected(address, namespace="npu-rl-launcher")
        session.__enter__()
    except (ConnectionError, RuntimeError, TimeoutError) as err:  # no GCS there; no raylet on this node
        raise UserError(
            f"cannot connect to the Ray cluster at RAY_ADDRESS={address}: {err}".splitlines()[0],
            exit_code=Exit.RAY_FAILED,
        ) from None
    try:
        yield
    finally:
        session.__exit__(None, None, None)


def _departed(gone: list[Departure], code: int, error: str | None, stopped: bool = False) -> tuple[int, str | None]:
    """A failed run during which a node left: that is why it failed, and a restart can resume it. ``stopped``:
    the node watch stopped the run when it saw the node go (NodeWatch.ends)."""
    if not gone:
        return code, error
    lines = "; ".join(d.line() for d in gone)
    if code == Exit.HUNG:
        then = f"the watchdog had found the {error}"
    else:
        then = "npu-rl stopped training" if stopped else f"training exited with code {code}"
    return Exit.NODE_LOST, f"{lines}; {then}; a restart of the job resumes from the newest complete checkpoint"


def _run(
    spec: LaunchSpec,
    host_env: dict[str, str],
    log: TextIO,
    clock: StepClock,
    console: TrainConsole | None = None,
    nodes: NodeWatch | None = None,
) -> tuple[int, str | None]:
    """Run the spec's argv, its output to ``log`` (an open console.log) and through ``console`` to the
    terminal; stop it on SIGTERM/SIGINT, when the watchdog finds it hung and when ``nodes`` sees a node go."""
    full_env = {**os.environ, **spec.env, **host_env}
    error, attested = None, False
    hang: dict[str, str] = {}
    console = console or TrainConsole(mode="raw", total=None, start_step=0)
    with proctree.signals_raise():
        _keep(log, f"\n$ {shlex.join(spec.argv)}\n")
        # Its own session: a terminal's Ctrl-C reaches npu-rl alone, which stops verl in order.
        proc = subprocess.Popen(
            list(spec.argv),
            env=full_env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            errors="replace",
            bufsize=1,
            start_new_session=True,
        )
        assert proc.stdout is not None
        clock.begin()
        if nodes is not None:
            nodes.ends(proc)

        def on_hang() -> None:
            out_dir = spec.log_dir / time.strftime("hang-%Y%m%d-%H%M%S")
            print(
                f"npu-rl: {watchdog.tripped}; dumping the stacks of every process of the run to {out_dir}",
                file=sys.stderr,
                flush=True,
            )
            try:
                summary = dump_stacks(out_dir, proc.pid, host_env.get("RAY_ADDRESS"), clock.spec.dump_timeout_s)
                hang["error"] = hang_message(watchdog.tripped or "", summary, out_dir)
            except Exception as err:  # noqa: BLE001 - the run is stopped whatever the dump did
                hang["error"] = f"run hung: {watchdog.tripped}; the stack dump failed ({err}); the run was stopped"
            finally:
                proctree.stop(proc, grace=30.0)

        watchdog = Watchdog(clock, on_hang)
        # The code tool's verdict that the sandbox is down: verl trains on around a failed rollout, so the
        # launch stops it (npu_rl.agent.outage).
        outage = (
            VerdictWatch(spec.outage_file, lambda: proctree.stop(proc, grace=30.0))
            if spec.outage_file is not None
            else contextlib.nullcontext()
        )
        try:
            with watchdog, outage:
                for line in proc.stdout:
                    _keep(log, line)
                    step = console.feed(line)
                    if step is not None:
                        clock.step(step)
                    if not attested and step is not None:
                        attested = True  # the workers reported before fit() began, or never will
                        error = attestation_error(spec, training_started=True)
                        if error:
                            break
            if error:
                proctree.stop(proc, grace=30.0)
                return 1, error
            code = proc.wait()
            if code != 0 and isinstance(outage, VerdictWatch) and outage.seen is not None:
                return Exit.SANDBOX_DOWN, None  # the line is the verdict's (_attempt)
            if watchdog.tripped:
                watchdog.join()
                if code != 0:  # verl may have finished on its own while the watchdog was dumping
                    return Exit.HUNG, hang.get("error", watchdog.tripped)
        except proctree.Terminated as stop:
            print(f"npu-rl: {stop}: stopping verl (the last complete checkpoint is kept)", file=sys.stderr, flush=True)
            proctree.stop(proc, grace=30.0)
            return stop.exit_code, None
    return code, attestation_error(spec, training_started=False) if code else None
