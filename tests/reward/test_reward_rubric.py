"""The recipe's rubric: accuracy gate, format tags and penalties, chain-of-thought steps."""

from __future__ import annotations

import pytest

from npu_rl.reward.rubric import cot_fraction, format_fraction, weights_from

GOOD = "<think>\nwork\n</think>\n<answer>\n\\boxed{3}\n</answer>"


def test_perfect_response_scores_one(reward, respond):
    r = reward.compute_score("math", respond("\\boxed{3}"), "3")
    assert r == {"score": 1.0, "acc": 1.0, "format": 0.2, "cot": 0.1, "boxed": 1.0, "unevaluated": 0.0, "pred": "3"}


def test_wrong_answer_earns_no_format_or_cot_points(reward, respond):
    r = reward.compute_score("math", respond("\\boxed{4}"), "3")
    assert r["score"] == 0.0 and r["acc"] == 0.0
    assert r["format"] == 0.2 and r["cot"] == 0.1  # measured and logged, but gated out of the score


@pytest.mark.parametrize(
    "response, expected",
    [
        (GOOD, 1.0),
        ("<think>\nwork</think>\n<answer>\n\\boxed{3}\n</answer>", 0.75),  # "\n</think>\n" missing
        ("<think>work\n</think>\n<answer>\\boxed{3}</answer>", 0.25),  # only "\n</think>\n" exact
        ("\\boxed{3}", 0.0),
        # answer tags twice; the second block is also stray text after the first </answer> (28 chars)
        (GOOD + "\n<answer>\n\\boxed{3}\n</answer>", 0.5 - 28 * 0.005),
        ("<think>\nwork\n</think>\n<think>\n" + GOOD[8:], 0.5),  # think tags twice
    ],
)
def test_each_tag_counts_a_quarter_when_present_exactly_once(response, expected):
    assert format_fraction(response) == pytest.approx(expected)


def test_tags_out_of_order_earn_no_format():
    assert format_fraction("<answer>\n\\boxed{3}\n</answer>\n<think>\nwork\n</think>\n") == 0.0
    assert format_fraction("</think>\n<think>\nx\n<answer>\n1\n</answer>") == 0.0


@pytest.mark.parametrize("n", [1, 20, 99, 100, 5000])
def test_stray_text_costs_a_thousandth_per_char_capped(reward, respond, n):
    before = reward.compute_score("math", "x" * n + respond("\\boxed{3}"), "3")
    after = reward.compute_score("math", respond("\\boxed{3}") + "y" * n, "3")
    expected = 0.2 - min(0.001 * n, 0.1)
    assert before["format"] == pytest.approx(expected)
    assert after["format"] == pytest.approx(expected)


def test_whitespace_around_the_tags_is_not_stray_text():
    assert format_fraction("  \n" + GOOD + "\n\n  ") == 1.0


def _think(*lines: str) -> str:
    return "<think>\n" + "\n".join(lines) + "\n</think>\n<answer>\n\\boxed{1}\n</answer>"


@pytest.mark.parametrize(
    "lines, expected",
    [
        (["Step 1: Solve the equation.", "Step 2: Substitute x.", "Step 3: Therefore x = 1."], 1.0),
        (["1. Solve the equation.", "2. Substitute values.", "3. Therefore it holds."], 1.0),
        (["1) Solve the equation.", "2) Substitute values.", "3) Thus it holds."], 1.0),
        (["(1) Solve the equation.", "(2) Substitute values.", "(3) Thus it holds."], 1.0),
        (["Step 1: Solve the equation.", "Step 2: Look at the figure."], 0.5),
        (["Step 1: Solve the equation.", "Step 2: Substitute x.", "Step 3: Look again."], 1.0),
        (["Step 1: Read the question.", "Step 2: Look at it.", "Step 3: Because reasons."], 0.5),
        (["Step 1: Read the question.", "Step 2: Look at it.", "Step 3: Write it."], 0.0),
        (["Step 2: Solve the equation.", "Step 3: Thus x.", "Step 4: Therefore y."], 0.0),  # not from 1
        (["Step 1: Solve the equation.", "Step 3: Thus x.", "Step 4: Therefore y."], 0.0),  # gap
        (["Step 1: Solve the equation.", "Step 2:", "Step 3: Thus x."], 0.0),  # an empty step breaks the run
        (["We solve the equation and therefore thus."], 0.0),
    ],
)
def test_cot_counts_sequential_numbered_steps_with_reasoning(lines, expected):
    assert cot_fraction(_think(*lines)) == expected


def test_cot_needs_a_think_block():
    assert cot_fraction("Step 1: Solve.\nStep 2: Thus.\nStep 3: Therefore.") == 0.0


def test_weights_come_from_the_recipe_and_scale_every_part(reward, respond):
    w = {"accuracy": 0.5, "format": 0.4, "cot": 0.1}
    r = reward.compute_score("math", "x" * 10 + respond("\\boxed{3}"), "3", weights=w)
    assert r["format"] == pytest.approx(0.4 * (1 - 10 * 0.005))
    assert r["score"] == pytest.approx(0.5 + r["format"] + 0.1)


def test_default_weights_are_the_recipe_schema_defaults():
    from npu_rl.recipe.schema import RewardWeights

    d = RewardWeights()
    w = weights_from(None)
    assert (w.accuracy, w.format, w.cot) == (d.accuracy, d.format, d.cot)


def test_bad_weights_are_rejected_naming_the_field():
    with pytest.raises(ValueError, match="acuracy"):
        weights_from({"acuracy": 1.0})
