"""Model preparation: a tiny random Qwen2 for CPU runs, and fetching real weights."""
