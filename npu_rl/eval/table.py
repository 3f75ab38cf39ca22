"""The evaluation table in the source recipe's shape (model, step, dataset, metric,
score), written as Markdown and CSV with each evaluated step's difference from the
baseline."""

from __future__ import annotations

import csv
import io
from dataclasses import dataclass
from pathlib import Path

COLUMNS = ("model", "step", "dataset", "metric", "score")
CSV_NAME = "eval_table.csv"
MD_NAME = "eval_table.md"


@dataclass(frozen=True)
class Row:
    model: str
    step: int
    dataset: str
    metric: str
    score: float  # percent, as OpenCompass prints it (43.48)
    baseline: bool = False


PERCENT = ("accuracy", "boxed", "boxed accuracy")  # metrics in percent; the rest are means in 0-1


def format_score(metric: str, score: float, sign: bool = False) -> str:
    """Percentages with two decimals as OpenCompass prints them; a mean reward (0-1) needs three."""
    return f"{score:{'+' if sign else ''}.{2 if metric in PERCENT else 3}f}"


@dataclass(frozen=True)
class Delta:
    model: str
    step: int
    dataset: str
    metric: str
    baseline: float
    score: float

    @property
    def points(self) -> float:
        return self.score - self.baseline

    @property
    def relative(self) -> float | None:
        """Relative change in percent (the recipe's "26.6% improvement"); None from a zero baseline."""
        return None if self.baseline == 0 else 100.0 * self.points / self.baseline


class ResultTable:
    def __init__(self, rows: list[Row] | None = None):
        self.rows: list[Row] = list(rows or [])

    def add(self, row: Row) -> None:
        self.rows.append(row)

    def extend(self, rows: list[Row]) -> None:
        self.rows.extend(rows)

    def deltas(self) -> list[Delta]:
        """Each non-baseline row against the baseline row with the same dataset and metric."""
        base = {(r.dataset, r.metric): r.score for r in self.rows if r.baseline}
        return [
            Delta(r.model, r.step, r.dataset, r.metric, base[(r.dataset, r.metric)], r.score)
            for r in self.rows
            if not r.baseline and (r.dataset, r.metric) in base
        ]

    def _delta_by_row(self) -> dict[tuple, Delta]:
        return {(d.model, d.step, d.dataset, d.metric): d for d in self.deltas()}

    def to_csv(self) -> str:
        deltas = self._delta_by_row()
        buf = io.StringIO()
        writer = csv.writer(buf, lineterminator="\n")
        writer.writerow([*COLUMNS, "baseline", "delta"])
        for r in self.rows:
            d = deltas.get((r.model, r.step, r.dataset, r.metric))
            writer.writerow(
                [
                    r.model,
                    r.step,
                    r.dataset,
                    r.metric,
                    format_score(r.metric, r.score),
                    int(r.baseline),
                    format_score(r.metric, d.points, sign=True) if d else "",
                ]
            )
        return buf.getvalue()

    def to_markdown(self) -> str:
        lines = ["| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
        for r in self.rows:
            lines.append(f"| {r.model} | {r.step} | {r.dataset} | {r.metric} | {format_score(r.metric, r.score)} |")
        deltas = self.deltas()
        if deltas:
            lines.append("")
            for d in deltas:
                rel = f", {d.relative:+.1f}%" if d.relative is not None else ""
                lines.append(
                    f"- {d.dataset} {d.metric}: {format_score(d.metric, d.baseline)} -> "
                    f"{format_score(d.metric, d.score)} at step {d.step} "
                    f"({format_score(d.metric, d.points, sign=True)}{' points' if d.metric in PERCENT else ''}{rel})"
                )
        return "\n".join(lines) + "\n"

    def write(self, out_dir: Path) -> tuple[Path, Path]:
        out_dir.mkdir(parents=True, exist_ok=True)
        md, csv_path = out_dir / MD_NAME, out_dir / CSV_NAME
        md.write_text(self.to_markdown(), encoding="utf-8")
        csv_path.write_text(self.to_csv(), encoding="utf-8")
        return md, csv_path

    @classmethod
    def read_csv(cls, path: Path) -> ResultTable:
        with open(path, encoding="utf-8", newline="") as f:
            rows = [
                Row(
                    model=rec["model"],
                    step=int(rec["step"]),
                    dataset=rec["dataset"],
                    metric=rec["metric"],
                    score=float(rec["score"]),
                    baseline=rec.get("baseline", "0") == "1",
                )
                for rec in csv.DictReader(f)
            ]
        return cls(rows)
