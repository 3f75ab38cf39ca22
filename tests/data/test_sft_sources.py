"""The agent recipes' SFT data from the formats upstream reads (npu_rl.data.sft_sources), on small samples
written in those formats: ReTool-SFT's one-answer transcripts with ``<code>``/``<interpreter>``/``<answer>``
blocks, Open-AgentRL-SFT-3K's message lists; through `npu-rl data` and `npu-rl prepare` as a user runs them."""

from __future__ import annotations

import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from npu_rl.cli import main
from npu_rl.data import sft_sources
from npu_rl.data.tools import CODE_TOOL_NAME, CODE_TOOL_SCHEMA

RETOOL_PROMPT = (
    "Solve the following problem step by step. You now have the ability to selectively write executable Python "
    "code to enhance your reasoning process. Put your final answer in <answer>\\boxed{}</answer>.\n\n"
    "*user question:*\nWhat is the sum of the first 100 positive integers?\n\n<answer>\nRemember to box it.\n</answer>"
)
RETOOL_ANSWER = (
    "Let me compute the sum directly.\n<code>\n```python\nprint(sum(range(1, 101)))\n```\n</code>\n"
    "<interpreter>\n5050\n</interpreter>\nChecking with the formula n(n+1)/2:\n<code>\nprint(100 * 101 // 2)\n"
    "</code>\n<interpreter>5050</interpreter>\nBoth agree.\n<answer>\n\\boxed{5050}\n</answer>"
)
RETOOL = [
    {"messages": [{"role": "user", "content": RETOOL_PROMPT}, {"role": "assistant", "content": RETOOL_ANSWER}]},
    {"messages": [{"role": "user", "content": "no marker here"}, {"role": "assistant", "content": "x"}]},
]


def _call(code: str, language: str | None = None) -> dict:
    args = {"code": code} if language is None else {"code": code, "language": language}
    return {"type": "function", "function": {"name": "code_interpreter", "arguments": json.dumps(args)}}


AGENT = [
    {  # a coding trajectory with tool use: kept
        "messages": [
            {"role": "user", "content": "Read n and print n squared."},
            {"role": "assistant", "content": "Let me test.", "tool_calls": [_call("print(3 ** 2)", "python")]},
            {"role": "tool", "content": "9"},
            {"role": "assistant", "content": "```python\nn = int(input())\nprint(n * n)\n```"},
        ]
    },
    {  # math: its last turn boxes an answer
        "messages": [
            {"role": "user", "content": "2 + 2?"},
            {"role": "assistant", "content": "", "tool_calls": [_call("print(2 + 2)")]},
            {"role": "tool", "content": "4"},
            {"role": "assistant", "content": "```python\nprint(4)\n```\n\\boxed{4}"},
        ]
    },
    {  # no tool turn
        "messages": [
            {"role": "user", "content": "Print hi."},
            {"role": "assistant", "content": "```python\nprint('hi')\n```"},
        ]
    },
]


def _write(tmp_path, name: str, rows: list[dict]):
    path = tmp_path / "raw" / name
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_pylist(rows), path)
    return path.parent


def test_a_retool_answer_becomes_tool_calls_and_the_interpreters_turns():
    turns = sft_sources.retool_messages(RETOOL[0])
    assert [t["role"] for t in turns] == ["user", "assistant", "tool", "assistant", "tool", "assistant"]
    assert turns[0]["content"] == "What is the sum of the first 100 positive integers?\n\n\nRemember to box it."
    first, second = turns[1], turns[3]
    assert first["content"] == "Let me compute the sum directly."
    call = first["tool_calls"][0]["function"]
    assert call["name"] == CODE_TOOL_NAME and call["arguments"] == {"code": "print(sum(range(1, 101)))"}
    assert second["content"] == "Checking with the formula n(n+1)/2:"
    assert second["tool_calls"][0]["function"]["arguments"] == {"code": "print(100 * 101 // 2)"}
    assert turns[2]["content"] == "5050" and turns[4]["content"] == "5050"
    assert turns[5] == {"role": "assistant", "content": "Both agree.\n\n\\boxed{5050}"}


