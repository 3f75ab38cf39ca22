"""Evaluation of trained checkpoints against the base model: a local transformers
backend for CPU and quick checks, and the recipe's OpenCompass run for the NPU image.
Both produce the same table (model, step, dataset, metric, score).

pyarrow, torch, transformers (the train extra) and rich are imported inside the functions that use them
(``# lazy: ...``): `npu-rl report` and the demo read eval tables, and the OpenCompass backend runs, without them."""

from .local import EvalResult, evaluate
from .table import ResultTable, Row

__all__ = ["EvalResult", "ResultTable", "Row", "evaluate"]
