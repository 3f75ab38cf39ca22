"""The agent demo's task (npu_rl.data.arithmetic): rows verl's tool agent loop runs, and transcripts whose
tool calls verl's hermes parser reads."""

from __future__ import annotations

import json
import re

import pyarrow.parquet as pq

from npu_rl.data import arithmetic
from npu_rl.data.tools import CODE_TOOL_SCHEMA

# verl v0.9.0 experimental/agent_loop/tool_parser.py:105, the hermes format's pattern.
HERMES = re.compile(r"<tool_call>(.*?)</tool_call>", re.DOTALL)


def test_no_held_out_problem_is_trained_on():
    splits = arithmetic.problems()
    assert not set(splits["train"]) & set(splits["test"])
    assert splits == arithmetic.problems()  # deterministic


def test_the_teacher_calls_the_tool_about_half_the_time_and_otherwise_misses():
    pairs = arithmetic.problems()["train"]
    conversations = arithmetic.transcripts(pairs)
    called = [c for c in conversations if len(c) == 4]
    assert 0.4 < len(called) / len(conversations) < 0.6
    for (a, b), c in zip(pairs, conversations):
        final = c[-1]["content"]
        assert (final == f"\\boxed{{{a * b}}}") == (len(c) == 4)


def test_a_call_is_one_verls_parser_reads():
    (conversation,) = [c for c in arithmetic.transcripts(arithmetic.problems()["train"][:8]) if len(c) == 4][:1]
    (match,) = HERMES.findall(conversation[1]["content"])
    call = json.loads(match)
    assert call["name"] == arithmetic.TOOL_NAME
    assert eval(call["arguments"]["code"].removeprefix("print(").removesuffix(")")) == int(conversation[2]["content"])


def test_the_files_name_the_tool_agent_loop(tmp_path):
    counts = arithmetic.write(tmp_path)
    assert counts == {"train": 512, "test": 64, "sft": 512, "sft_val": 64}
    row = pq.read_table(tmp_path / "train.parquet").to_pylist()[0]
    assert row["agent_name"] == "tool_agent" and row["reward_model"]["ground_truth"].isdigit()
    sft = pq.read_table(tmp_path / "sft.parquet")
    assert sft.column_names == ["messages", "tools"]  # the tools the SFT dataset renders into the system prompt
    assert sft.to_pylist()[0]["tools"] == [CODE_TOOL_SCHEMA]
