"""Data preparation: MATH-lighteval parquet -> verl's RL parquet format."""
