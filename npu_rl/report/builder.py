"""Builds the health report of one run: findings (JSON, Markdown), PNG plots and a
self-contained HTML page."""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from jinja2 import Environment, PackageLoader, select_autoescape

from ..dashboards import chart_links, running
from ..errors import UserError
from ..eval.table import CSV_NAME, ResultTable
from .plots import Plot, plot_run, plot_throughput
from .rules import Context, Finding, apply_rules, exit_code, notes
from .scalars import load_run
from .thresholds import Thresholds, load_thresholds
from .throughput import E2E_FORMULA, PARTS, ThroughputCard, fmt, throughput_card

STATUS = {0: "healthy", 1: "warnings", 2: "critical"}


@dataclass
class Report:
    run_dir: Path
    out_dir: Path
    findings: list[Finding]
    notes: list[str] = field(default_factory=list)
    plots: list[Plot] = field(default_factory=list)
    # {kind: url} of the dashboards serving this run when the report was built (none: no links).
    dashboards: dict[str, str] = field(default_factory=dict)
    throughput: ThroughputCard | None = None  # None: the run logged no step times
    html: Path | None = None
    json: Path | None = None
    markdown: Path | None = None

    @property
    def exit_code(self) -> int:
        return exit_code(self.findings)

    @property
    def status(self) -> str:
        return STATUS[self.exit_code]

    def links(self, metric: str) -> dict[str, str]:
        return chart_links(self.dashboards, metric)

    def to_markdown(self) -> str:
        lines = [f"# Training health: {self.status}", "", f"run: {self.run_dir}", ""]
        if self.findings:
            lines += ["| severity | rule | metric | step | value | finding | check |", "|---|---|---|---|---|---|---|"]
            for f in self.findings:
                d = f.to_dict()
                charts = " ".join(f"[{name}]({url})" for name, url in self.links(f.metric).items())
                metric = f"{f.metric} {charts}" if charts else f.metric
                lines.append(
                    f"| {f.severity} | {f.rule} | {metric} | {f.step} | {d['value_text']} | {f.message} | {f.check} |"
                )
        else:
            lines.append("No findings: every rule passed.")
        lines += [""] + [f"- note: {n}" for n in self.notes]
        if self.throughput is not None:
            lines += ["", "## Throughput", ""] + [f"- {line}" for line in self.throughput.text_lines()]
        return "\n".join(lines).rstrip() + "\n"


def as_thresholds(value: Thresholds | Path | str | dict | None) -> Thresholds:
    if isinstance(value, Thresholds):
        return value
    if isinstance(value, str):
        value = Path(value)
    return load_thresholds(value)


def _eval_accuracy(table_path: Path | None) -> tuple[tuple[float, float, int] | None, str | None]:
    """(baseline %, newest trained %, its step) from an evaluation table, and the table as Markdown."""
    if table_path is None:
        return None, None
    table = ResultTable.read_csv(table_path)
    deltas = sorted((d for d in table.deltas() if d.metric == "accuracy"), key=lambda d: d.step)
    acc = (deltas[-1].baseline, deltas[-1].score, deltas[-1].step) if deltas else None
    return acc, table.to_markdown()


def find_eval_table(run_dir: Path) -> Path | None:
    hits = sorted(run_dir.rglob(CSV_NAME), key=lambda p: p.stat().st_mtime)
    return hits[-1] if hits else None


def _on_policy(recipe: Any) -> bool | None:
    if recipe is None:
        return None
    a = recipe.algorithm
    return a.ppo_epochs == 1 and a.ppo_mini_batch_size == a.train_batch_size


def _turn_cap(recipe: Any) -> int | None:
    """The most turns verl's tool agent loop lets a rollout have, as its num_turns counts them (the prompt
    too). After each of the policy's turns it stops at the assistant cap or at the tool-answer cap
    (tool_agent_loop.py:286-291), else a tool answers: 32 for caps of 16 and 16, not 33."""
    mt = recipe.rollout.multi_turn if recipe is not None else None
    if mt is None or not mt.enabled or mt.max_assistant_turns is None or mt.max_user_turns is None:
        return None
    assistant = user = 0
    while True:
        assistant += 1
        if assistant >= mt.max_assistant_turns or user >= mt.max_user_turns:
            return 1 + assistant + user
        user += 1


