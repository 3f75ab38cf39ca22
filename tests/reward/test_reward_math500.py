"""On MATH500-derived cases (the benchmark's): accuracy at least 0.999, no false positive.

Needs ``../shared/data/math500/test.jsonl``; skips without it.
"""

from __future__ import annotations

import importlib.util
import sys
from collections import Counter
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def _bench():
    spec = importlib.util.spec_from_file_location("reward_bench", REPO / "benchmarks" / "reward_bench.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["reward_bench"] = module  # its dataclasses look their module up while being defined
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def cases():
    bench = _bench()
    if not bench.DEFAULT_DATA.is_file():
        pytest.skip(f"MATH500 data not found at {bench.DEFAULT_DATA}")
    return [c for c in bench.build_cases(bench.DEFAULT_DATA, None) if c.label is not None]


def test_the_cases_cover_every_answer_form_both_ways(cases):
    forms = Counter((c.form, c.label) for c in cases if c.form)
    for form in ("mixed", "repeating", "union", "inequality", "or_list"):
        assert forms[(form, 1)] > 0 and forms[(form, 0)] > 0, form


def test_math500_accuracy_and_no_false_positive(reward, cases):
    verdicts = reward.compute_score_batch(
        ["math"] * len(cases), [c.response for c in cases], [c.gt for c in cases], timeout_s=5.0
    )
    wrong = [c for c, v in zip(cases, verdicts) if (v["acc"] == 1.0) != bool(c.label)]
    false_positives = [(c.kind, c.form, c.gt) for c in wrong if c.label == 0]
    assert not false_positives, false_positives[:10]
    assert 1 - len(wrong) / len(cases) >= 0.999, [(c.kind, c.form, c.gt) for c in wrong[:10]]
