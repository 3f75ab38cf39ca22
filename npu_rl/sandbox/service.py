"""`npu-rl sandbox serve`'s HTTP service: SandboxFusion's ``/run_code``, ``/v1/ping`` and ``/health``.

At most ``slots`` executions run at once and at most ``queue`` more wait for a slot; past that a request
gets 503 at once (with Retry-After), so a flood costs a bounded amount of memory and a healthy client
always gets an answer. A request the server will not run gets a 4xx with one line (``{"error": ...}``); a
failure of the sandbox itself is SandboxFusion's ``SandboxError`` status. SIGTERM (and SIGINT) kill every
execution in flight and end the service.
"""

from __future__ import annotations

import asyncio
import json
import signal
from collections import Counter
from dataclasses import dataclass, field

from aiohttp import web

from .execute import Executor, Outcome
from .request import Caps, RequestError, RunCodeResponse, parse

RETRY_AFTER_S = "1"
BODY_TIMEOUT_S = 30.0


def _dumps(data) -> str:
    # Output as it is: escaped to ASCII, a replaced undecodable byte would take 6 bytes of the answer.
    return json.dumps(data, ensure_ascii=False)


@dataclass
class Counters:
    runs: int = 0
    by_status: Counter = field(default_factory=Counter)
    rejected: Counter = field(default_factory=Counter)  # by HTTP status


class Service:
    def __init__(self, executor: Executor, caps: Caps, slots: int, queue: int):
        self.executor, self.caps, self.slots, self.queue = executor, caps, slots, queue
        self.pending = 0  # running or waiting for a slot
        self.counters = Counters()

    def _reject(self, message: str, status: int) -> web.Response:
        self.counters.rejected[str(status)] += 1
        headers = {"Retry-After": RETRY_AFTER_S} if status == 503 else None
        return web.json_response({"error": message}, status=status, headers=headers)

    async def run_code(self, request: web.Request) -> web.Response:
        # The place in the queue first: a flood of bodies is turned away before any of them is read.
        if self.pending >= self.slots + self.queue:
            return self._reject(f"busy: {self.slots} running and {self.queue} waiting; retry later", 503)
        self.pending += 1
        try:
            try:
                body = json.loads(await asyncio.wait_for(request.read(), BODY_TIMEOUT_S))
            except asyncio.TimeoutError:
                return self._reject(f"the body took over {BODY_TIMEOUT_S:g} s to arrive", 408)
            except (ValueError, UnicodeDecodeError, RecursionError):
                return self._reject("the body is not JSON", 400)
            try:
                req = parse(body, self.caps)
            except RequestError as e:
                return self._reject(str(e), e.status)
            outcome: Outcome = await self.executor.run(req)
        finally:
            self.pending -= 1
        self.counters.runs += 1
        if outcome.run is None:
            self.counters.by_status["SandboxError"] += 1
            answer = RunCodeResponse(status="SandboxError", message=outcome.error or "")
        else:
            self.counters.by_status[outcome.run.status] += 1
            answer = RunCodeResponse.of(outcome.run)
        return web.json_response(answer.model_dump(), dumps=_dumps)

    async def ping(self, _: web.Request) -> web.Response:
        return web.Response(text="pong")

    async def health(self, _: web.Request) -> web.Response:
        c = self.counters
        return web.json_response(
            {
                "status": "ok",
                "slots": self.slots,
                "running": self.slots - self.executor.free.qsize(),
                "queue_depth": max(0, self.pending - self.slots),
                "queue_limit": self.queue,
                "runs": c.runs,
                "by_status": dict(c.by_status),
                "rejected": dict(c.rejected),
            }
        )


@web.middleware
async def _one_line_errors(request: web.Request, handler):
    """Whatever goes wrong in a handler is one line of JSON, never aiohttp's page or a traceback."""
    try:
        return await handler(request)
    except web.HTTPException as e:
        return web.json_response({"error": e.reason}, status=e.status)
    except Exception as e:  # noqa: BLE001 - the service answers and stays up
        message = f"{type(e).__name__}: {e}".splitlines()[0][:300]
        return web.json_response(RunCodeResponse(status="SandboxError", message=message).model_dump())


def app(service: Service) -> web.Application:
    # A body a little over the code and stdin caps: larger ones get 413 before they are read whole.
    application = web.Application(
        client_max_size=service.caps.max_code_bytes + service.caps.max_stdin_bytes + (1 << 16),
        middlewares=[_one_line_errors],
    )
    application.add_routes(
        [
            web.post("/run_code", service.run_code),
            web.get("/v1/ping", service.ping),
            web.get("/health", service.health),
        ]
    )

    async def _stop(_: web.Application) -> None:
        service.executor.kill_all()

    application.on_shutdown.append(_stop)
    return application


def serve(service: Service, host: str, port: int, ready) -> int:
    """Serve until SIGTERM or SIGINT; ``ready(url)`` once listening. The signal's exit code (128 + n)."""
    stopped: list[int] = []

    async def main() -> None:
        runner = web.AppRunner(app(service), handle_signals=False, access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, host, port, reuse_address=True)
        await site.start()
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()

        def on_signal(sig: int) -> None:
            stopped.append(sig)
            stop.set()

        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, on_signal, sig)
        bound = runner.addresses[0][1] if runner.addresses else port  # --port 0: the one the OS chose
        ready(f"http://{host}:{bound}")
        try:
            await stop.wait()
        finally:
            service.executor.kill_all()
            await runner.cleanup()

    asyncio.run(main())
    return 128 + stopped[0] if stopped else 0
