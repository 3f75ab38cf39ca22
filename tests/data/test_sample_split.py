"""The demo's sample: a held-out test split, and problems whose answers the reward grades."""

from __future__ import annotations

import re

import pyarrow.parquet as pq

from npu_rl.data.math import extract_ground_truth
from npu_rl.data.sample import GENERATORS, sample_dir, splits
from npu_rl.reward.math import compute_score


def test_test_split_shares_no_problem_with_train():
    s = splits()
    train, test = {r["problem"] for r in s["train"]}, [r["problem"] for r in s["test"]]
    assert len(test) == len(set(test)) == 64 and len(train) == 256
    assert not train.intersection(test)


def test_committed_parquet_is_what_the_generator_writes():
    for split, rows in splits().items():
        (path,) = sample_dir().glob(f"{split}-*.parquet")
        assert pq.read_table(path).to_pylist() == rows, f"{path} is stale: python -m npu_rl.data.sample"


FORMS = {
    "opposite": r"^What is the opposite of \$\d+\$",
    "distance": r"^How far is \$-\d+\$ from \$0\$",
    "abs": r"^What is \$\|-",
    "double negative": r"^Simplify \$-\(-",
    "times -1": r"\\times \(-1\)",
    "negated abs": r"^What is \$-\|",
}


def test_every_form_is_in_both_splits_and_its_worked_answer_scores():
    s = splits()
    assert len(FORMS) == len(GENERATORS)
    for split in ("train", "test"):
        seen = {form for row in s[split] for form, pattern in FORMS.items() if re.search(pattern, row["problem"])}
        assert seen == set(FORMS), split
    for row in s["test"]:
        truth = extract_ground_truth(row["solution"])
        right = f"<think>\nStep 1: x\n</think>\n<answer>\n\\boxed{{{truth}}}\n</answer>"
        slipped = right.replace("{-", "{") if truth.startswith("-") else right.replace("{", "{-", 1)
        assert compute_score("math", right, truth)["acc"] == 1.0
        assert compute_score("math", slipped, truth)["acc"] == 0.0, slipped


def test_copying_the_problems_expression_earns_nothing():
    # The forms whose problem holds an expression with the answer's value: copying it into the box is a
    # restated computation, never a right answer.
    copied = 0
    for row in splits()["test"]:
        m = re.search(r"\$([^$]*[|(\\][^$]*)\$", row["problem"])
        if m is None:
            continue
        r = compute_score(
            "math", f"<answer>\n\\boxed{{{m.group(1)}}}\n</answer>", extract_ground_truth(row["solution"])
        )
        assert (r["acc"], r["unevaluated"]) == (0.0, 1.0), (m.group(1), r)
        copied += 1
    assert copied >= 10
