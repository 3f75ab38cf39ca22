"""The agent recipe trained on CPU as a user runs it: `npu-rl train --recipe tiny_agent_cpu` on the
cann9.1-verl0.9 line's environment, verl 0.9's tool agent loop on vLLM's CPU backend, every tool call run by
a real `npu-rl sandbox serve`, then the sandbox stopped mid-run and started again.

One run takes every path: tool calls reach the sandbox and their answers come back into the policy's next
turn; the sandbox killed after the step-2 checkpoint stops the run in one line (``Exit.SANDBOX_DOWN``) once
every call has failed for ``down_s``; the same command resumes from the checkpoint once the sandbox is back
and finishes by itself."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.request

import pytest
from needs import missing_setup

from npu_rl.cluster.probe import free_port
from npu_rl.exit_codes import Exit
from npu_rl.paths import project_root

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(1800)]

LINE = "cann9.1-verl0.9"
PYTHON = project_root() / f".venv-{LINE}" / "bin" / "python"
RECIPE = "tiny_agent_cpu"
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


def _metrics(workspace) -> list[dict]:
    rows = []
    for path in sorted((workspace / "logs").rglob("metrics-from-step-*.jsonl")):
        rows += [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return rows


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
    made = _npu_rl("model", "tiny", "--recipe", RECIPE, "--out", str(workspace / "models/tiny-qwen2-agent"),
                   "--heads", "2", "--kv-heads", "2", env=env)  # fmt: skip
    assert made.returncode == 0, made.stderr[-2000:]
    sets = {
        "sandbox.port": port,
        "algorithm.total_training_steps": STEPS,
        "checkpoint.save_freq": 2,
        "checkpoint.test_freq": -1,
        "tools.code_interpreter.down_s": DOWN_S,
    }
    train = [str(PYTHON), "-m", "npu_rl", "train", "--recipe", RECIPE, *[f"--set={k}={v}" for k, v in sets.items()]]
    out: dict = {"workspace": workspace}

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
    return out


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


def test_a_dead_sandbox_stops_the_run_in_one_line_after_its_allowance(run):
    code, out, err = run["first"]
    assert code == Exit.SANDBOX_DOWN, (out[-2000:], err[-2000:])
    (line,) = [ln for ln in err.splitlines() if ln.startswith("npu-rl: error:")]
    assert line.startswith("npu-rl: error: the sandbox was unreachable for ")
    assert "nothing answers at http://127.0.0.1:" in line
    assert "checkpoints up to step 2 are kept; re-run once the sandbox answers to resume" in line
    assert "Traceback" not in out + err
    # Stopped within a step or two of the allowance, not at the end of the run.
    steps = [r["step"] for r in run["metrics_before_resume"]]
    assert max(steps) < STEPS


def test_the_same_command_resumes_once_the_sandbox_is_back(run):
    code, out, err = run["second"]
    assert code == 0, (out[-2000:], err[-2000:])
    assert "resuming tiny_agent_cpu from global_step_2" in out
    assert f"finished at global_step_{STEPS}" in out
    resumed = [r for r in run["metrics"] if r["step"] > 2]
    assert {r["step"] for r in resumed} >= set(range(3, STEPS + 1))
    errors = {r["step"]: r["data"]["reward/tool_errors"] for r in resumed if r["step"] > 4}
    # What the sandbox answered (its busy turn-aways among them) says why, if a call did not run.
    assert not any(errors.values()), (errors, run.get("health_after_resume"))
