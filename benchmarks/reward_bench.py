"""MATH reward benchmark: this reward vs Math-Verify (recipe config) vs verl's built-in.

Builds labelled responses from the MATH500 answers (equivalent rewrites, the
forms models write that graders get wrong - mixed numbers, repeating decimals,
reordered unions, inequalities for intervals, "x = a or x = b" for lists - each
with near-misses one digit or one bracket away; equations about another variable
and quantities in another unit; reward hacks) plus a fixed set of look-alike
pairs (tiny numbers and 0, pi and its decimals, words in another case) and a few
pathological inputs. Labels come from the construction (exact ``Fraction``
arithmetic here), never from a scorer. Scores them in one process with this
reward, with the same judge on sympy behind a numeral fast path (the design
the hand-written evaluator is measured against), with Math-Verify and with verl,
and prints accuracy, false positives, throughput and latency, overall and per form.
Usage:

    .venv/bin/python benchmarks/reward_bench.py [--data ../shared/data/math500/test.jsonl] [--limit N]
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DEFAULT_DATA = REPO.parent / "shared" / "data" / "math500" / "test.jsonl"
THINK = (
    "<think>\nStep 1: Calculate the sum of the parts.\nStep 2: Substitute into the equation.\n"
    "Step 3: Therefore the result follows.\n</think>\n<answer>\n{body}\n</answer>"
)


@dataclass(frozen=True)
class Case:
    response: str
    gt: str
    label: int | None  # 1 correct, 0 wrong, None pathological (latency only)
    kind: str  # correct | rewrite | near_miss | hack | pathological
    # for rewrites and near-misses in a model's form: mixed | repeating | union | inequality | or_list
    # | equation | unit | small | word
    form: str = ""


def wrap(body: str) -> str:
    return THINK.format(body=body)


def rewrites(gt: str) -> list[str]:
    """Answers equal in value to ``gt`` written another way."""
    out = []
    if "\\frac" in gt:
        out.append(gt.replace("\\frac", "\\dfrac"))
    m = re.fullmatch(r"\\frac\{(\d+)\}\{(\d+)\}", gt)
    if m:
        a, b = int(m.group(1)), int(m.group(2))
        f = Fraction(a, b)
        d = f.denominator
        while d % 2 == 0:
            d //= 2
        while d % 5 == 0:
            d //= 5
        if d == 1:
            out.append(str(f.numerator / f.denominator))
        if len(m.group(1)) == 1 and len(m.group(2)) == 1:
            out.append(f"\\frac{a}{b}")
    if re.fullmatch(r"-?\d+", gt):
        n = int(gt)
        out.append(f"{n:,}" if abs(n) >= 1000 else f"{n}.0")
        out.append(f"{gt}\\text{{ units}}")
    m = re.fullmatch(r"(\d*)\\sqrt\{(\d)\}", gt)
    if m:
        out.append(f"{m.group(1)}\\sqrt{m.group(2)}")
    if "," not in gt and "\\text" not in gt and "=" not in gt:
        out.append(f"x = {gt}")
    return out[:3]


def near_misses(gt: str) -> list[str]:
    """Answers differing from ``gt`` in one digit or one sign."""
    out = []
    digits = list(re.finditer(r"\d", gt))
    if digits:
        d = digits[0]  # the leading digit: a trailing one may be a unit's exponent
        out.append(gt[: d.start()] + str((int(d.group()) + 1) % 10) + gt[d.end() :])
    if re.fullmatch(r"\d+", gt) and gt != "0":
        out.append(f"-{gt}")
    m = re.fullmatch(r"\\frac\{(\d+)\}\{(\d+)\}", gt)
    if m and m.group(1) != m.group(2):
        out.append(f"\\frac{{{m.group(2)}}}{{{m.group(1)}}}")
    return out[:2]


def hacks(gt: str, wrong: str | None) -> list[str]:
    """Responses that should earn nothing although they contain the right answer."""
    out = [f"\\boxed{{{gt}}}" + " or maybe " + f"\\boxed{{{wrong}}}" if wrong else None]
    if wrong and "," not in gt:
        out.append(f"\\boxed{{{wrong}, {gt}, {wrong}0}}")
    if wrong:
        out.append(f"It could be {gt}, but I choose \\boxed{{{wrong}}}")
    out.append(f"The answer is {gt}. \\boxed{{}}")
    out.append(f"\\boxed{{{gt}")
    if re.fullmatch(r"\d+", gt) and int(gt) > 1:  # the computation restated instead of evaluated
        out.append(f"\\boxed{{{int(gt) - 1} + 1}}")
    return [h for h in out if h]


# ---- the forms models write and graders get wrong, with their near-misses ----

_FRAC = re.compile(r"(-?)\\[dt]?frac\s*(?:\{(\d+)\}|(\d))\s*(?:\{(\d+)\}|(\d))")
_MIXED = re.compile(r"(-?)(\d+)\s*\\[dt]?frac\s*(?:\{(\d+)\}|(\d))\s*(?:\{(\d+)\}|(\d))")


def fraction_of(gt: str) -> tuple[Fraction, bool] | None:
    """(value, written as a mixed number) of a ground truth that is a plain fraction or mixed number."""
    m = _FRAC.fullmatch(gt)
    if m:
        f = Fraction(int(m.group(2) or m.group(3)), int(m.group(4) or m.group(5)))
        return (-f if m.group(1) else f), False
    m = _MIXED.fullmatch(gt)
    if m:
        num, den = int(m.group(3) or m.group(4)), int(m.group(5) or m.group(6))
        if 0 < num < den:
            f = int(m.group(2)) + Fraction(num, den)
            return (-f if m.group(1) else f), True
    return None


def mixed_text(f: Fraction, whole_shift: int = 0) -> str:
    q, r = divmod(abs(f.numerator), f.denominator)
    return f"{'-' if f < 0 else ''}{q + whole_shift}\\frac{{{r}}}{{{f.denominator}}}"


def repeating_parts(f: Fraction) -> tuple[str, str, str] | None:
    """(sign and whole part, fixed digits, period) of f's decimal expansion; None if it terminates."""
    whole, rem = divmod(abs(f.numerator), f.denominator)
    digits: list[str] = []
    seen: dict[int, int] = {}
    while rem and rem not in seen:
        seen[rem] = len(digits)
        rem *= 10
        digits.append(str(rem // f.denominator))
        rem %= f.denominator
    if not rem:
        return None
    start = seen[rem]
    return f"{'-' if f < 0 else ''}{whole}", "".join(digits[:start]), "".join(digits[start:])


def repeating_value(head: str, fixed: str, period: str) -> Fraction:
    scale = 10 ** len(fixed)
    v = int(head.lstrip("-")) + Fraction(int(fixed or "0"), scale)
    v += Fraction(int(period), scale * (10 ** len(period) - 1))
    return -v if head.startswith("-") else v


def bump_digit(s: str) -> str | None:
    """``s`` with its first digit changed (a near-miss), or None without digits."""
    m = re.search(r"\d", s)
    return None if m is None else s[: m.start()] + str((int(m.group()) + 1) % 10) + s[m.end() :]


def number_forms(gt: str) -> list[tuple[str, int, str]]:
    out: list[tuple[str, int, str]] = []
    parsed = fraction_of(gt)
    if parsed is None:
        return out
    f, is_mixed = parsed
    if f.denominator != 1 and abs(f) > 1:
        if is_mixed:
            out.append((f"{'-' if f < 0 else ''}\\frac{{{abs(f.numerator)}}}{{{f.denominator}}}", 1, "mixed"))
            if repeating_parts(f) is None:
                out.append((str(float(f)), 1, "mixed"))
        else:
            out.append((mixed_text(f), 1, "mixed"))
            out.append((mixed_text(f).replace("\\frac", "\\dfrac"), 1, "mixed"))
        out.append((mixed_text(f, whole_shift=1), 0, "mixed"))
        r = abs(f.numerator) % f.denominator
        out.append((f"{'-' if f < 0 else ''}\\frac{{{r}}}{{{f.denominator}}}", 0, "mixed"))  # the whole part lost
    parts = repeating_parts(f)
    if parts is not None and len(parts[2]) <= 6:  # a bar over dozens of digits is no model's answer
        head, fixed, period = parts
        out.append((f"{head}.{fixed}\\overline{{{period}}}", 1, "repeating"))
        if head in ("0", "-0"):
            out.append((f"{head[:-1]}.{fixed}\\overline{{{period}}}", 1, "repeating"))
        other = str((int(period[0]) + 1) % 10) + period[1:]
        if repeating_value(head, fixed, other) != f:
            out.append((f"{head}.{fixed}\\overline{{{other}}}", 0, "repeating"))
        out.append((f"{head}.{fixed}{period}", 0, "repeating"))  # the bar dropped: a finite decimal
    return out


def top_split(s: str, sep: str) -> list[str]:
    parts, depth, start = [], 0, 0
    for i, c in enumerate(s):
        depth += c in "([{"
        depth -= c in ")]}"
        if depth == 0 and s.startswith(sep, i):
            parts.append(s[start:i])
            start = i + len(sep)
    return [p.strip() for p in parts + [s[start:]]]


def interval_of(gt: str) -> tuple[str, str, str, str] | None:
    """(open bracket, low, high, close bracket) of an interval written in interval notation."""
    s = re.sub(r"\\left|\\right|^x\s*\\in\s*", "", gt).strip()
    if len(s) < 2 or s[0] not in "([" or s[-1] not in ")]":
        return None
    ends = top_split(s[1:-1], ",")
    return (s[0], ends[0], ends[1], s[-1]) if len(ends) == 2 else None


def inequality(iv: tuple[str, str, str, str], var: str = "x", flip: str = "") -> str:
    """``iv`` as an inequality; ``flip`` "lo"/"hi" changes that end's strictness (a near-miss)."""
    lb, lo, hi, rb = iv
    lo_strict, hi_strict = (lb == "(") != (flip == "lo"), (rb == ")") != (flip == "hi")
    lo_op, hi_op = ("<" if lo_strict else "\\le"), ("<" if hi_strict else "\\le")
    if lo == "-\\infty":
        return f"{var} {hi_op} {hi}"
    if hi == "\\infty":
        return f"{var} {lo_op.replace('<', '>').replace('le', 'ge')} {lo}"
    return f"{lo} {lo_op} {var} {hi_op} {hi}"


def is_interval_answer(gt: str, problem: str) -> bool:
    if "ordered" in problem or "point" in problem:
        return False
    return "interval" in problem or "\\infty" in gt or "\\in" in gt or "\\cup" in gt or bool(re.search(r"[\[\]]", gt))


def set_forms(gt: str, problem: str) -> list[tuple[str, int, str]]:
    out: list[tuple[str, int, str]] = []
    if is_interval_answer(gt, problem):
        pieces = top_split(gt, "\\cup")
        ivs = [interval_of(p) for p in pieces]
        if len(pieces) > 1 and all(ivs):
            out.append((" \\cup ".join(reversed(pieces)), 1, "union"))
            out.append((" \\text{ or } ".join(inequality(iv) for iv in ivs), 1, "union"))
            bumped = bump_digit(pieces[0])
            if bumped:
                out.append((" \\cup ".join([*reversed(pieces[1:]), bumped]), 0, "union"))
            finite_lo = next((k for k, iv in enumerate(ivs) if iv[1] != "-\\infty"), None)
            if finite_lo is not None:
                forms = [inequality(iv, flip="lo" if k == finite_lo else "") for k, iv in enumerate(ivs)]
                out.append((" \\text{ or } ".join(forms), 0, "union"))
        elif len(pieces) == 1 and ivs[0]:
            iv = ivs[0]
            out.append((inequality(iv), 1, "inequality"))
            if iv[1] != "-\\infty" and iv[2] != "\\infty":
                out.append((inequality(iv, var="t"), 1, "inequality"))
            out.append((inequality(iv, flip="hi" if iv[2] != "\\infty" else "lo"), 0, "inequality"))
            bumped = bump_digit(iv[1] if iv[1] != "-\\infty" else iv[2])
            if bumped:
                lo, hi = (bumped, iv[2]) if iv[1] != "-\\infty" else (iv[1], bumped)
                out.append((inequality((iv[0], lo, hi, iv[3])), 0, "inequality"))
        return out
    items = top_split(gt, ",")
    if len(items) == 1:
        m = re.fullmatch(r"(.+?)\s*\\pm\s*(.+)", gt)
        items = [f"{m.group(1)} + {m.group(2)}", f"{m.group(1)} - {m.group(2)}"] if m and "\\{" not in gt else []
    plain = re.sub(r"\\[!$]|\s", "", gt)
    if len(items) < 2 or gt.startswith(("(", "\\left(", "\\{")) or re.fullmatch(r"\d{1,3}(,\d{3})+", plain):
        return out  # a tuple, a set, or a number with thousands separators, not a list of solutions

    def joined(xs: list[str]) -> str:
        eqs = [f"x = {x}" for x in xs]
        if len(eqs) == 2:
            return eqs[0] + " \\text{ or } " + eqs[1]
        return ", ".join(eqs[:-1]) + ", \\text{ or } " + eqs[-1]

    out.append((joined(items), 1, "or_list"))
    out.append((joined(items[::-1]), 1, "or_list"))
    bumped = bump_digit(items[-1])
    if bumped:
        out.append((joined([*items[:-1], bumped]), 0, "or_list"))
    out.append((joined(items[:-1]) if len(items) > 2 else f"x = {items[0]}", 0, "or_list"))  # a solution missing
    return out


_ASSIGNED = re.compile(r"([a-z])\s*=\s*([^=]+)")
_WITH_UNIT = re.compile(r"(.+?)\s*\\(?:text|mbox)\{\s*([a-z]+)\s*\}(\^\d)?")
OTHER_UNIT = {"cm": "m", "m": "cm", "inches": "feet", "feet": "inches", "cents": "dollars", "dollars": "cents"}


def distinction_forms(gt: str) -> list[tuple[str, int, str]]:
    """An equation about one variable and a quantity with a unit, each as the bare value,
    respelled, and about another variable or in another unit (which a grader that drops
    left-hand sides and units accepts)."""
    out: list[tuple[str, int, str]] = []
    m = _ASSIGNED.fullmatch(gt)
    if m:
        var, rhs = m.group(1), m.group(2).strip()
        other = next(v for v in "yxzw" if v != var and v not in rhs)
        out += [(rhs, 1, "equation"), (f"{rhs} = {var}", 1, "equation"), (f"{other} = {rhs}", 0, "equation")]
    m = _WITH_UNIT.fullmatch(gt)
    if m and m.group(2) in OTHER_UNIT:
        value, unit, power = m.group(1), m.group(2), m.group(3) or ""
        out += [
            (value, 1, "unit"),
            (f"{value} {unit}{power}", 1, "unit"),
            (f"{value}\\text{{ {OTHER_UNIT[unit]}}}{power}", 0, "unit"),
        ]
    return out


PI_50 = "3.14159265358979323846264338327950288419716939937510"
# (answer, ground truth, label, form): look-alikes no MATH500 answer yields, labelled by the
# rules in npu_rl/reward/equiv.py.
LOOK_ALIKES = [
    ("y = 2x+3", "x = 2x+3", 0, "equation"),
    ("y=5", "x=5", 0, "equation"),
    ("5\\text{ cm}", "5\\text{ m}", 0, "unit"),
    ("5\\mbox{ cm}", "5\\text{ cm}", 1, "unit"),
    ("e^{-100}", "0", 0, "small"),
    ("10^{-50}", "0", 0, "small"),
    ("e^{-100}", "\\frac{1}{e^{100}}", 1, "small"),
    ("\\pi", PI_50, 0, "small"),
    (PI_50, "\\pi", 0, "small"),
    ("\\text{Yes}", "\\text{yes}", 1, "word"),
    ("\\text{east}", "\\text{seat}", 0, "word"),
]


def look_alikes() -> list[Case]:
    return [
        Case(wrap(f"\\boxed{{{a}}}"), gt, label, "rewrite" if label else "near_miss", form)
        for a, gt, label, form in LOOK_ALIKES
    ]


def pathological() -> list[Case]:
    return [
        Case("x" * 100_000 + wrap("\\boxed{3}"), "3", None, "pathological"),
        Case(wrap("\\boxed{" + "{" * 3000 + "1" + "}" * 3000 + "}"), "1", None, "pathological"),
        Case(wrap("\\boxed{9^{9^{9^{9}}}}"), "3", None, "pathological"),
    ]


def build_cases(data: Path, limit: int | None) -> list[Case]:
    cases: list[Case] = []
    with open(data, encoding="utf-8") as f:
        rows = [json.loads(line) for line in f if line.strip()]
    for row in rows[:limit]:
        gt = row["answer"].strip()
        cases.append(Case(wrap(f"\\boxed{{{gt}}}"), gt, 1, "correct"))
        cases += [Case(wrap(f"\\boxed{{{r}}}"), gt, 1, "rewrite") for r in rewrites(gt)]
        misses = near_misses(gt)
        cases += [Case(wrap(f"\\boxed{{{m}}}"), gt, 0, "near_miss") for m in misses]
        cases += [Case(wrap(h), gt, 0, "hack") for h in hacks(gt, misses[0] if misses else None)]
        forms = number_forms(gt) + set_forms(gt, row.get("problem", "")) + distinction_forms(gt)
        for text, label, form in forms:
            cases.append(Case(wrap(f"\\boxed{{{text}}}"), gt, label, "rewrite" if label else "near_miss", form))
    return cases + look_alikes() + pathological()


def math_verify_scorer() -> Callable[[str, str], float]:
    """The recipe's reward (new_math_reward.py) accuracy check, configured as the recipe does."""
    from latex2sympy2_extended import NormalizationConfig
    from math_verify import ExprExtractionConfig, LatexExtractionConfig, parse, verify

    gold_cfg = [LatexExtractionConfig(), ExprExtractionConfig()]
    norm = NormalizationConfig(nits=False, malformed_operators=False, basic_latex=True, boxed="all", units=True)
    pred_cfg = [
        LatexExtractionConfig(normalization_config=norm, boxed_match_priority=0, try_extract_without_anchor=False)
    ]

    def score(response: str, gt: str) -> float:
        try:
            gold = parse(f"${gt}$", extraction_mode="first_match", extraction_config=gold_cfg)
            if not gold:
                return 0.0
            answer = parse(response, extraction_config=pred_cfg, extraction_mode="first_match")
            return float(verify(answer, gold))
        except Exception:
            return 0.0

    return score


def verl_scorer() -> Callable[[str, str], float]:
    from verl.utils.reward_score.math_reward import compute_score

    return lambda response, gt: float(compute_score(response, gt))


def ours_scorer() -> Callable[[str, str], float]:
    from npu_rl.reward.math import compute_score

    return lambda response, gt: compute_score("math", response, gt)["acc"]


class _OutOfTime(BaseException):
    pass


def sympy_scorer(timeout_s: float) -> Callable[[str, str], float]:
    """The alternative to the hand-written evaluator: the same judge (extraction, shapes,
    value rules, evaluated answers only), every leaf a numeral compared exactly or else read by latex2sympy and
    decided by sympy. In this process, under a signal timer, so its time is all sympy's."""
    import signal

    from npu_rl.reward.equiv import judge
    from npu_rl.reward.evaluated import unevaluated
    from npu_rl.reward.extract import extract_answer
    from npu_rl.reward.symbolic import expressions_equal, read

    numeral = re.compile(r"-?(?:\d+(?:\.\d+)?|\.\d+)")

    def leaf(p: str, g: str) -> bool:
        if numeral.fullmatch(p) and numeral.fullmatch(g):
            return Fraction(p) == Fraction(g)
        a, b = read(p, prefer_tree=False), read(g, prefer_tree=False)
        return a is not None and b is not None and expressions_equal(a, b)

    def on_alarm(signum: int, frame: object) -> None:
        raise _OutOfTime()

    def score(response: str, gt: str) -> float:
        pred = extract_answer(response).answer
        if pred is None or not gt.strip() or unevaluated(pred):  # the reward's rubric rule, as in ours
            return 0.0
        previous = signal.signal(signal.SIGALRM, on_alarm)
        signal.setitimer(signal.ITIMER_REAL, timeout_s)
        try:
            return float(bool(judge(pred, gt.strip(), leaf=leaf)))
        except _OutOfTime:
            return 0.0
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, previous)

    return score


def run_single(name: str, scorer: Callable[[str, str], float], cases: list[Case]) -> dict:
    latencies, verdicts = [], []
    start = time.perf_counter()
    for i, c in enumerate(cases):
        t = time.perf_counter()
        verdicts.append(scorer(c.response, c.gt) >= 0.5)
        latencies.append(time.perf_counter() - t)
        if (i + 1) % 1000 == 0:
            print(f"  {name}: {i + 1}/{len(cases)}", file=sys.stderr, flush=True)
    total = time.perf_counter() - start
    return {"name": name, "verdicts": verdicts, "latencies": latencies, "rps": len(cases) / total}


def summarize(res: dict, cases: list[Case], batch_rps: float | None) -> dict:
    labelled = [(c, v) for c, v in zip(cases, res["verdicts"]) if c.label is not None]
    wrong = [(c, v) for c, v in labelled if c.label == 0]
    hack = [(c, v) for c, v in labelled if c.kind == "hack"]
    lat = sorted(res["latencies"])
    q = statistics.quantiles(lat, n=100)
    return {
        "name": res["name"],
        "acc": sum(v == bool(c.label) for c, v in labelled) / len(labelled),
        "recall": sum(v for c, v in labelled if c.label == 1) / max(1, sum(c.label == 1 for c, _ in labelled)),
        "fp": sum(v for _, v in wrong) / len(wrong),
        "fp_hack": sum(v for _, v in hack),
        "n_hack": len(hack),
        "rps": res["rps"],
        "batch_rps": batch_rps,
        "p50": q[49] * 1000,
        "p99": q[98] * 1000,
        "max": lat[-1] * 1000,
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path, default=DEFAULT_DATA)
    ap.add_argument("--limit", type=int, default=None, help="use only the first N problems")
    ap.add_argument("--timeout-s", type=float, default=1.0, help="this reward's per-call budget")
    args = ap.parse_args(argv)
    if not args.data.is_file():
        print(f"reward_bench: error: data file {args.data} not found", file=sys.stderr)
        return 2

    import logging

    from npu_rl.reward.math import compute_score_batch, warm_up

    logging.getLogger("math_verify").setLevel(logging.CRITICAL)  # its timeouts log whole responses

    cases = build_cases(args.data, args.limit)
    n_lab = sum(c.label is not None for c in cases)
    print(
        f"{len(cases)} responses ({n_lab} labelled: {sum(c.label == 1 for c in cases)} correct, "
        f"{sum(c.kind == 'near_miss' for c in cases)} near-misses, {sum(c.kind == 'hack' for c in cases)} hacks; "
        f"{len(cases) - n_lab} pathological)",
        file=sys.stderr,
    )
    warm_up(wait_s=30)  # worker start-up (imports) is a one-off per training run, not per response

    rows = []
    ours = run_single("npu_rl.reward", ours_scorer(), cases)
    t = time.perf_counter()
    batch = compute_score_batch(
        ["math"] * len(cases), [c.response for c in cases], [c.gt for c in cases], timeout_s=args.timeout_s
    )
    batch_rps = len(cases) / (time.perf_counter() - t)
    mismatch = sum((b["acc"] >= 0.5) != v for b, v in zip(batch, ours["verdicts"]))
    results = [
        ours,
        run_single("sympy + numeral fast path", sympy_scorer(args.timeout_s), cases),
        run_single("math-verify (recipe)", math_verify_scorer(), cases),
        run_single("verl math_reward", verl_scorer(), cases),
    ]
    rows = [summarize(r, cases, batch_rps if r is ours else None) for r in results]
    labelled = [k for k, c in enumerate(cases) if c.label is not None]
    disagree = sum(ours["verdicts"][k] != results[1]["verdicts"][k] for k in labelled)

    print(
        "\n| scorer | accuracy | recall | FP rate | hack FPs | resp/s (1 proc) | resp/s (batch) "
        "| p50 ms | p99 ms | max ms |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        b = f"{r['batch_rps']:.0f}" if r["batch_rps"] else "n/a"
        print(
            f"| {r['name']} | {r['acc']:.4f} | {r['recall']:.4f} | {r['fp']:.4f} | {r['fp_hack']}/{r['n_hack']} "
            f"| {r['rps']:.0f} | {b} | {r['p50']:.2f} | {r['p99']:.2f} | {r['max']:.1f} |"
        )
    print_forms(cases, results)
    mv = rows[2]
    print(
        f"\nspeed-up vs Math-Verify: {rows[0]['rps'] / mv['rps']:.1f}x (1 proc), "
        f"{rows[0]['batch_rps'] / mv['rps']:.1f}x (batch); sympy + numeral fast path: "
        f"{rows[1]['rps'] / mv['rps']:.1f}x; batch/single verdict mismatches: {mismatch}; "
        f"verdicts differing between the two judges' leaves: {disagree}/{len(labelled)}"
    )
    ours_row = rows[0]
    ok = (
        ours_row["acc"] >= 0.999
        and ours_row["fp"] == 0
        and ours_row["fp_hack"] == 0
        and mismatch == 0
        and ours_row["rps"] >= 10 * mv["rps"]
        and ours_row["max"] <= args.timeout_s * 1000
    )
    print("targets met" if ok else "TARGETS NOT MET")
    return 0 if ok else 1


def print_forms(cases: list[Case], results: list[dict]) -> None:
    """Accuracy per kind of case (rewrites and near-misses per model form), every scorer."""
    groups: dict[str, list[int]] = {}
    for k, c in enumerate(cases):
        if c.label is not None:
            groups.setdefault(f"{c.kind}: {c.form}" if c.form else c.kind, []).append(k)
    print("\n| cases | n | " + " | ".join(r["name"] for r in results) + " |")
    print("|---|---|" + "---|" * len(results))
    for name in sorted(groups, key=lambda g: (g.split(":")[0] != "correct", g)):
        ks = groups[name]
        accs = [sum(r["verdicts"][k] == bool(cases[k].label) for k in ks) / len(ks) for r in results]
        print(f"| {name} | {len(ks)} | " + " | ".join(f"{a:.3f}" for a in accs) + " |")


if __name__ == "__main__":
    raise SystemExit(main())
