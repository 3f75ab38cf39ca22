"""The code interpreter of an agentic run: a verl 0.9 tool that runs the policy's code in the sandbox.

verl's tool agent loop (verl v0.9.0 ``experimental/agent_loop/tool_agent_loop.py``) parses a
``code_interpreter`` call from the policy's turn, calls ``execute`` and puts the text it returns into the
next turn as the tool's message. The code goes to npu-rl's sandbox (``NPU_RL_SANDBOX_URL``, which the launch
exports to every worker) or to the ``url`` of the tool's configuration: any SandboxFusion.

Whatever happens to one call becomes text the policy reads: the code's output, its exit code, its time
limit, or why the sandbox did not run it. Nothing a call does fails a rollout, with one exception: every
call failing for ``down_s`` (the sandbox is down, npu_rl.agent.outage). Then ``release`` records the
verdict and holds the rollout, so that no step finishes, while the launch, watching for the verdict, stops
the run. Only where nothing stops it does ``release`` raise: the loop catches what ``create`` and
``execute`` raise and turns it into tool text (``:524-526``), but calls ``release`` in its ``finally``
(``:527-530``), outside that handler, so the prompt's rollouts fail and verl 0.9 leaves the prompt out of
the step (trainer/ppo/v1/agent_loop_tq.py ``_run_prompt``) instead of training on its error text.

A call's score (verl's ``tool_rewards``, which only the reward function reads: ``:372-373``, and
``experimental/reward_loop/reward_manager/naive.py:45-47`` puts them into ``extra_info``) is ``RAN`` where
the sandbox ran the code, whatever its exit, and ``NOT_RUN`` where it did not: the agent rewards count the
calls and the failed ones from it (npu_rl.reward.agent).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import functools
import os
from typing import Any

from verl.tools.base_tool import BaseTool
from verl.tools.schemas import OpenAIFunctionToolSchema, ToolResponse

from ..data.tools import last_fenced_block
from ..reward.agent import TOOL_NOT_RUN as NOT_RUN
from ..reward.agent import TOOL_RAN as RAN
from ..sandbox import client
from .outage import Outage
from .tool_config import CODE_TOOL_SCHEMA

ERROR_PREFIX = "sandbox error: "
# max_chars bounds what one answer carries; verl's loop cuts it to the recipe's max_tool_response_length,
# keeping both ends (tool_agent_loop.py:532-540), where a traceback's last line is.
DEFAULTS = {
    "run_timeout": 10.0,
    "memory_mb": -1,
    "language": "python",
    "down_s": 120.0,
    "max_chars": 16384,
    "busy_wait": client.BUSY_WAIT_S,
}
# The calls wait on the sandbox in threads of their own, not in asyncio's default pool, which verl's loop
# decodes tokens in (tool_parser.py:112): a slow sandbox must not hold generation up.
_CALLS = concurrent.futures.ThreadPoolExecutor(max_workers=64, thread_name_prefix="npu-rl-sandbox-call")
# One per process: an agent loop worker loads its tools once (agent_loop.py:540-545), and an outage is the
# service's, not a tool instance's.
_OUTAGES: dict[float, Outage] = {}


def schema() -> OpenAIFunctionToolSchema:
    """What the policy is told of the tool: upstream's name and its one argument, ``code``."""
    return OpenAIFunctionToolSchema.model_validate(CODE_TOOL_SCHEMA)


def code_of(parameters: Any) -> str | None:
    """The call's code: hermes hands ``arguments`` over as an object, or re-dumped as a string where the
    policy wrote one (tool_parser.py:120-122). Code in fences runs as the last fenced block, whatever its
    language tag (```python, ```py, ```Python3)."""
    if isinstance(parameters, dict):
        code = parameters.get("code")
    elif isinstance(parameters, str):
        code = parameters
    else:
        return None
    if not isinstance(code, str) or not code.strip():
        return None
    return last_fenced_block(code)


def answer_text(answer: dict, max_chars: int) -> str:
    """The sandbox's answer as the policy reads it: what the code printed, then how it ended if not well."""
    run = answer.get("run_result") or {}
    out, err = str(run.get("stdout") or ""), str(run.get("stderr") or "")
    status, code = run.get("status"), run.get("return_code")
    parts = [out.rstrip("\n")] if out else []
    if err:
        parts.append(err.rstrip("\n"))
    if status == "TimeLimitExceeded":
        parts.append("(timed out)")
    elif code not in (0, None):
        parts.append(f"(exit code {code})")
    text = "\n".join(parts) if parts else "(no output)"
    return text if len(text) <= max_chars else text[:max_chars] + "...(truncated)"


class CodeInterpreterTool(BaseTool):
    """A verl 0.9 BaseTool; its configuration (npu_rl.agent.tool_config) sets ``run_timeout``, ``memory_mb``
    and ``down_s`` (and ``url``, ``max_chars``, ``busy_wait`` where not the defaults)."""

    def __init__(self, config: dict, tool_schema: OpenAIFunctionToolSchema | None = None):
        super().__init__(config, tool_schema or schema())
        settings = {**DEFAULTS, **{k: v for k, v in (config or {}).items() if k in DEFAULTS or k == "url"}}
        url = settings.get("url") or os.environ.get(client.URL_ENV)
        if not url:
            raise ValueError(f"code tool: no sandbox: set {client.URL_ENV} or the tool's url")
        self.url: str = str(url)
        self.run_timeout = float(settings["run_timeout"])
        self.memory_mb = int(settings["memory_mb"])
        self.language = str(settings["language"])
        self.max_chars = int(settings["max_chars"])
        self.busy_wait = float(settings["busy_wait"])
        down_s = float(settings["down_s"])
        self.outage = _OUTAGES.setdefault(down_s, Outage(down_s))

    def get_openai_tool_schema(self) -> OpenAIFunctionToolSchema:
        return schema()

    async def execute(self, instance_id: str, parameters: dict[str, Any], **kwargs) -> tuple[ToolResponse, float, dict]:
        code = code_of(parameters)
        if code is None:
            return ToolResponse(text='error: the call needs its code: {"code": "print(1 + 1)"}'), RAN, {}
        call = functools.partial(
            client.run_code,
            self.url,
            code,
            run_timeout=self.run_timeout,
            memory_mb=self.memory_mb,
            language=self.language,
            busy_wait_s=self.busy_wait,
        )
        try:
            answer = await asyncio.get_running_loop().run_in_executor(_CALLS, call)
        except client.Unavailable as e:
            # A request the sandbox refused (a 4xx: a policy can write one on purpose) says it is up; one it
            # kept turning away as busy counts as failed, and the ping in release decides (a gateway may
            # answer 503 for a sandbox that is gone).
            if e.refused:
                self.outage.reached()
            else:
                self.outage.failed(str(e))
            return ToolResponse(text=f"{ERROR_PREFIX}{e}"[: self.max_chars]), NOT_RUN, {"sandbox_error": 1}
        self.outage.reached()
        return ToolResponse(text=answer_text(answer, self.max_chars)), RAN, {"sandbox_error": 0}

    async def release(self, instance_id: str, **kwargs) -> None:
        if not self.outage.is_down:
            return
        # Failed calls may be minutes apart (a training phase between two rollouts): only a sandbox that does
        # not answer its ping now is down.
        if await asyncio.get_running_loop().run_in_executor(_CALLS, client.unanswered, self.url) is None:
            self.outage.reached()
            return
        await self.outage.stop()
