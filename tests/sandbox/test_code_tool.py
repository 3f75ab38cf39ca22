"""The agent's code interpreter (npu_rl.agent.code_tool) against a running `npu-rl sandbox serve`: what the
policy reads back for each way a call ends, an attack through the tool contained, and the outage stop.

The tool is the class verl's tool agent loop instantiates from the launch's tool file, called as the loop
calls it (``execute`` in its handler, ``release`` in its ``finally``); tests/e2e/test_agent_run.py runs it
inside verl 0.9's loop."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from conftest import CANARY, Server, serve_argv

from npu_rl.agent import code_tool, outage
from npu_rl.agent.outage import FILE_ENV, SandboxDown, verdict_error
from npu_rl.cluster.probe import free_port
from npu_rl.reward.agent import TOOL_NOT_RUN, TOOL_RAN
from npu_rl.sandbox.client import URL_ENV

UID_BASE = 61300  # this module's slot users (tests/sandbox/conftest.py)


def make_tool(url: str, **config) -> code_tool.CodeInterpreterTool:
    code_tool._OUTAGES.clear()  # one per process and allowance: each test its own
    return code_tool.CodeInterpreterTool({"type": "native", "url": url, **config})


def call(tool, parameters) -> tuple[str, float]:
    async def once():
        instance, _ = await tool.create()
        try:
            response, score, _ = await tool.execute(instance, parameters)
        finally:
            await tool.release(instance)
        return response.text, score

    return asyncio.run(once())


def test_a_call_hands_back_what_the_code_printed(server):
    text, score = call(make_tool(server.url + "/run_code"), {"code": "print(426 * 39)"})
    assert (text, score) == ("16614", TOOL_RAN)


def test_the_url_comes_from_the_launch(server, monkeypatch):
    monkeypatch.setenv(URL_ENV, server.url + "/run_code")
    code_tool._OUTAGES.clear()
    tool = code_tool.CodeInterpreterTool({"type": "native"})
    assert call(tool, {"code": "print(7)"})[0] == "7"


@pytest.mark.parametrize(
    "parameters, expected",
    [
        ({"code": "import sys\nprint('partial')\nsys.exit(3)"}, "partial\n(exit code 3)"),
        ({"code": "1/0"}, "ZeroDivisionError"),
        ({"code": "while True: pass"}, "(timed out)"),
        ({"code": "```python\nprint(2 + 2)\n```"}, "4"),
        ("print(5)", "5"),  # arguments written as a string: hermes hands the string over
    ],
)
def test_each_way_a_call_ends_is_text_the_policy_reads(server, parameters, expected):
    text, score = call(make_tool(server.url + "/run_code", run_timeout=2), parameters)
    assert score == TOOL_RAN
    if expected is not None:
        assert expected in text


def test_a_call_without_code_is_told_how_to_call(server):
    before = server.health()["runs"]
    text, score = call(make_tool(server.url + "/run_code"), {"script": "print(1)"})
    assert "needs its code" in text and score == TOOL_RAN
    assert server.health()["runs"] == before  # nothing was sent


def test_an_answer_longer_than_the_recipe_allows_is_cut(server):
    text, _ = call(make_tool(server.url + "/run_code", max_chars=50), {"code": "print('x' * 10000)"})
    assert len(text) <= 50 + len("...(truncated)") and text.endswith("...(truncated)")


def test_the_policys_code_cannot_read_the_run_s_environment_through_the_tool(server, monkeypatch):
    # The server's environment holds the canary (conftest), as a training node's holds its secrets.
    text, _ = call(make_tool(server.url + "/run_code"), {"code": f"import os; print(os.environ.get({CANARY[0]!r}))"})
    assert CANARY[1] not in text and text == "None"


def test_an_unreachable_sandbox_is_an_answer_not_a_crash():
    tool = make_tool(f"http://127.0.0.1:{free_port()}/run_code", down_s=3600)
    text, score = call(tool, {"code": "print(1)"})
    assert text.startswith(code_tool.ERROR_PREFIX + "nothing answers") and score == TOOL_NOT_RUN


def test_every_call_failing_for_the_allowance_stops_the_rollout(tmp_path, monkeypatch):
    verdict = tmp_path / "outage.json"
    monkeypatch.setenv(FILE_ENV, str(verdict))
    now = [1000.0]
    tool = make_tool(f"http://127.0.0.1:{free_port()}/run_code", down_s=30)
    tool.outage._clock = lambda: now[0]
    call(tool, {"code": "print(1)"})  # the first failure starts the clock
    now[0] += 29
    call(tool, {"code": "print(1)"})  # within the allowance: the policy reads the error, the rollout goes on
    assert not verdict.exists()
    now[0] += 2
    monkeypatch.setattr(outage, "HOLD_S", 3.0)
    seen_while_held = []

    async def watch():
        # The launch's side: the verdict is there while the rollout is still held, so no step finishes.
        task = asyncio.ensure_future(asyncio.to_thread(call, tool, {"code": "print(1)"}))
        for _ in range(25):
            await asyncio.sleep(0.1)
            if verdict.exists():
                seen_while_held.append(not task.done())
                break
        return await task

    with pytest.raises(SandboxDown, match=r"unreachable for 31s \(3 tool calls failed"):
        asyncio.run(watch())
    assert seen_while_held == [True]
    assert "nothing answers" in verdict_error(verdict)
    assert json.loads(verdict.read_text())["pid"] > 0


def test_without_a_launch_watching_the_rollout_fails_at_once(monkeypatch):
    monkeypatch.delenv(FILE_ENV, raising=False)
    tool = make_tool(f"http://127.0.0.1:{free_port()}/run_code", down_s=0.05)
    call(tool, {"code": "print(1)"})
    time.sleep(0.1)
    with pytest.raises(SandboxDown):  # nothing would stop the run: failing the rollout is all that is left
        call(tool, {"code": "print(1)"})


def test_a_call_that_gets_through_ends_the_outage(server, tmp_path, monkeypatch):
    monkeypatch.setenv(FILE_ENV, str(tmp_path / "outage.json"))
    now = [0.0]
    down = make_tool(f"http://127.0.0.1:{free_port()}/run_code", down_s=30)
    up = code_tool.CodeInterpreterTool({"type": "native", "url": server.url + "/run_code", "down_s": 30})
    assert up.outage is down.outage  # a worker's tools share one record of the service
    down.outage._clock = lambda: now[0]
    call(down, {"code": "print(1)"})
    call(up, {"code": "print(1)"})
    now[0] += 60
    call(down, {"code": "print(1)"})  # a new outage, 0 s old
    assert not (tmp_path / "outage.json").exists()


class _Flaky(BaseHTTPRequestHandler):
    """A SandboxFusion that answers its ping and fails ``/run_code`` with ``status`` (503 at first ``busy``
    times, then a run)."""

    status = 500
    busy = 0

    def do_GET(self):  # noqa: N802 (http.server's name)
        self.send_response(200)
        self.end_headers()
        self.wfile.write(b"pong")

    def do_POST(self):  # noqa: N802
        self.rfile.read(int(self.headers["Content-Length"]))
        cls = type(self)
        if cls.busy > 0:
            cls.busy -= 1
            self.send_response(503)
            self.send_header("Retry-After", "0.1")
            self.end_headers()
            return
        if cls.status != 200:
            self.send_response(cls.status)
            self.end_headers()
            self.wfile.write(json.dumps({"error": "no"}).encode())
            return
        self.send_response(200)
        self.end_headers()
        answer = {"status": "Success", "run_result": {"status": "Finished", "return_code": 0, "stdout": "ok\n"}}
        self.wfile.write(json.dumps(answer).encode())

    def log_message(self, *args):
        pass


@pytest.fixture
def flaky():
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Flaky)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}/run_code", _Flaky
    server.shutdown()
    server.server_close()


def test_a_sandbox_that_still_answers_its_ping_is_not_down(flaky, tmp_path, monkeypatch):
    url, handler = flaky
    handler.status, handler.busy = 500, 0
    monkeypatch.setenv(FILE_ENV, str(tmp_path / "outage.json"))
    now = [0.0]
    tool = make_tool(url, down_s=30)
    tool.outage._clock = lambda: now[0]
    call(tool, {"code": "print(1)"})
    now[0] += 60  # minutes of failed calls apart, as between two rollouts: the ping decides
    text, score = call(tool, {"code": "print(1)"})
    assert "HTTP 500" in text and score == TOOL_NOT_RUN
    assert not (tmp_path / "outage.json").exists() and tool.outage.first_failure is None


def test_a_request_the_sandbox_refuses_is_no_outage(flaky):
    url, handler = flaky
    handler.status, handler.busy = 400, 0
    tool = make_tool(url, down_s=0.001)
    text, score = call(tool, {"code": "print(1)"})  # a policy can make a request the sandbox refuses, at will
    assert "HTTP 400" in text and score == TOOL_NOT_RUN and tool.outage.first_failure is None


def test_a_busy_sandbox_is_asked_again(flaky, tmp_path, monkeypatch):
    url, handler = flaky
    handler.status, handler.busy = 200, 2
    assert call(make_tool(url), {"code": "print(1)"}) == ("ok", TOOL_RAN)
    handler.busy = 10**6
    monkeypatch.setenv(FILE_ENV, str(tmp_path / "outage.json"))
    tool = make_tool(url, down_s=30, busy_wait=1)
    now = [0.0]
    tool.outage._clock = lambda: now[0]
    text, score = call(tool, {"code": "print(1)"})
    assert "stayed busy for 1s" in text and score == TOOL_NOT_RUN
    assert tool.outage.first_failure == 0.0  # a failure: a gateway may answer 503 for a sandbox that is gone
    now[0] += 60
    call(tool, {"code": "print(1)"})
    # Busy past the allowance, but this sandbox answers its ping: up, no verdict.
    assert tool.outage.first_failure is None and not (tmp_path / "outage.json").exists()


def test_a_burst_larger_than_the_sandboxs_queue_all_runs(server, tmp_path, monkeypatch):
    """Every agent loop worker's calls at once, as a rollout sends them, against one slot and no queue: the
    calls turned away as busy come back, spread out, until the sandbox runs each (a count of tries failed
    some of them in CI, where the jails ran slower beside the training)."""
    monkeypatch.setenv(FILE_ENV, str(tmp_path / "outage.json"))
    # Its own slot user beside the module's server (which stays idle meanwhile).
    one = Server(serve_argv("--uid-base", str(UID_BASE + 10), "--slots", "1", "--queue", "0"))
    try:
        # A loaded host runs each jail for seconds: the wait is what the test leaves to the sandbox's pace.
        tool = make_tool(one.url + "/run_code", down_s=0.001, busy_wait=600)

        async def burst():
            async def one_call(i):
                instance, _ = await tool.create()
                try:
                    response, score, _ = await tool.execute(instance, {"code": f"print({i} * 7)"})
                finally:
                    await tool.release(instance)
                return response.text, score

            return await asyncio.gather(*(one_call(i) for i in range(24)))

        answers = asyncio.run(burst())
        health = one.health()
    finally:
        one.stop()
    assert answers == [(str(i * 7), TOOL_RAN) for i in range(24)]
    assert health["rejected"].get("503", 0) > 0  # the burst really was turned away at first
    assert not (tmp_path / "outage.json").exists()
