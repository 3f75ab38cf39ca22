"""A multi-turn recipe (``rollout.multi_turn``, ``tools``): what its launch hands verl, the tool file verl's
registry loads, and the recipes refused in one line. (Trained on CPU: tests/e2e/test_agent_run.py.)"""

from __future__ import annotations

import pytest
import yaml

from npu_rl.agent import code_tool, tool_config
from npu_rl.agent.code_tool import CodeInterpreterTool
from npu_rl.agent.outage import FILE_ENV
from npu_rl.cli import main
from npu_rl.launcher.overrides import build_overrides, run_env
from npu_rl.recipe import load_recipe
from npu_rl.sandbox.client import URL_ENV

RECIPE = "tiny_agent_cpu"


@pytest.fixture
def workspace(tmp_path, monkeypatch):
    monkeypatch.setenv("NPU_RL_WORKSPACE", str(tmp_path))
    return tmp_path


def test_the_launch_runs_every_prompt_through_the_tool_agent_loop(workspace):
    recipe = load_recipe(RECIPE)
    args = dict(o.split("=", 1) for o in build_overrides(recipe))
    mt = "actor_rollout_ref.rollout.multi_turn"
    assert args[f"{mt}.enable"] == "True" and args[f"{mt}.format"] == "hermes"
    assert args[f"{mt}.tool_config_path"] == str(tool_config.path(recipe))
    assert args[f"{mt}.max_tool_response_length"] == str(recipe.rollout.multi_turn.max_tool_response_length)
    assert args["actor_rollout_ref.rollout.agent.default_agent_loop"] == "tool_agent"
    assert args["data.return_raw_chat"] == "True"
    env = run_env(recipe, None)
    assert env[URL_ENV] == recipe.sandbox.run_code_url and env[FILE_ENV].endswith("sandbox_outage.json")


def test_verls_registry_loads_the_tool_file_the_launch_writes(workspace, monkeypatch):
    from verl.tools.utils.tool_registry import initialize_tools_from_config

    recipe = load_recipe(RECIPE, {"tools.code_interpreter.run_timeout_s": 3})
    path = tool_config.path(recipe)
    path.parent.mkdir(parents=True)
    path.write_text(tool_config.text(recipe))
    monkeypatch.setenv(URL_ENV, "http://sandbox.example:8080/run_code")
    (tool,) = initialize_tools_from_config(str(path))
    assert isinstance(tool, CodeInterpreterTool) and tool.name == "code_interpreter"
    assert (tool.url, tool.run_timeout) == ("http://sandbox.example:8080/run_code", 3.0)
    assert tool.max_chars == code_tool.DEFAULTS["max_chars"]  # verl cuts to max_tool_response_length
    assert yaml.safe_load(path.read_text())["tools"][0]["tool_schema"] == tool_config.CODE_TOOL_SCHEMA


@pytest.mark.parametrize(
    "sets, message",
    [
        ({"stack": "cann8.2-verl0.6", "rollout.name": "hf"}, "rollout.multi_turn on stack line cann8.2-verl0.6"),
        ({"sandbox.enabled": False}, "tools.code_interpreter runs the policy's code in the sandbox"),
        ({"tools.code_interpreter.enabled": False}, "rollout.multi_turn.enabled needs a tool"),
    ],
)
def test_a_recipe_whose_tools_cannot_run_is_refused_in_one_line(workspace, capsys, sets, message):
    args = [a for k, v in sets.items() for a in ("--set", f"{k}={v}")]
    assert main(["train", "--recipe", RECIPE, *args, "--dry-run"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("npu-rl: error: ") and message in err[0], err


@pytest.mark.parametrize(
    "sets, message",
    [
        (
            {"tools.code_interpreter.memory_mb": 4096},
            "memory_mb 4096 is outside what the sandbox serves (16..sandbox.memory_mb 1024",
        ),
        ({"tools.code_interpreter.memory_mb": 8}, "memory_mb 8 is outside"),
        ({"tools.code_interpreter.run_timeout_s": 120}, "run_timeout_s 120 is over the sandbox's 60 s"),
    ],
)
def test_tool_limits_the_sandbox_would_refuse_are_refused_at_once(workspace, capsys, sets, message):
    # Every call of such a run would get a 400 from npu-rl's own sandbox; a SandboxFusion of one's own
    # (sandbox.url) has limits npu-rl does not know.
    args = [a for k, v in sets.items() for a in ("--set", f"{k}={v}")]
    assert main(["train", "--recipe", RECIPE, *args, "--dry-run"]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert message in line
    own = ["--set", "sandbox.url=http://sandbox.example:8080/run_code"]
    assert main(["train", "--recipe", RECIPE, *args, *own, "--dry-run"]) == 0
