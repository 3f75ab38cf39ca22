"""The agent demo's task: exact multiplication, which a tiny model cannot do in its head and can with code.

``4827 * 391`` takes a multi-digit carry chain that a model of 64 hidden units gets wrong nearly always;
with the code interpreter it writes ``print(4827 * 391)`` and copies the digits the tool prints, which it
can learn (the math demo's model learns to copy numbers). So a rise in held-out accuracy is a rise in tool
use, and the tool-call rate says so apart.

Rows are verl's (``prompt`` as chat messages, ``reward_model.ground_truth``), with ``agent_name`` naming
verl's tool agent loop. ``transcripts`` writes the SFT stage's conversations: a fallible teacher who calls
the tool only some of the time and, when it does not, states a near miss (a carry dropped).
Generated here, deterministically: no third-party data.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

from .math import write_parquet
from .tools import CODE_TOOL_NAME as TOOL_NAME
from .tools import CODE_TOOL_SCHEMA

DATA_SOURCE = "npu_rl/arithmetic"
AGENT_LOOP = "tool_agent"  # verl 0.9's registered name (experimental/agent_loop/tool_agent_loop.py:99)
INSTRUCTION = "Give the exact answer within \\boxed{}."
SIZES = {"train": 512, "test": 64}
# The teacher calls the tool this often; the rest of the time it states its near miss.
TOOL_RATE = 0.5


def problem(rng: random.Random) -> tuple[int, int]:
    return rng.randint(100, 999), rng.randint(10, 99)


def question(a: int, b: int) -> str:
    return f"What is {a} * {b}? {INSTRUCTION}"


def _row(a: int, b: int, split: str, index: int) -> dict:
    return {
        "data_source": DATA_SOURCE,
        "prompt": [{"role": "user", "content": question(a, b)}],
        "ability": "arithmetic",
        "reward_model": {"style": "rule", "ground_truth": str(a * b)},
        "agent_name": AGENT_LOOP,
        "extra_info": {"split": split, "index": index, "a": a, "b": b},
    }


def problems(seed: int = 0) -> dict[str, list[tuple[int, int]]]:
    """Each split's problems; no test problem is in the train split."""
    rng = random.Random(seed)
    seen: set[tuple[int, int]] = set()
    out: dict[str, list[tuple[int, int]]] = {}
    for split, n in SIZES.items():
        drawn: list[tuple[int, int]] = []
        while len(drawn) < n:
            p = problem(rng)
            if p not in seen:
                seen.add(p)
                drawn.append(p)
        out[split] = drawn
    return out


def tool_call(code: str) -> str:
    """A call in the hermes format verl's parser reads (tool_parser.py:105, a JSON object in the tags)."""
    return f"<tool_call>\n{json.dumps({'name': TOOL_NAME, 'arguments': {'code': code}})}\n</tool_call>"


def near_miss(a: int, b: int) -> int:
    """The teacher's head arithmetic: the product with its tens digit one off (a carry dropped)."""
    digits = [int(d) for d in str(a * b)]
    return int("".join(str((d + 1) % 10) if i == len(digits) - 2 else str(d) for i, d in enumerate(digits)))


def transcript(a: int, b: int, use_tool: bool) -> list[dict]:
    """One conversation of the SFT stage, as verl's multi-turn SFT dataset reads it (role and content)."""
    messages = [{"role": "user", "content": question(a, b)}]
    if use_tool:
        messages += [
            {"role": "assistant", "content": tool_call(f"print({a} * {b})")},
            {"role": "tool", "content": str(a * b)},
            {"role": "assistant", "content": f"\\boxed{{{a * b}}}"},
        ]
    else:
        messages.append({"role": "assistant", "content": f"\\boxed{{{near_miss(a, b)}}}"})
    return messages


def transcripts(pairs: list[tuple[int, int]], tool_rate: float = TOOL_RATE, seed: int = 0) -> list[list[dict]]:
    rng = random.Random(seed)
    return [transcript(a, b, rng.random() < tool_rate) for a, b in pairs]


def write(out: Path, seed: int = 0) -> dict[str, int]:
    """train.parquet and test.parquet (the RL stage's), and sft.parquet and sft_val.parquet (the SFT stage's
    transcripts of the same splits)."""
    splits = problems(seed)
    counts = {}
    for split, pairs in splits.items():
        write_parquet([_row(a, b, split, i) for i, (a, b) in enumerate(pairs)], out / f"{split}.parquet")
        counts[split] = len(pairs)
    # The tools of each row are what verl's SFT dataset renders into the system prompt, as the rollout's
    # prompt has them (verl v0.9.0 utils/dataset/multiturn_sft_dataset.py:167-171, :294-308).
    for split, name in (("train", "sft"), ("test", "sft_val")):
        rows = [{"messages": m, "tools": [CODE_TOOL_SCHEMA]} for m in transcripts(splits[split], seed=seed)]
        write_parquet(rows, out / f"{name}.parquet")
        counts[name] = len(rows)
    return counts
