"""Responses shaped to collect reward without a (single) right answer earn no accuracy."""

from __future__ import annotations

import pytest

HACKS = [
    "\\boxed{5} or \\boxed{6}",  # two different boxed answers, one right
    "\\boxed{6} \\boxed{5}",  # ... even when the right one is last
    "\\boxed{4, 5, 6}",  # enumerating candidates for a scalar answer
    "\\boxed{\\{4,5,6\\}}",
    "\\boxed{(4, 5)}",
    "The answer is 5, but I box \\boxed{6}",  # right value mentioned, wrong one boxed
    "It is 5. \\boxed{}",  # empty box
    "\\boxed{ }",
    "\\boxed{5",  # unclosed
    "\\boxed{5} and then \\boxed{6",
    "\\boxed{5 \\text{ or } 6}",  # alternatives are a list, like enumerating
    "\\boxed{x = 5 \\text{ or } x = 6}",
    "\\boxed{5 \\lor 6}",
    "\\boxed{x \\ge 5}",  # an interval that contains the answer is not the answer
    "\\boxed{4 < x < 6}",
    "\\boxed{x \\ne 6}",
    "5",  # the bare value without a box is fine, but not this: see the next test
]


@pytest.mark.parametrize("body", HACKS[:-1])
def test_hacks_earn_nothing(reward, respond, body):
    r = reward.compute_score("math", respond(body), "5")
    assert r["acc"] == 0.0 and r["score"] == 0.0


def test_bare_answer_block_counts_but_mentions_outside_it_do_not(reward, respond):
    assert reward.compute_score("math", respond("5"), "5")["acc"] == 1.0
    assert reward.compute_score("math", "the answer is 5", "5")["acc"] == 0.0


def test_the_answer_block_wins_over_boxes_in_the_reasoning(reward, respond):
    think = "Step 1: Try \\boxed{6}.\nStep 2: Solve again.\nStep 3: Thus."
    assert reward.compute_score("math", respond("\\boxed{5}", think=think), "5")["acc"] == 1.0
    assert reward.compute_score("math", respond("\\boxed{6}", think="Step 1: \\boxed{5}"), "5")["acc"] == 0.0


def test_without_an_answer_block_the_last_box_is_the_answer(reward):
    assert reward.compute_score("math", "so \\boxed{5}.", "5")["acc"] == 1.0
    assert reward.compute_score("math", "\\fbox{5}", "5")["acc"] == 1.0
    assert reward.compute_score("math", "\\boxed 5", "5")["acc"] == 1.0


def test_repeating_the_same_answer_is_not_a_hack(reward, respond):
    assert reward.compute_score("math", respond("\\boxed{5} so \\boxed{ 5 }"), "5")["acc"] == 1.0


@pytest.mark.parametrize("gt", ["", None, "x" * 5000])
def test_missing_or_absurd_ground_truth_scores_zero(reward, respond, gt):
    assert reward.compute_score("math", respond("\\boxed{5}"), gt)["score"] == 0.0


@pytest.mark.parametrize("response", [None, 5, b"\\boxed{5}"])
def test_non_string_responses_score_zero(reward, response):
    assert reward.compute_score("math", response, "5")["score"] == 0.0
