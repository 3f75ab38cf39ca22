"""A tiny, randomly initialised Qwen2-architecture model with a locally trained
byte-level BPE tokenizer: the CPU stand-in for Qwen2.5 (nothing is downloaded)."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from .tokenizer_override import apply_override

# Qwen2.5's special tokens, so chat templates and eos handling match the real model.
SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
# The reward's format tags become single tokens so that a tiny model can learn them.
TAG_TOKENS = ["<think>", "</think>", "<answer>", "</answer>", "\\boxed{"]
# An agent's: the hermes tool-call tags, and Qwen2.5's around a tool's answer.
AGENT_TOKENS = ("<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>")


def train_tokenizer(texts: Iterable[str], vocab_size: int = 1024, extra_tokens: Iterable[str] = ()):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers  # lazy: tokenizers
    from transformers import PreTrainedTokenizerFast  # lazy: transformers

    tok = Tokenizer(models.BPE())
    # Qwen2's pre-tokenizer splits numbers into single digits; so does this one,
    # which also lets the tiny model copy numbers it never saw in training.
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [pre_tokenizers.Digits(individual_digits=True), pre_tokenizers.ByteLevel(add_prefix_space=False)]
    )
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(texts, trainer=trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        bos_token=None,
        unk_token=None,
        model_max_length=4096,
        # Qwen2 takes no token_type_ids; generate() rejects unused inputs.
        model_input_names=["input_ids", "attention_mask"],
    )
    fast.add_tokens([*TAG_TOKENS, *extra_tokens])  # type: ignore[attr-defined]  # lazy export typed as its dummy
    fast.padding_side = "left"  # type: ignore[attr-defined]  # lazy export typed as its dummy
    return fast


def build_tiny_model(
    out: Path,
    texts: list[str],
    *,
    hidden_size: int = 64,
    layers: int = 2,
    heads: int = 4,
    kv_heads: int = 2,
    vocab_size: int = 1024,
    seed: int = 0,
    chat_template_override: Path | None = None,
    extra_tokens: Iterable[str] = (),
) -> Path:
    import torch  # lazy: torch
    from transformers import GenerationConfig, Qwen2Config, Qwen2ForCausalLM  # lazy: transformers

    out.mkdir(parents=True, exist_ok=True)
    tokenizer = train_tokenizer(texts, vocab_size=vocab_size, extra_tokens=extra_tokens)
    tokenizer.save_pretrained(out)
    if chat_template_override is not None:
        apply_override(out, chat_template_override)

    eos_id = tokenizer.convert_tokens_to_ids("<|im_end|>")
    pad_id = tokenizer.convert_tokens_to_ids("<|endoftext|>")
    config = Qwen2Config(
        vocab_size=len(tokenizer),
        hidden_size=hidden_size,
        intermediate_size=hidden_size * 2,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=kv_heads,
        max_position_embeddings=4096,
        tie_word_embeddings=True,
        bos_token_id=pad_id,
        eos_token_id=eos_id,
        pad_token_id=pad_id,
        torch_dtype="float32",
    )
    torch.manual_seed(seed)
    model = Qwen2ForCausalLM(config)
    model.generation_config = GenerationConfig(eos_token_id=eos_id, pad_token_id=pad_id, bos_token_id=pad_id)
    model.save_pretrained(out, safe_serialization=True)
    return out
