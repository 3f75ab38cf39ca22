"""The code agent's reward (npu_rl.reward.code_tests): the problem's tests run against the policy's program in
a running `npu-rl sandbox serve`, as a run's reward workers reach it (``NPU_RL_SANDBOX_URL``)."""

from __future__ import annotations

import json
import socket

import pytest

from npu_rl.cluster.probe import free_port
from npu_rl.reward import code_tests
from npu_rl.sandbox.client import URL_ENV

UID_BASE = 61350  # this module's slot users (tests/sandbox/conftest.py)
STDIN = json.dumps({"inputs": ["2\n", "5\n", "11\n"], "outputs": ["4\n", "10\n", "22\n"]})
CALL = json.dumps({"inputs": [[1, 2], [3, 4]], "outputs": [3, 7], "fn_name": "add", "type": "function_call"})


@pytest.fixture
def sandbox(server, monkeypatch):
    monkeypatch.setenv(URL_ENV, server.url + "/run_code")
    return server


def answer(code: str) -> str:
    return f"<think>print the double</think>\nHere it is:\n```python\n{code}\n```"


@pytest.mark.parametrize(
    "code, truth, score",
    [
        ("print(int(input()) * 2)", STDIN, 1.0),
        ("n = int(input())\nprint(n * 2 if n < 10 else 0)", STDIN, pytest.approx(2 / 3)),
        ("print(oops)", STDIN, 0.0),
        ("def add(a, b):\n    return a + b", CALL, 1.0),
        ("def add(a, b):\n    return a - b", CALL, 0.0),
        ("import time\ntime.sleep(60)", STDIN, 0.0),
    ],
)
def test_the_score_is_the_share_of_tests_passed(sandbox, code, truth, score):
    parts = code_tests.compute_score("codeforces", answer(code), truth, {"num_turns": 4, "tool_rewards": [0.0]},
                                     run_timeout_s=2)  # fmt: skip
    assert parts["score"] == score and parts["sandbox_errors"] == 0 and parts["tool_calls"] == 1


def test_a_response_without_a_program_scores_nothing(sandbox):
    before = sandbox.health()["runs"]
    assert code_tests.compute_score("x", "I would loop over the input.", STDIN)["score"] == 0.0
    assert sandbox.health()["runs"] == before


def test_the_programs_tests_cannot_reach_the_host(sandbox):
    # A listener on the host: a program in the jail that reached it would print what it answers and pass.
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        listener.settimeout(0.5)
        port = listener.getsockname()[1]
        steal = f"import socket\ns = socket.create_connection(('127.0.0.1', {port}), 2)\nprint(int(input()) * 2)"
        assert code_tests.compute_score("x", answer(steal), STDIN)["score"] == 0.0
        assert code_tests.compute_score("x", answer("print(int(input()) * 2)"), STDIN)["score"] == 1.0
        with pytest.raises(TimeoutError):
            listener.accept()  # no connection ever arrived


def test_a_function_may_print_and_its_result_may_be_listed_as_the_data_does(sandbox):
    listed = json.dumps({"inputs": [[1, 2]], "outputs": [[3]], "fn_name": "add"})
    code = "def add(a, b):\n    print('adding')\n    return a + b"
    assert code_tests.compute_score("x", answer(code), listed)["score"] == 1.0


def test_a_sandbox_that_is_down_scores_zero_and_is_counted_apart(monkeypatch):
    monkeypatch.setenv(URL_ENV, f"http://127.0.0.1:{free_port()}/run_code")
    parts = code_tests.compute_score("x", answer("print(int(input()) * 2)"), STDIN)
    assert (parts["score"], parts["sandbox_errors"]) == (0.0, 3.0)
