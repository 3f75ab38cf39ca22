"""Equivalence classes the reward must accept, and near-misses it must not."""

from __future__ import annotations

import pytest

from npu_rl.reward.equiv import judge

EQUIVALENT = [
    # fractions, decimals, \dfrac/\tfrac and the malformed shorthand MATH uses as ground truth
    ("0.25", "\\frac{1}{4}"),
    ("\\dfrac{1}{4}", "\\frac14"),
    ("\\tfrac{3}{4}", "0.75"),
    ("\\frac{4}{3}", "\\frac43"),
    ("\\frac{5}{9}", "\\frac 59"),
    ("11\\sqrt{2}", "11\\sqrt2"),
    ("\\frac{\\sqrt{3}}{2}", "\\frac{\\sqrt3}{2}"),
    ("\\sqrt{1/n}", "\\frac{1}{\\sqrt{n}}"),
    ("2\\sqrt{2}", "\\sqrt{8}"),
    # assignments, degrees, units, percent, thousands separators, money
    ("x = 3", "3"),
    ("30^\\circ", "30"),
    ("30^{\\circ}", "30"),
    ("10\\text{ cm}", "10"),
    ("864 \\mbox{ inches}^2", "864"),
    ("12 units", "12"),
    ("25\\%", "25"),
    ("1,000", "1000"),
    ("1{,}000{,}000", "1000000"),
    ("\\$5.00", "5"),
    # sets, intervals, tuples, lists, matrices, unions
    ("\\{1,2,3\\}", "\\{3,2,1\\}"),
    ("3, 1, 2", "1,2,3"),
    ("(1,2]", "(1, 2]"),
    ("(-\\infty, 3)", "(-\\infty,3)"),
    ("\\left( 3, \\frac{\\pi}{2} \\right)", "(3,\\frac{\\pi}{2})"),
    ("\\begin{pmatrix} 1 \\\\ \\frac12 \\end{pmatrix}", "\\begin{pmatrix}1\\\\0.5\\end{pmatrix}"),
    ("\\begin{bmatrix} 1 & 2 \\\\ 3 & 4 \\end{bmatrix}", "\\begin{pmatrix}1&2\\\\3&4\\end{pmatrix}"),
    ("(-\\infty,1) \\cup (2,\\infty)", "(-\\infty, 1)\\cup(2, \\infty)"),
    # multiple choice, words, bases
    ("B", "\\text{(B)}"),
    ("(C)", "C"),
    ("\\text{Evelyn}", "\\text{Evelyn}"),
    ("\\text{even}", "even"),
    ("4210_{5}", "4210_5"),
    # plus-minus, equations, membership
    ("1+\\sqrt{19}, 1-\\sqrt{19}", "1 \\pm \\sqrt{19}"),
    ("\\{1+\\sqrt5, 1-\\sqrt5, -2\\}", "\\{1\\pm\\sqrt{5},-2\\}"),
    ("0 = 5x - 7y + 11z + 4", "5x - 7y + 11z + 4 = 0"),
    ("[-2,7]", "x \\in [-2,7]"),
    # symbolic rewrites
    ("x^2+2x+1", "(x+1)^2"),
    ("2\\pi", "\\pi \\cdot 2"),
    ("3+4i", "4i+3"),
    ("\\frac{1}{e}", "e^{-1}"),
    ("\\log_2 8", "3"),
    ("5!", "120"),
    ("\\binom{5}{2}", "10"),
    ("\\sqrt[3]{27}", "3"),
]

DIFFERENT = [
    ("1/2^{99}", "1/2^{98}"),  # Math-Verify's float comparison accepts this
    ("\\frac{1}{2^{99}}", "\\frac{1}{2^{98}}"),
    ("1 - 1/e", "1 + 1/e"),
    ("1 - \\frac{1}{e}", "1 + \\frac{1}{e}"),
    ("2^{200}+1", "2^{200}"),
    ("|x|", "x"),
    ("\\sqrt{x^2}", "x"),
    ("4", "\\frac{1}{4}"),
    ("-3", "3"),
    ("52_9", "52_8"),
    ("42", "52_8"),
    ("\\{1,2\\}", "\\{1,2,3\\}"),
    ("(1,2)", "[1,2]"),
    ("(2,1)", "(1,2)"),
    ("A", "\\text{(B)}"),
    ("\\text{Monday}", "\\text{Tuesday}"),
    ("3x", "3y"),
    ("1+\\sqrt{19}", "1 \\pm \\sqrt{19}"),  # half of a plus-minus answer
    ("5x - 7y + 11z = 4", "5x - 7y + 11z + 4 = 0"),
    ("\\begin{pmatrix}1\\\\2\\end{pmatrix}", "\\begin{pmatrix}2\\\\1\\end{pmatrix}"),
]


@pytest.mark.parametrize("pred, gt", EQUIVALENT)
def test_equivalent_answers_are_accepted(reward, respond, pred, gt):
    assert reward.compute_score("math", respond(f"\\boxed{{{pred}}}"), gt)["acc"] == 1.0


@pytest.mark.parametrize("pred, gt", DIFFERENT)
def test_different_answers_are_rejected(reward, respond, pred, gt):
    assert reward.compute_score("math", respond(f"\\boxed{{{pred}}}"), gt)["acc"] == 0.0


@pytest.mark.parametrize("pred, gt", [("1/2^{99}", "1/2^{98}"), ("\\frac43", "\\frac{4}{3}"), ("0.25", "\\frac14")])
def test_arithmetic_is_decided_without_the_symbolic_fallback(pred, gt):
    assert judge(pred, gt) is not None


def test_symbolic_fallback_decides_what_the_fast_path_cannot(reward, respond):
    # \lfloor is outside the fast parser's subset, so this goes to a worker process.
    assert judge("\\lfloor 2.5 \\rfloor", "2") is None
    assert reward.compute_score("math", respond("\\boxed{\\lfloor 2.5 \\rfloor}"), "2")["acc"] == 1.0
    assert reward.compute_score("math", respond("\\boxed{\\lfloor 3.5 \\rfloor}"), "2")["acc"] == 0.0