def build_report(
    run_dir: str | Path,
    out_dir: str | Path | None = None,
    thresholds: Thresholds | Path | str | dict | None = None,
    *,
    recipe: Any = None,
    eval_table: str | Path | None = None,
) -> Report:
    """Read the run's curves under ``run_dir``, apply the health rules and write
    ``health.json``, ``health.md``, ``plots/*.png`` and ``report.html`` to ``out_dir``
    (default ``<run_dir>/report``). ``recipe`` (optional) tells which rules apply;
    ``eval_table`` (default: the newest eval_table.csv under ``run_dir``) adds the
    evaluation's accuracy to the reward-hacking check."""
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise UserError(f"run directory not found: {run_dir}")
    t = as_thresholds(thresholds)
    series = load_run(run_dir)
    if not series:
        raise UserError(f"no TensorBoard event files or verl file-logger JSONL with scalars under {run_dir}")
    table_path = Path(eval_table) if eval_table else find_eval_table(run_dir)
    if table_path is not None and not table_path.is_file():
        raise UserError(f"evaluation table not found: {table_path}")
    eval_acc, eval_md = _eval_accuracy(table_path)

    ctx = Context(
        series=series, thresholds=t, on_policy=_on_policy(recipe), eval_accuracy=eval_acc, turn_cap=_turn_cap(recipe)
    )
    findings = apply_rules(ctx)
    out = Path(out_dir) if out_dir else run_dir / "report"
    out.mkdir(parents=True, exist_ok=True)
    report = Report(run_dir=run_dir, out_dir=out, findings=findings, notes=notes(ctx), dashboards=running(run_dir))
    report.plots = plot_run(series, findings, t, out / "plots")
    report.throughput = throughput_card(series, recipe, t.throughput.warmup_steps, run_dir=run_dir)
    if report.throughput is not None:
        report.plots += plot_throughput(report.throughput, out / "plots")

    steps = sorted({int(s) for ser in series.values() for s in ser.steps})
    report.json = out / "health.json"
    report.json.write_text(
        json.dumps(
            {
                "status": report.status,
                "exit_code": report.exit_code,
                "run_dir": str(run_dir),
                "steps": [steps[0], steps[-1]],
                "findings": [f.to_dict() for f in findings],
                "notes": report.notes,
                "plots": [str(p.path) for p in report.plots],
                "eval_table": str(table_path) if table_path else None,
                "dashboards": report.dashboards,
                "throughput": report.throughput.to_dict() if report.throughput else None,
            },
            indent=2,
        )
        + "\n",
        encoding="utf-8",
    )
    report.markdown = out / "health.md"
    report.markdown.write_text(report.to_markdown(), encoding="utf-8")
    report.html = out / "report.html"
    report.html.write_text(_render_html(report, steps, eval_md), encoding="utf-8")
    return report


def render_template(name: str, **context: Any) -> str:
    """One of the report's HTML templates (npu_rl/report/templates), autoescaped."""
    env = Environment(loader=PackageLoader("npu_rl.report", "templates"), autoescape=select_autoescape(["j2", "html"]))
    return env.get_template(name).render(**context)


def _render_html(report: Report, steps: list[int], eval_md: str | None) -> str:
    plots = [{"title": p.title, "data": base64.b64encode(p.path.read_bytes()).decode("ascii")} for p in report.plots]
    return render_template(
        "report.html.j2",
        run_name=report.run_dir.name,
        run_dir=str(report.run_dir),
        status=report.status,
        n_points=len(steps),
        first_step=steps[0],
        last_step=steps[-1],
        findings=[f.to_dict() | {"links": report.links(f.metric)} for f in report.findings],
        notes=report.notes,
        plots=plots,
        eval_markdown=eval_md,
        throughput=report.throughput,
        parts=PARTS,
        formula=E2E_FORMULA,
        num=fmt,
    )
