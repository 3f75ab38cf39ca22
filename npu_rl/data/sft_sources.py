"""The agent recipes' SFT data, from the formats upstream reads, into verl 0.9's multi-turn SFT rows: each row's
``messages`` (OpenAI roles, the policy's calls as ``tool_calls``) and the ``tools`` it offers, which the chat
template renders into the system prompt as the RL stage's tool agent loop does (verl v0.9.0
utils/dataset/multiturn_sft_dataset.py:167-171, :294-308).

- **ReTool-SFT** (``JoeYing/ReTool-SFT``, ReTool's SFT set): two messages a row, a user turn whose question
  follows ``*user question:*`` and one assistant text in which ``<code>`` blocks, each answered by an
  ``<interpreter>`` block, lead to an ``<answer>``. Split as ReTool's preprocessing splits it (verl 95470480
  recipe/retool/retool_sft_preprocess.py): each code block becomes an assistant turn calling the code
  interpreter with the text before it as its content, each interpreter block the tool's turn, and the answer
  the last assistant turn.
- **Open-AgentRL-SFT-3K** (``Gen-Verse/Open-AgentRL-SFT-3K``, the code agent's SFT set): rows already in
  messages form. Kept as cann-recipes-train's filter_sft_data.py keeps them: an assistant turn with a tool
  call, a tool turn, and a last assistant turn with a python fence and no ``\\boxed`` (code, not math).

Rows without their own ``tools`` get npu-rl's code interpreter (npu_rl.data.tools), the tool the RL stage
offers. Generated or downloaded by the user: npu-rl ships none of these sets.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from .agent_sources import read_rows, write_converted
from .tools import CODE_TOOL_NAME, CODE_TOOL_SCHEMA, last_fenced_block

QUESTION_MARK = "*user question:*"
_CODE = re.compile(r"<code>(.*?)</code>", re.DOTALL)
_INTERPRETER = re.compile(r"\s*<interpreter>(.*?)</interpreter>", re.DOTALL)
_ANSWER_TAGS = re.compile(r"</?answer>")


def _call(code: str) -> dict:
    return {"type": "function", "function": {"name": CODE_TOOL_NAME, "arguments": {"code": code}}}


def _code_of(block: str) -> str:
    return last_fenced_block(block).strip("\n")


def retool_messages(row: dict) -> list[dict] | None:
    """A ReTool-SFT row's turns, or None where it lacks the question or the assistant's text."""
    messages = row.get("messages")
    if not isinstance(messages, list) or len(messages) < 2:
        return None
    user, assistant = messages[0], messages[1]
    prompt = str(user.get("content") or "") if isinstance(user, dict) else ""
    text = str(assistant.get("content") or "") if isinstance(assistant, dict) else ""
    if QUESTION_MARK not in prompt or not text.strip():
        return None
    question = _ANSWER_TAGS.sub("", prompt.split(QUESTION_MARK, 1)[1]).strip()
    turns: list[dict] = [{"role": "user", "content": question}]
    pos = 0
    for code in _CODE.finditer(text):
        if code.start() < pos:
            continue
        answered = _INTERPRETER.match(text, code.end())
        if answered is None:
            break  # a call without the interpreter's answer ends the transcript's tool use
        before = text[pos : code.start()].strip()
        turns.append({"role": "assistant", "content": before, "tool_calls": [_call(_code_of(code.group(1)))]})
        turns.append({"role": "tool", "content": answered.group(1).strip()})
        pos = answered.end()
    final = _ANSWER_TAGS.sub("", text[pos:]).strip()
    if not final:
        return None
    turns.append({"role": "assistant", "content": final})
    return turns


def agent_sft_messages(row: dict) -> list[dict] | None:
    """An Open-AgentRL-SFT-3K row's turns where it is a coding trajectory with tool use, else None."""
    messages = row.get("messages")
    if isinstance(messages, str):
        try:
            messages = json.loads(messages)
        except ValueError:
            return None
    if not isinstance(messages, list) or not all(isinstance(m, dict) for m in messages):
        return None
    assistants = [m for m in messages if m.get("role") == "assistant"]
    if not assistants or not any(m.get("tool_calls") for m in assistants):
        return None
    if not any(m.get("role") == "tool" for m in messages):
        return None
    last = str(assistants[-1].get("content") or "")
    if "```python" not in last or "\\boxed" in last:
        return None
    return [_plain(m) for m in messages]


def _plain(message: dict) -> dict:
    """A message without empty keys; a call's arguments as a JSON string, which chat templates write as they
    are: parquet would give every row's arguments every key any row's has, as nulls."""
    out = {k: v for k, v in message.items() if v is not None}
    calls = []
    for call in out.get("tool_calls") or []:
        fn = dict(call.get("function") or {})
        if not isinstance(fn.get("arguments"), str):
            fn["arguments"] = json.dumps(fn.get("arguments") or {}, ensure_ascii=False)
        calls.append({**call, "function": fn})
    if calls:
        out["tool_calls"] = calls
    return out


def _tools(row: dict) -> list[dict]:
    tools = row.get("tools")
    if isinstance(tools, str):
        try:
            tools = json.loads(tools)
        except ValueError:
            tools = None
    return tools if isinstance(tools, list) and tools else [CODE_TOOL_SCHEMA]


def _prepare(out: Path, source: Path, to_messages, needs: str) -> dict[str, int]:
    rows, skipped = [], 0
    for row in read_rows(source, ("messages",)):
        messages = to_messages(row)
        if messages is None:
            skipped += 1
            continue
        rows.append({"messages": messages, "tools": _tools(row)})
    return write_converted(out, {"train": rows}, skipped, needs)


def prepare_retool_sft(out: Path, source: Path) -> dict[str, int]:
    return _prepare(out, source, retool_messages, "a user question and the assistant's answer")


def prepare_agent_sft(out: Path, source: Path) -> dict[str, int]:
    return _prepare(out, source, agent_sft_messages, "tool calls, a tool turn and a last turn of python code")
