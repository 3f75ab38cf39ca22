"""The agent recipes trained on CPU as a user runs them, in upstream's two stages, on the cann9.1-verl0.9
line's environment: `npu-rl train --recipe tiny_agent_sft_cpu` (verl 0.9's SFT trainer under torchrun),
stopped and resumed, then merged; then `npu-rl train --recipe tiny_agent_cpu` from the merged model, verl
0.9's tool agent loop on vLLM's CPU backend, every tool call run by a real `npu-rl sandbox serve`, with the
sandbox stopped mid-run and started again.

One fixture takes every path: the SFT run stopped by SIGTERM after a checkpoint ends every process it
started, and the same command resumes it on the batch and the weights the stopped run had reached; tool
calls reach the sandbox and their answers come back into the policy's next turn; the sandbox killed after the
step-2 checkpoint stops the run in one line (``Exit.SANDBOX_DOWN``) once every call has failed for
``down_s``; the same command resumes from the checkpoint once the sandbox is back and finishes by itself."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import urllib.request

import psutil
import pytest
from needs import missing_setup

from npu_rl.cluster.probe import free_port
from npu_rl.exit_codes import Exit
from npu_rl.paths import project_root

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(1800)]

LINE = "cann9.1-verl0.9"
PYTHON = project_root() / f".venv-{LINE}" / "bin" / "python"
RECIPE = "tiny_agent_cpu"
SFT_RECIPE = "tiny_agent_sft_cpu"
# The SFT run, shortened from the demo's 1440 steps: the format and the calls come first (a tool call in about a
# third of the first GRPO step's answers), which is what the GRPO run below needs. The stop follows the
# checkpoint of an epoch's last step (32 steps each), which verl alone resumes an epoch late
# (npu_rl.patches.sft_resume); a checkpoint inside an epoch resumes as verl loads it.
SFT_STEPS, SFT_STOP_AFTER = 160, 64
STEPS = 6
DOWN_S = 5
UID_BASE = 61400  # the sandbox's slot users here (tests/sandbox/conftest.py keeps 61000-61399)


def _npu_rl(*args: str, env: dict) -> subprocess.CompletedProcess:
    return subprocess.run([str(PYTHON), "-m", "npu_rl", *args], env=env, capture_output=True, text=True, timeout=600)


class Sandbox:
    def __init__(self, port: int):
        argv = [sys.executable, "-m", "npu_rl", "sandbox", "serve", "--port", str(port), "--slots", "2"]
        self.proc = subprocess.Popen([*argv, "--uid-base", str(UID_BASE)], stdout=subprocess.PIPE, text=True)
        line = self.proc.stdout.readline()
        assert "serving http://" in line, line
        self.url = f"http://127.0.0.1:{port}"

    def health(self) -> dict:
        with urllib.request.urlopen(self.url + "/health", timeout=10) as r:
            return json.loads(r.read())

    def runs(self) -> int:
        return self.health()["runs"]

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            self.proc.wait(timeout=30)


def _metrics(workspace, recipe: str = RECIPE) -> list[dict]:
    rows = []
    for path in sorted((workspace / "logs").rglob(f"{recipe}/metrics-from-step-*.jsonl")):
        rows += [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return rows


def _processes_of(workspace) -> list[str]:
    """Processes still running whose command line names the workspace (torchrun and its ranks name the run's
    files there)."""
    left = []
    for p in psutil.process_iter(["pid", "cmdline"]):
        cmd = " ".join(p.info["cmdline"] or [])
        if str(workspace) in cmd and p.info["pid"] != os.getpid():
            left.append(cmd[:200])
    return left


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    if not PYTHON.exists():
        missing_setup(f"the {LINE} CPU environment", f"make venv STACK={LINE}")
    if shutil.which("bwrap") is None:
        missing_setup("bubblewrap", "apt-get install bubblewrap (.ci/apt-packages.txt)")
    workspace = tmp_path_factory.mktemp("agent")
    env = {**os.environ, "NPU_RL_WORKSPACE": str(workspace)}
    port = free_port()
    assert _npu_rl("data", "arithmetic", "--out", str(workspace / "data/arithmetic"), env=env).returncode == 0
    made = _npu_rl("model", "tiny", "--recipe", SFT_RECIPE, "--out", str(workspace / "models/tiny-qwen2-agent-base"),
                   "--heads", "2", "--kv-heads", "2", env=env)  # fmt: skip
    assert made.returncode == 0, made.stderr[-2000:]
    out: dict = {"workspace": workspace}

    # The SFT stage: stopped as a pod is (SIGTERM) once a checkpoint is saved, then the same command again.
    sft = [str(PYTHON), "-m", "npu_rl", "train", "--recipe", SFT_RECIPE, f"--set=checkpoint.save_freq={SFT_STOP_AFTER}",
           f"--set=algorithm.total_training_steps={SFT_STEPS}"]  # fmt: skip
    stopped = subprocess.Popen(sft, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    lines = []
    for line in stopped.stdout:
        lines.append(line)
        if f"checkpoint global_step_{SFT_STOP_AFTER} saved" in line:
            stopped.send_signal(signal.SIGTERM)
    out["sft_stopped"] = (stopped.wait(timeout=120), "".join(lines), stopped.stderr.read())
    out["sft_left"] = _processes_of(workspace)
    out["sft_metrics_stopped"] = _metrics(workspace, SFT_RECIPE)
    resumed = subprocess.run(sft, env=env, capture_output=True, text=True, timeout=900)
    out["sft_resumed"] = (resumed.returncode, resumed.stdout, resumed.stderr)
    out["sft_metrics"] = _metrics(workspace, SFT_RECIPE)
    merged = _npu_rl("merge", "--recipe", SFT_RECIPE, env=env)
    assert merged.returncode == 0, merged.stdout[-2000:] + merged.stderr[-2000:]
    model = f"checkpoints/npu_rl_demo/{SFT_RECIPE}/global_step_{SFT_STEPS}/huggingface"

    sets = {
        "model.path": model,  # the SFT run's last step, merged, where the recipe's own 1440-step run would be
        "sandbox.port": port,
        "algorithm.total_training_steps": STEPS,
        "checkpoint.save_freq": 2,
        "checkpoint.test_freq": -1,
        "tools.code_interpreter.down_s": DOWN_S,
    }
    train = [str(PYTHON), "-m", "npu_rl", "train", "--recipe", RECIPE, *[f"--set={k}={v}" for k, v in sets.items()]]

    sandbox = Sandbox(port)
    first = subprocess.Popen(train, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    lines = []
    for line in first.stdout:
        lines.append(line)
        if "checkpoint global_step_2 saved" in line:
            out["runs_before_the_kill"] = sandbox.runs()
            sandbox.stop()
            out["killed_at"] = time.monotonic()
    out["first"] = (first.wait(timeout=600), "".join(lines), first.stderr.read())
    out["first_ended_at"] = time.monotonic()
    out["metrics_before_resume"] = _metrics(workspace)

    sandbox = Sandbox(port)
    try:
        second = subprocess.run(train, env=env, capture_output=True, text=True, timeout=900)
        out["health_after_resume"] = sandbox.health()
    finally:
        sandbox.stop()
    out["second"] = (second.returncode, second.stdout, second.stderr)
    out["metrics"] = _metrics(workspace)
    out["resumed_file"] = max((workspace / "logs").rglob(f"{RECIPE}/metrics-from-step-*.jsonl"), key=os.path.getmtime)
    return out


def test_the_sft_run_stopped_after_a_checkpoint_leaves_nothing_running(run):
    code, out, err = run["sft_stopped"]
    assert code == Exit.TERMINATED, (out[-2000:], err[-2000:])
    assert "stopping verl (the last complete checkpoint is kept)" in err
    assert "Traceback" not in out + err
    assert run["sft_left"] == []  # torchrun and its ranks went with the launch


def test_the_same_command_resumes_the_sft_run_where_it_stopped(run):
    code, out, err = run["sft_resumed"]
    assert code == 0, (out[-2000:], err[-2000:])
    assert f"resuming {SFT_RECIPE} from global_step_{SFT_STOP_AFTER}" in out
    assert f"global_step_{SFT_STOP_AFTER} ends an epoch: the next epoch starts afresh" in out
    assert f"finished at global_step_{SFT_STEPS}" in out
    before = {r["step"]: r["data"] for r in run["sft_metrics_stopped"] if "train/loss" in r["data"]}
    after = {r["step"]: r["data"] for r in run["sft_metrics"] if "train/loss" in r["data"]}
    first = SFT_STOP_AFTER + 1
    assert first in before, "the stopped run trained past its checkpoint (the stop followed the next step's line)"
    # The resumed step is the one the stopped run took after its checkpoint: the next epoch's first batch (its
    # tokens) and the weights and optimizer it resumed (its loss), not a fresh start's (a loss near 6.4).
    assert after[first]["train/global_tokens"] == before[first]["train/global_tokens"]
    assert after[first]["train/loss"] == pytest.approx(before[first]["train/loss"], rel=1e-3)
    assert set(range(first, SFT_STEPS + 1)) <= set(after)
    # The format was learnt: most of the loss that is left is the teacher's coin toss and its near misses.
    assert after[SFT_STEPS]["train/loss"] < 1.0 < before[1]["train/loss"]


def test_tool_calls_reach_the_sandbox_and_come_back_into_the_next_turn(run):
    assert run["runs_before_the_kill"] > 0  # the sandbox ran the policy's code
    early = [r["data"] for r in run["metrics_before_resume"] if r["step"] <= 2]
    assert early, "no step before the kill logged its metrics"
    for m in early:
        calls, turns = m["reward/tool_calls"], m["reward/turns"]
        assert calls > 0 and m["reward/tool_errors"] == 0
        # Each call that came back adds the tool's turn and the policy's next one to the two of a direct answer.
        assert turns == pytest.approx(2 + 2 * calls, abs=0.3), (turns, calls)
        assert m["training/num_turns/max"] >= 4  # verl 0.9 logs num_turns under training/
        # The rollouts' time waiting on the sandbox, apart from generating (the throughput card's split).
        assert 0 < m["timing_s/agent_loop/tool_calls/mean"] and 0 < m["timing_s/agent_loop/generate_sequences/mean"]


def _kept(run) -> int:
    """The step the stop's line says is kept: the sandbox's calls fail at once, so how many steps fit in the
    allowance after the kill depends on the machine's pace (one, or two on an idle one)."""
    (line,) = [ln for ln in run["first"][2].splitlines() if ln.startswith("npu-rl: error:")]
    m = re.search(r"checkpoints up to step (\d+) are kept; re-run once the sandbox answers to resume", line)
    assert m, line
    return int(m.group(1))


