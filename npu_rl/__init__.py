"""npu-rl: GRPO training of LLMs on Ascend NPUs (and on CPU for laptops and CI)."""

__version__ = "0.1.0"
