"""The agent recipes' data from the formats upstream reads (npu_rl.data.agent_sources), on small samples
written in those formats: DAPO-Math-17k's verl rows, AIME 2025's problem/answer, PrimeIntellect's verifiable
coding problems; through `npu-rl data` and `npu-rl prepare` as a user runs them."""

from __future__ import annotations

import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from npu_rl.cli import main
from npu_rl.data import agent_sources

DAPO = [
    {
        "data_source": "math_dapo",
        "prompt": [{"role": "user", "content": "Solve 2x = 10. The last line is Answer: $Answer"}],
        "ability": "MATH",
        "reward_model": {"ground_truth": "5", "style": "rule-lighteval/MATH_v2"},
        "extra_info": {"index": "a1"},
    },
    {
        "data_source": "math_dapo",
        "prompt": [],
        "ability": "MATH",
        "reward_model": {"ground_truth": "1"},
        "extra_info": {},
    },
]
AIME = [
    {"id": 1, "problem": "Find the sum of all bases b > 9 ...", "answer": "70", "solution": "..."},
    {"problem": "", "answer": "1"},
]


def _code(n_tests: int, gold: str = "```python\nprint(int(input()) * 2)\n```", language: str = "python") -> dict:
    cases = [{"input": f"{i}\n", "output": f"{2 * i}\n", "type": "stdin_stdout"} for i in range(n_tests)]
    # verification_info is a Python literal in the set (single quotes), which JSON cannot read.
    return {
        "prompt": "Read n, print 2n.",
        "source": "codeforces",
        "gold_standard_solution": gold,
        "verification_info": repr({"language": language, "test_cases": cases}),
    }


def _parquet(path, rows):
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_pylist(rows), path)


def test_dapo_rows_get_the_boxed_instruction_and_the_tool_loop(tmp_path):
    _parquet(tmp_path / "dapo/data/dapo-math-17k.parquet", DAPO)
    assert main(["data", "dapo-math", "--from", str(tmp_path / "dapo"), "--out", str(tmp_path / "out")]) == 0
    (row,) = pq.read_table(tmp_path / "out/train.parquet").to_pylist()
    assert row["prompt"][0]["content"].endswith(agent_sources.BOXED)
    assert row["reward_model"]["ground_truth"] == "5" and row["agent_name"] == "tool_agent"


def test_aime_rows(tmp_path):
    (tmp_path / "aime.jsonl").write_text("\n".join(json.dumps(r) for r in AIME))
    assert main(["data", "aime", "--from", str(tmp_path / "aime.jsonl"), "--out", str(tmp_path / "out")]) == 0
    (row,) = pq.read_table(tmp_path / "out/test.parquet").to_pylist()
    assert row["data_source"] == "aime_2025" and row["reward_model"]["ground_truth"] == "70"


def test_code_problems_keep_upstreams_rows_and_their_tests_score(tmp_path, monkeypatch):
    rows = [_code(6) for _ in range(150)] + [_code(3), _code(6, gold="print(1)"), _code(6, language="cpp")]
    _parquet(tmp_path / "code/train.parquet", rows)
    assert main(["data", "code-problems", "--from", str(tmp_path / "code"), "--out", str(tmp_path / "out")]) == 0
    train = pq.read_table(tmp_path / "out/train.parquet").to_pylist()
    held = pq.read_table(tmp_path / "out/validation.parquet").to_pylist()
    assert (len(train), len(held)) == (149, 1)  # the three filtered out; 1% held out
    truth = json.loads(train[0]["reward_model"]["ground_truth"])
    assert truth["type"] == "stdin_stdout" and truth["inputs"][3] == "3\n" and truth["outputs"][3] == "6\n"


def test_prepare_converts_a_recipes_sets_from_their_downloads(tmp_path, monkeypatch):
    monkeypatch.setenv("NPU_RL_WORKSPACE", str(tmp_path))
    _parquet(tmp_path / "data/DAPO-Math-17k/data/train.parquet", DAPO)
    _parquet(tmp_path / "data/aime_2025/train.parquet", AIME)
    from npu_rl.launcher.prepare import prepare_data
    from npu_rl.recipe import load_recipe

    prepare_data(load_recipe("qwen3_4b_retool_dapo_a3"))
    assert pq.read_table(tmp_path / "data/dapo-math-17k/train.parquet").num_rows == 1
    assert pq.read_table(tmp_path / "data/aime-2025/test.parquet").num_rows == 1


def test_a_missing_download_is_one_line_naming_it(tmp_path, monkeypatch):
    monkeypatch.setenv("NPU_RL_WORKSPACE", str(tmp_path))
    from npu_rl.errors import UserError
    from npu_rl.launcher.prepare import prepare_data
    from npu_rl.recipe import load_recipe

    with pytest.raises(
        UserError, match=r"^data: data.source_dir .* not found: download PrimeIntellect/verifiable-codi"
    ):
        prepare_data(load_recipe("qwen3_1_7b_code_toolcall_a2"))


@pytest.mark.parametrize("broken", ["not a literal", None, repr({"language": "python"})])
def test_a_row_whose_tests_cannot_be_read_is_skipped(broken):
    row = {**_code(6), "verification_info": broken}
    assert agent_sources.code_problem_row(row, 0) is None
