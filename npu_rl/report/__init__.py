"""Training-health report of a run: the recipe's metric reading rules applied to
its TensorBoard / JSONL curves, with PNG plots and one self-contained HTML page, a
throughput card, and the comparison of a run with a baseline run."""

from .builder import Report, build_report
from .compare import Comparison, compare_runs
from .rules import Finding
from .thresholds import Thresholds, load_thresholds
from .throughput import ThroughputCard, throughput_card

__all__ = [
    "Comparison",
    "Finding",
    "Report",
    "Thresholds",
    "ThroughputCard",
    "build_report",
    "compare_runs",
    "load_thresholds",
    "throughput_card",
]
