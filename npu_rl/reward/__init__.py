"""Rewards for GRPO on MATH: ``npu_rl.reward.math.compute_score`` is what verl calls.

Kept import-light on purpose: verl loads ``math.py`` by file path, and the worker
processes that run the slow symbolic checks import only what they need.
"""
