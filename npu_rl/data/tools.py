"""The code interpreter as the policy is told of it: the schema of the tool's one function, the same in a
rollout's prompt (npu_rl.agent.tool_config writes it into verl's tool file) and in an SFT row's ``tools``
(what the chat template renders into the system prompt), so that SFT and RL show the policy one prompt."""

from __future__ import annotations

import re
from typing import Any

CODE_TOOL_NAME = "code_interpreter"  # upstream's name (cann-recipes-train agent_rl, both recipes)
# verl's schema model keeps a property's type, description and enum only (verl v0.9.0 tools/schemas.py:21-38).
CODE_TOOL_SCHEMA: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": CODE_TOOL_NAME,
        "description": "Run Python code and see what it prints. Print what you want to know.",
        "parameters": {
            "type": "object",
            "properties": {"code": {"type": "string", "description": "The Python code to run"}},
            "required": ["code"],
        },
    },
}

# A code fence with any language tag (```python, ```py, ```Python3) or none.
FENCE = re.compile(r"```[ \t]*[A-Za-z0-9_+-]*[ \t]*\n(.*?)```", re.DOTALL)


def last_fenced_block(text: str) -> str:
    """The last fenced block of ``text``, or ``text`` itself where it has none: what a code call runs."""
    blocks = FENCE.findall(text)
    return blocks[-1] if blocks else text
