"""Data preparation: MATH-lighteval parquet -> verl's RL parquet format.

verl, pyarrow, datasets (the train extra) and rich are imported inside the functions that use them
(``# lazy: ...``): `npu-rl --help` loads deepscaler and math for their defaults, without them."""
