"""Training-health report of a run: the recipe's metric reading rules applied to
its TensorBoard / JSONL curves, with PNG plots and one self-contained HTML page, a
throughput card, and the comparison of a run with a baseline run.

matplotlib (about 0.5 s) and tensorboard's event reader (about 2 s), both the train extra, are imported where
a plot is drawn or an event file read (``# lazy: ...``): curves from JSONL logs and the rules need neither."""

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
