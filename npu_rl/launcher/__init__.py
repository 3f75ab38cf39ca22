"""The launcher: recipe -> verl command, environment, Ray cluster, checkpoints.

pyarrow, ray and verl's stack (the train extra) are imported where a check reads a parquet file, a step
runs on several nodes or verl's config is composed (``# lazy: ...``): the modules import without them,
so `npu-rl doctor` reports a missing verl as a failed check instead of failing to start."""
