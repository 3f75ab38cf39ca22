"""The code interpreter of an agentic run: a verl 0.9 tool that runs the policy's code in the sandbox.

verl's tool agent loop (verl v0.9.0 ``experimental/agent_loop/tool_agent_loop.py``) parses a
``code_interpreter`` call from the policy's turn, calls ``execute`` and puts the text it returns into the
next turn as the tool's message. The code goes to npu-rl's sandbox (``NPU_RL_SANDBOX_URL``, which the launch
exports to every worker) or to the ``url`` of the tool's configuration: any SandboxFusion.

Whatever happens to one call becomes text the policy reads: the code's output, its exit code, its time
limit, or why the sandbox did not run it. Nothing a call does fails a rollout, with one exception: every
call failing for ``down_s`` (the sandbox is down, npu_rl.agent.outage). Then ``release`` records the verdict
and raises. The loop catches what ``create`` and ``execute`` raise and turns it into tool text (``:524-526``),
but calls ``release`` in its ``finally`` (``:527-530``), outside that handler: the prompt's rollouts fail,
and verl 0.9 leaves the prompt out of the step (trainer/ppo/v1/agent_loop_tq.py ``_run_prompt``) instead of
training on its error text. The launch, watching for the verdict, stops the run.

A call's score (verl's ``tool_rewards``, which only the reward function reads: ``:372-373``, and
``experimental/reward_loop/reward_manager/naive.py:45-47`` puts them into ``extra_info``) is ``RAN`` where
the sandbox ran the code, whatever its exit, and ``NOT_RUN`` where it did not: the agent rewards count the
calls and the failed ones from it (npu_rl.reward.agent).
"""

from __future__ import annotations

import asyncio
import os
from typing import Any

from verl.tools.base_tool import BaseTool
from verl.tools.schemas import OpenAIFunctionToolSchema, ToolResponse

from ..reward.agent import TOOL_NOT_RUN as NOT_RUN
from ..reward.agent import TOOL_RAN as RAN
from ..sandbox import client
from .outage import Outage
from .tool_config import CODE_TOOL_SCHEMA

ERROR_PREFIX = "sandbox error: "
DEFAULTS = {"run_timeout": 10.0, "memory_mb": -1, "language": "python", "down_s": 120.0, "max_chars": 4096}
# One per process: an agent loop worker loads its tools once (agent_loop.py:540-545), and an outage is the
# service's, not a tool instance's.
_OUTAGES: dict[float, Outage] = {}


def schema() -> OpenAIFunctionToolSchema:
    """What the policy is told of the tool: upstream's name and its one argument, ``code``."""
    return OpenAIFunctionToolSchema.model_validate(CODE_TOOL_SCHEMA)


def code_of(parameters: Any) -> str | None:
    """The call's code: hermes hands ``arguments`` over as an object, or re-dumped as a string where the
    policy wrote one (tool_parser.py:120-122); a fenced block is unwrapped, as upstream's ReTool tool does."""
    if isinstance(parameters, dict):
        code = parameters.get("code")
    elif isinstance(parameters, str):
        code = parameters
    else:
        return None
    if not isinstance(code, str) or not code.strip():
        return None
    if "```" in code:
        inner = code.split("```", 2)[1]
        code = inner.split("\n", 1)[1] if inner.startswith(("python\n", "py\n")) else inner
    return code


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
    """A verl 0.9 BaseTool; its configuration (npu_rl.agent.tool_config) sets ``url``, ``run_timeout``,
    ``memory_mb``, ``down_s`` and ``max_chars`` (the recipe's ``max_tool_response_length``)."""

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
        down_s = float(settings["down_s"])
        self.outage = _OUTAGES.setdefault(down_s, Outage(down_s))

    def get_openai_tool_schema(self) -> OpenAIFunctionToolSchema:
        return schema()

    async def execute(self, instance_id: str, parameters: dict[str, Any], **kwargs) -> tuple[ToolResponse, float, dict]:
        code = code_of(parameters)
        if code is None:
            return ToolResponse(text='error: the call needs its code: {"code": "print(1 + 1)"}'), RAN, {}
        try:
            answer = await asyncio.to_thread(
                client.run_code,
                self.url,
                code,
                run_timeout=self.run_timeout,
                memory_mb=self.memory_mb,
                language=self.language,
            )
        except client.Unavailable as e:
            self.outage.failed(str(e))
            return ToolResponse(text=f"{ERROR_PREFIX}{e}"[: self.max_chars]), NOT_RUN, {"sandbox_error": 1}
        self.outage.reached()
        return ToolResponse(text=answer_text(answer, self.max_chars)), RAN, {"sandbox_error": 0}

    async def release(self, instance_id: str, **kwargs) -> None:
        if self.outage.is_down:
            self.outage.stop()
