"""One module per `npu-rl` job; see npu_rl/cli.py."""