def test_a_dead_sandbox_stops_the_run_in_one_line_after_its_allowance(run):
    code, out, err = run["first"]
    assert code == Exit.SANDBOX_DOWN, (out[-2000:], err[-2000:])
    (line,) = [ln for ln in err.splitlines() if ln.startswith("npu-rl: error:")]
    assert line.startswith("npu-rl: error: the sandbox was unreachable for ")
    assert "nothing answers at http://127.0.0.1:" in line
    assert "Traceback" not in out + err
    # Stopped within a step or two of the allowance, not at the end of the run; the kept step is the newest
    # saved, and no step was logged past the one the verdict held (its rollout never finished).
    kept = _kept(run)
    assert 2 <= kept < STEPS
    steps = [r["step"] for r in run["metrics_before_resume"]]
    assert max(steps) <= kept + 1 < STEPS


def test_the_same_command_resumes_once_the_sandbox_is_back(run):
    code, out, err = run["second"]
    kept = _kept(run)
    assert code == 0, (out[-2000:], err[-2000:])
    assert f"resuming tiny_agent_cpu from global_step_{kept}" in out
    assert f"finished at global_step_{STEPS}" in out
    resumed = [r for r in run["metrics"] if r["step"] > kept]
    assert {r["step"] for r in resumed} >= set(range(kept + 1, STEPS + 1))
    # The resumed launch's own steps (the stopped one's failed calls are in its file, steps up to kept + 1).
    own = [json.loads(ln) for ln in run["resumed_file"].read_text().splitlines() if ln.strip()]
    errors = {r["step"]: r["data"]["reward/tool_errors"] for r in own if "reward/tool_errors" in r["data"]}
    assert errors and not any(errors.values()), (errors, run.get("health_after_resume"))
