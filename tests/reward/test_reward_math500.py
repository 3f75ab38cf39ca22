"""On MATH500-derived cases (the benchmark's): accuracy at least 0.999, no false positive;
and each MATH500 reference answer, respelled, is still itself on both judge paths, while
in another unit or about another variable it is not.

Needs ``../shared/data/math500/test.jsonl``; skips without it.
"""

from __future__ import annotations

import importlib.util
import json
import re
import sys
from collections import Counter
from pathlib import Path

import pytest
from test_reward_paths import sympy_only

from npu_rl.reward.equiv import judge

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
    for form in ("mixed", "repeating", "union", "inequality", "or_list", "equation", "unit"):
        assert forms[(form, 1)] > 0 and forms[(form, 0)] > 0, form


def test_math500_accuracy_and_no_false_positive(reward, cases):
    verdicts = reward.compute_score_batch(
        ["math"] * len(cases), [c.response for c in cases], [c.gt for c in cases], timeout_s=5.0
    )
    wrong = [c for c, v in zip(cases, verdicts) if (v["acc"] == 1.0) != bool(c.label)]
    false_positives = [(c.kind, c.form, c.gt) for c in wrong if c.label == 0]
    assert not false_positives, false_positives[:10]
    assert 1 - len(wrong) / len(cases) >= 0.999, [(c.kind, c.form, c.gt) for c in wrong[:10]]


@pytest.fixture(scope="module")
def references():
    data = _bench().DEFAULT_DATA
    if not data.is_file():
        pytest.skip(f"MATH500 data not found at {data}")
    with open(data, encoding="utf-8") as f:
        return [json.loads(line)["answer"].strip() for line in f if line.strip()]


_ENDS_IN_UNIT = re.compile(r"(.+?)\s*\\(?:text|mbox)\{\s*([a-z]+)\s*\}(\^\d)?")
_ABOUT_ONE_VARIABLE = re.compile(r"([a-z])\s*=\s*([^=]+)")


def respellings(gt: str) -> list[tuple[str, bool]]:
    """(another way to write ``gt``, whether it is still ``gt``)."""
    out = [(gt.replace("\\mbox", "\\text").replace("\\dfrac", "\\frac"), True), (re.sub(r"\s*=\s*", " = ", gt), True)]
    m = _ENDS_IN_UNIT.fullmatch(gt)
    if m:  # degrees stay as they were: dropped; any other unit is compared
        value, unit, power = m.group(1), m.group(2), m.group(3) or ""
        out += [(value, True), (f"{value} {unit}{power}", True)]
        if unit != "degrees":  # no MATH500 area, length or price is in miles
            out.append((f"{value}\\text{{ miles}}{power}", False))
    m = _ABOUT_ONE_VARIABLE.fullmatch(gt)
    if m:
        var, rhs = m.group(1), m.group(2).strip()
        other = next(v for v in "abc" if v not in gt)
        out += [(rhs, True), (f"{rhs} = {var}", True), (f"{other} = {rhs}", False)]
    return out


def test_each_reference_answer_respelled_is_itself_on_both_paths(reward, references):
    pairs = [(v, gt, same) for gt in references for v, same in [(gt, True), *respellings(gt)]]
    assert {same for _, _, same in pairs} == {True, False}  # the data still has answers with units, equations
    scores = reward.compute_score_batch(
        ["math"] * len(pairs), [f"\\boxed{{{v}}}" for v, _, _ in pairs], [gt for _, gt, _ in pairs], timeout_s=5.0
    )
    wrong = [(v, gt) for (v, gt, same), r in zip(pairs, scores) if (r["acc"] == 1.0) != same]
    assert not wrong, wrong[:10]
    wrong = [(v, gt) for v, gt, same in pairs if bool(judge(v, gt, leaf=sympy_only)) is not same]
    assert not wrong, wrong[:10]


def test_math_writes_its_reference_answers_evaluated(references):
    # The rubric refuses an answer that restates a computation between numerals (17 \times 23 for 391);
    # MATH never writes a reference that way, so the rule costs a right answer nothing.
    from npu_rl.reward.evaluated import unevaluated

    assert len(references) == 500
    assert [gt for gt in references if unevaluated(gt)] == []
