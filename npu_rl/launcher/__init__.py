"""The launcher: recipe -> verl command, environment, Ray cluster, checkpoints."""
