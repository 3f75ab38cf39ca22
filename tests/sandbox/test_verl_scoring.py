"""verl's own SandboxFusion scoring, from the cann9.1-verl0.9 line's environment, against `npu-rl sandbox
serve`: the code-RL reward (``default_compute_score`` of a ``codecontests`` sample with
``sandbox_fusion_url``, verl 0.9.0 ``utils/reward_score/__init__.py:73-81``) scores right, wrong and
timing-out solutions as it scores them against SandboxFusion."""

from __future__ import annotations

import json
import subprocess

import pytest
from needs import missing_setup

from npu_rl.paths import project_root

pytestmark = [pytest.mark.slow, pytest.mark.setup, pytest.mark.timeout(300)]
UID_BASE = 61200  # this module's slot users (tests/sandbox/conftest.py)

LINE_PYTHON = project_root() / ".venv-cann9.1-verl0.9" / "bin" / "python"

SCORE = """
import json, sys
from verl.utils.reward_score import default_compute_score, sandbox_fusion
url, cases = sys.argv[1], json.loads(sys.argv[2])
tests = {"inputs": ["1 2\\n", "40 2\\n"], "outputs": ["3\\n", "42\\n"]}
for name, completion in cases.items():
    # The reward manager's call, then the one it makes (which also returns each case's metadata).
    score = default_compute_score("codecontests", completion, tests, sandbox_fusion_url=url, memory_limit_mb=256)
    _, meta = sandbox_fusion.compute_score(url, None, 256, completion, tests, continuous=True)
    print(json.dumps({"name": name, "score": score, "status": [m.get("status") for m in meta]}))
"""

CASES = {
    "right": "```python\na, b = map(int, input().split())\nprint(a + b)\n```",
    "wrong": "```python\na, b = map(int, input().split())\nprint(a - b)\n```",
    "timeout": "```python\nwhile True:\n    pass\n```",
}


def test_verls_sandbox_fusion_reward_scores_through_the_service(server):
    if not LINE_PYTHON.exists():
        missing_setup("the cann9.1-verl0.9 line's environment", "make venv STACK=cann9.1-verl0.9")
    out = subprocess.run(
        [str(LINE_PYTHON), "-c", SCORE, server.url + "/run_code", json.dumps(CASES)],
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    got = {r["name"]: r for r in map(json.loads, out.stdout.splitlines())}
    assert got["right"]["score"] == 1.0 and got["right"]["status"] == ["success", "success"], got
    assert got["wrong"]["score"] == 0.0 and got["wrong"]["status"][0] == "wrong_answer", got
    assert got["timeout"]["score"] == 0.0 and got["timeout"]["status"][0] == "timeout", got