def test_a_retool_row_without_its_question_is_skipped():
    assert sft_sources.retool_messages(RETOOL[1]) is None


def test_npu_rl_data_retool_sft_writes_verls_rows(tmp_path, capsys):
    raw = _write(tmp_path, "train-00000-of-00001.parquet", RETOOL)
    assert main(["data", "retool-sft", "--from", str(raw), "--out", str(tmp_path / "out")]) == 0
    assert "1 row(s) without a user question and the assistant's answer skipped" in capsys.readouterr().out
    (row,) = pq.read_table(tmp_path / "out" / "train.parquet").to_pylist()
    assert row["tools"] == [CODE_TOOL_SCHEMA]  # the RL stage's tool, rendered into the same system prompt
    assert len(row["messages"]) == 6
    assert row["messages"][1]["tool_calls"][0]["function"]["arguments"] == {"code": "print(sum(range(1, 101)))"}


def test_only_coding_trajectories_with_tool_use_are_kept_as_upstreams_filter_keeps_them(tmp_path):
    raw = _write(tmp_path, "data.parquet", AGENT)
    counts = sft_sources.prepare_agent_sft(tmp_path / "out", raw)
    assert counts == {"train": 1}
    (row,) = pq.read_table(tmp_path / "out" / "train.parquet").to_pylist()
    assert [m["role"] for m in row["messages"]] == ["user", "assistant", "tool", "assistant"]
    args = row["messages"][1]["tool_calls"][0]["function"]["arguments"]
    assert json.loads(args) == {"code": "print(3 ** 2)", "language": "python"}  # a string: no null keys
    assert row["tools"] == [CODE_TOOL_SCHEMA]


def test_a_rows_own_tools_are_kept(tmp_path):
    own = [{**CODE_TOOL_SCHEMA, "function": {**CODE_TOOL_SCHEMA["function"], "description": "theirs"}}]
    raw = _write(tmp_path, "data.jsonl", [])
    (raw / "data.jsonl").write_text(json.dumps({**AGENT[0], "tools": json.dumps(own)}) + "\n")
    sft_sources.prepare_agent_sft(tmp_path / "out", raw / "data.jsonl")
    (row,) = pq.read_table(tmp_path / "out" / "train.parquet").to_pylist()
    assert row["tools"][0]["function"]["description"] == "theirs"


def test_a_set_with_no_usable_row_writes_nothing(tmp_path, capsys):
    raw = _write(tmp_path, "data.parquet", AGENT[1:])
    assert main(["data", "agent-sft", "--from", str(raw), "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("npu-rl: error: ") and "no usable row" in err
    assert not (tmp_path / "out" / "train.parquet").exists()


@pytest.mark.parametrize(
    "recipe, raw_name, rows, out",
    [
        ("qwen3_4b_retool_sft_a3", "ReTool-SFT", RETOOL, "retool-sft"),
        ("qwen3_1_7b_code_toolcall_sft_a2", "Open-AgentRL-SFT-3K", AGENT, "agent-sft"),
    ],
)
def test_prepare_converts_each_sft_recipes_set_from_its_download(recipe, raw_name, rows, out, tmp_path, monkeypatch):
    from npu_rl.launcher.prepare import prepare_data
    from npu_rl.recipe import load_recipe

    monkeypatch.setenv("NPU_RL_WORKSPACE", str(tmp_path))
    raw = tmp_path / "data" / raw_name / "data"  # the hub's layout under data.source_dir
    raw.mkdir(parents=True)
    pq.write_table(pa.Table.from_pylist(rows), raw / "train-00000-of-00001.parquet")
    prepare_data(load_recipe(recipe))
    assert pq.read_metadata(tmp_path / "data" / out / "train.parquet").num_rows == 1
