"""Train-to-rollout weight reshard: a zero-redundancy alltoallv plan, its executor and report."""

from .layout import InferLayout, ReshardLayoutError, TrainLayout
from .params import ModelShapes, ParamSpec, model_params
from .planner import DEFAULT_BUCKET_BYTES, Plan, plan_reshard
from .report import PlanReport, build_report

__all__ = [
    "DEFAULT_BUCKET_BYTES",
    "InferLayout",
    "ModelShapes",
    "ParamSpec",
    "Plan",
    "PlanReport",
    "ReshardLayoutError",
    "TrainLayout",
    "build_report",
    "model_params",
    "plan_reshard",
]
