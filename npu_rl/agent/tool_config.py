"""verl's tool configuration file of a recipe, written at launch (verl v0.9.0 tools/tool_registry.py:55-75
reads ``tools[].class_name``, ``config.type`` (``native``) and ``tool_schema``). No verl here: the launch
writes it and the tiny model's format stage renders the same schema."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from .. import run_files
from ..data.tools import CODE_TOOL_NAME, CODE_TOOL_SCHEMA
from ..recipe.schema import Recipe

CODE_TOOL_CLASS = "npu_rl.agent.code_tool.CodeInterpreterTool"
__all__ = ["CODE_TOOL_CLASS", "CODE_TOOL_NAME", "CODE_TOOL_SCHEMA", "config", "path", "run_dir", "text"]


def run_dir(recipe: Recipe) -> Path:
    """Where a run's agent files go: under its checkpoint root, which every node of a cluster shares (the launch
    checks it: npu_rl.cluster.crossnode), since the agent loop workers on any node read the tool file and
    write the outage verdict there."""
    return run_files.checkpoint_root(recipe) / "agent"


def path(recipe: Recipe) -> Path:
    return run_dir(recipe) / "tools.yaml"


def config(recipe: Recipe) -> dict[str, Any]:
    """The file's content. The sandbox's URL is not in it: the tool reads NPU_RL_SANDBOX_URL, which the
    launch exports to every worker, so a rendered job's Service name reaches it the same way."""
    code = recipe.tools.code_interpreter
    tools = []
    if code.enabled:
        settings = {
            "type": "native",
            "run_timeout": code.run_timeout_s,
            "memory_mb": code.memory_mb,
            "down_s": code.down_s,
        }
        tools.append({"class_name": CODE_TOOL_CLASS, "config": settings, "tool_schema": CODE_TOOL_SCHEMA})
    return {"tools": tools}


def text(recipe: Recipe) -> str:
    return "# Written by npu-rl train from the recipe's tools (npu_rl.agent.tool_config); rewritten each launch.\n" + (
        yaml.safe_dump(config(recipe), sort_keys=False)
    )
