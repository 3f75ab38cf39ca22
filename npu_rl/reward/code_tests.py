"""The reward of a code agent: the problem's tests run in the sandbox against the policy's final program.

cann-recipes-train's code recipe (agent_rl/qwen3_code_toolcall/scalebox.py ``compute_score``) sends the whole
response to ScaleBox's ``/common_evaluate_batch`` and scores 1.0 where every test passes, otherwise the
share that passed. npu-rl does the same through SandboxFusion's ``/run_code``, which npu-rl's sandbox and any
SandboxFusion serve: the program is the last fenced code block of the response after its reasoning, and
each test is one run of it, in a jail of its own (npu_rl.sandbox).

``ground_truth`` is the test set as upstream's data carries it (build_dataset.py): JSON with ``inputs`` and
``outputs`` (``input``/``output`` also read), and ``fn_name`` for a function-call problem, whose inputs are
the arguments as JSON lists. A stdin problem passes where the program's stdout equals the expected output
line by line, trailing blanks ignored.

The sandbox is the run's (``NPU_RL_SANDBOX_URL``). A test the sandbox did not run scores as failed and is
counted apart (``sandbox_errors``): a reward never raises and never waits past its tests' time.
"""

from __future__ import annotations

import json
import os
import re
from typing import Any

from npu_rl.sandbox import client

FENCE = re.compile(r"```[a-zA-Z0-9_+-]*\n(.*?)```", re.DOTALL)
THINK_END = "</think>"
MAX_TESTS = 16
RUN_TIMEOUT_S = 10.0
# A function-call test: the program defines the function; this runs it on the arguments and prints JSON.
_CALL = """
import json as _json, sys as _sys
_args = _json.loads(_sys.stdin.read())
_result = {fn}(*_args)
print(_json.dumps(_result))
"""


def program(response: str) -> str | None:
    """The last fenced block after the reasoning, or None."""
    text = response.split(THINK_END)[-1] if isinstance(response, str) else ""
    blocks = FENCE.findall(text)
    return blocks[-1] if blocks else None


def tests_of(ground_truth: Any) -> tuple[list[str], list[str], str | None]:
    data = json.loads(ground_truth) if isinstance(ground_truth, str) else dict(ground_truth)
    inputs = data.get("inputs", data.get("input"))
    outputs = data.get("outputs", data.get("output"))
    if not isinstance(inputs, list) or not isinstance(outputs, list) or len(inputs) != len(outputs):
        raise ValueError("ground_truth needs inputs and outputs of one length")
    return [_text(i) for i in inputs], [_text(o) for o in outputs], data.get("fn_name") or None


def _text(v: Any) -> str:
    return v if isinstance(v, str) else json.dumps(v)


def _same(got: str, expected: str, fn: str | None) -> bool:
    if fn is not None:
        # The harness prints the result last (the program may print before it); verifiable-coding data wraps
        # some expected results in a one-element list, which verl's prime_code accepts too.
        try:
            result, want = json.loads(got.strip().splitlines()[-1]), json.loads(expected)
        except (ValueError, IndexError):
            return False
        return result == want or [result] == want
    lines = lambda s: [ln.rstrip() for ln in s.strip().splitlines()]  # noqa: E731
    return lines(got) == lines(expected)


def compute_score(
    data_source: Any,
    solution_str: str,
    ground_truth: Any,
    extra_info: Any = None,
    *,
    run_timeout_s: float = RUN_TIMEOUT_S,
    max_tests: int = MAX_TESTS,
    **_: Any,
) -> dict[str, Any]:
    """Score one response by its tests; never raises."""
    from npu_rl.reward.agent import tool_calls  # absolute: verl loads this file by its path

    turns, calls, errors = tool_calls(extra_info)
    parts = {"turns": float(turns), "tool_calls": float(calls), "tool_errors": float(errors)}
    code = program(solution_str)
    try:
        inputs, outputs, fn = tests_of(ground_truth)
    except (ValueError, TypeError):
        inputs, outputs, fn = [], [], None
    url = os.environ.get(client.URL_ENV)
    if code is None or not inputs or not url:
        return {"score": 0.0, "acc": 0.0, "passed": 0.0, "sandbox_errors": 0.0, **parts}
    source = code + (_CALL.format(fn=fn) if fn else "")
    passed = unrun = 0
    cases = list(zip(inputs, outputs))[:max_tests]
    for stdin, expected in cases:
        try:
            answer = client.run_code(url, source, run_timeout=run_timeout_s, stdin=stdin)
        except client.Unavailable:
            unrun += 1
            continue
        run = answer.get("run_result") or {}
        if answer.get("status") == "Success" and _same(str(run.get("stdout") or ""), expected, fn):
            passed += 1
    share = passed / len(cases)
    return {
        "score": 1.0 if passed == len(cases) else share,
        "acc": float(passed == len(cases)),
        "passed": share,
        "sandbox_errors": float(unrun),
        **parts,
    }
