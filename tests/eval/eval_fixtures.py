"""Self-contained inputs for the eval tests: a tiny random Qwen2 with a byte-level BPE
tokenizer and a chat template, a verl-format validation parquet, a CPU recipe."""

from __future__ import annotations

from pathlib import Path

import yaml

DATA_SOURCE = "DigitalLearningGmbH/MATH-lighteval"
PROBLEMS = [
    ("What is $2+3$?", "5"),
    ("Compute $\\frac{1}{2}+\\frac{1}{4}$.", "\\frac{3}{4}"),
    ("Solve $x+1=3$ for $x$.", "2"),
    ("What is $7 \\cdot 6$?", "42"),
    ("Simplify $\\sqrt{16}$.", "4"),
    ("What is $10-4$?", "6"),
]
CHAT_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def build_tiny_qwen2(out: Path) -> Path:
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=300,
        special_tokens=["<|endoftext|>", "<|im_start|>", "<|im_end|>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator([p for p, _ in PROBLEMS] * 4, trainer=trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|im_end|>", pad_token="<|endoftext|>")
    fast.chat_template = CHAT_TEMPLATE
    fast.save_pretrained(out)
    config = Qwen2Config(
        vocab_size=len(fast),
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=512,
        eos_token_id=fast.eos_token_id,
        pad_token_id=fast.pad_token_id,
        bos_token_id=fast.pad_token_id,
    )
    torch.manual_seed(0)
    Qwen2ForCausalLM(config).save_pretrained(out)
    return out


def write_val_parquet(path: Path, problems=PROBLEMS) -> Path:
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = [
        {
            "data_source": DATA_SOURCE,
            "prompt": [{"role": "user", "content": q}],
            "ability": "math",
            "reward_model": {"style": "rule", "ground_truth": a},
            "extra_info": {"split": "test", "index": i},
        }
        for i, (q, a) in enumerate(problems)
    ]
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_pylist(rows), path)
    return path


def write_recipe(path: Path, *, model_path: str = "models/tiny", platform: str = "cpu", **data) -> Path:
    recipe = {
        "name": "tiny_test",
        "model": {"path": model_path},
        "data": {
            "train_files": ["data/train.parquet"],
            "val_files": ["data/test.parquet"],
            "max_prompt_length": 64,
            "max_response_length": 6,
            **data,
        },
        "algorithm": {"train_batch_size": 2, "ppo_mini_batch_size": 2, "ppo_micro_batch_size_per_device": 1},
        "rollout": {"name": "hf" if platform == "cpu" else "vllm"},
        "resources": {"platform": platform, "devices_per_node": 1 if platform == "cpu" else 4},
        "logging": {"project": "proj", "experiment": "exp"},
    }
    path.write_text(yaml.safe_dump(recipe), encoding="utf-8")
    return path
