"""Model preparation: a tiny random Qwen2 for CPU runs, and fetching real weights.

torch, transformers, tokenizers, safetensors, huggingface_hub and rich are imported inside the functions that
use them (``# lazy: ...``): `npu-rl --help` reads warmstart's defaults and `npu-rl prepare` fp8_cast's file
names without the training stack (the train extra)."""
