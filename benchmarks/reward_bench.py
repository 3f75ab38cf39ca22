"""MATH reward benchmark: this reward vs Math-Verify (recipe config) vs verl's built-in.

Builds labelled responses from the MATH500 answers (equivalent rewrites,
near-misses, reward hacks) plus a few pathological inputs, scores them with the
three scorers in one process, and prints accuracy, false positives, throughput
and latency. Usage:

    .venv/bin/python benchmarks/reward_bench.py [--data ../shared/data/math500/test.jsonl] [--limit N]
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
import time
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from typing import Callable

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
    return [h for h in out if h]


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
    return cases + pathological()


def math_verify_scorer() -> Callable[[str, str], float]:
    """The recipe's reward (new_math_reward.py) accuracy check, configured as the recipe does."""
    from latex2sympy2_extended import NormalizationConfig
    from math_verify import ExprExtractionConfig, LatexExtractionConfig, parse, verify

    gold_cfg = [LatexExtractionConfig(), ExprExtractionConfig()]
    norm = NormalizationConfig(nits=False, malformed_operators=False, basic_latex=True, boxed="all", units=True)
    pred_cfg = [LatexExtractionConfig(normalization_config=norm, boxed_match_priority=0, try_extract_without_anchor=False)]

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
    print(f"{len(cases)} responses ({n_lab} labelled: {sum(c.label == 1 for c in cases)} correct, "
          f"{sum(c.kind == 'near_miss' for c in cases)} near-misses, {sum(c.kind == 'hack' for c in cases)} hacks; "
          f"{len(cases) - n_lab} pathological)", file=sys.stderr)
    warm_up(wait_s=30)  # worker start-up (imports) is a one-off per training run, not per response

    rows = []
    ours = run_single("npu_rl.reward", ours_scorer(), cases)
    t = time.perf_counter()
    batch = compute_score_batch(["math"] * len(cases), [c.response for c in cases], [c.gt for c in cases],
                                timeout_s=args.timeout_s)
    batch_rps = len(cases) / (time.perf_counter() - t)
    mismatch = sum((b["acc"] >= 0.5) != v for b, v in zip(batch, ours["verdicts"]))
    rows.append(summarize(ours, cases, batch_rps))
    rows.append(summarize(run_single("math-verify (recipe)", math_verify_scorer(), cases), cases, None))
    rows.append(summarize(run_single("verl math_reward", verl_scorer(), cases), cases, None))

    print("\n| scorer | accuracy | recall | FP rate | hack FPs | resp/s (1 proc) | resp/s (batch) "
          "| p50 ms | p99 ms | max ms |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        b = f"{r['batch_rps']:.0f}" if r["batch_rps"] else "n/a"
        print(f"| {r['name']} | {r['acc']:.4f} | {r['recall']:.4f} | {r['fp']:.4f} | {r['fp_hack']}/{r['n_hack']} "
              f"| {r['rps']:.0f} | {b} | {r['p50']:.2f} | {r['p99']:.2f} | {r['max']:.1f} |")
    mv = rows[1]
    print(f"\nspeed-up vs Math-Verify: {rows[0]['rps'] / mv['rps']:.1f}x (1 proc), "
          f"{rows[0]['batch_rps'] / mv['rps']:.1f}x (batch); batch/single verdict mismatches: {mismatch}")
    ok = (rows[0]["acc"] >= mv["acc"] and rows[0]["fp_hack"] == 0 and rows[0]["rps"] >= 10 * mv["rps"]
          and rows[0]["max"] <= args.timeout_s * 1000)
    print("targets met" if ok else "TARGETS NOT MET")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
