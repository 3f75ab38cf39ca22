"""Training-health report of a run: the recipe's metric reading rules applied to
its TensorBoard / JSONL curves, with PNG plots and one self-contained HTML page."""

from .builder import Report, build_report
from .rules import Finding
from .thresholds import Thresholds, load_thresholds

__all__ = ["Finding", "Report", "Thresholds", "build_report", "load_thresholds"]
