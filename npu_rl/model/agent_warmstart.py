"""The tiny agent model's format stage: teacher forcing on the task's multi-turn transcripts.

The transcripts (npu_rl.data.arithmetic) are a fallible teacher's: it calls the code interpreter only some
of the time. A model warmed on them writes a well-formed hermes tool call, reads the tool's answer and boxes
it, or guesses, and guesses wrong; GRPO is left to learn when to call.

Each conversation is laid out as verl's tool agent loop lays it out during a rollout: the first turn
rendered with the tools' schemas, each of the model's turns ending at its close token, and a tool's answer
after the template's turn separator, rendered alone with the default system prompt removed
(verl v0.9.0 experimental/agent_loop/tool_agent_loop.py:420-431). Only the model's own turns are trained,
as verl's multi-turn SFT dataset masks them (utils/dataset/multiturn_sft_dataset.py:234-239).
"""

from __future__ import annotations

import random
from pathlib import Path

from .warmstart import Example, teacher_force


def _render(tokenizer, messages: list[dict], **kwargs) -> str:
    return tokenizer.apply_chat_template(messages, tokenize=False, **kwargs)


def transcript_example(tokenizer, messages: list[dict], tools: list[dict]) -> Example:
    """(token ids, 0/1 mask of the model's own tokens) of one conversation."""
    empty = _render(tokenizer, [{"role": "user", "content": ""}])
    system = empty[: empty.index("<|im_start|>user")]
    close = tokenizer.eos_token
    segments: list[tuple[str, bool]] = [
        (_render(tokenizer, messages[:1], tools=tools, add_generation_prompt=True), False)
    ]
    for i, m in enumerate(messages[1:], start=1):
        if m["role"] == "assistant":
            segments.append((m["content"] + close, True))
            if i < len(messages) - 1:
                segments.append(("\n", False))  # the turn separator the loop restores
        else:
            segments.append((_render(tokenizer, [m], add_generation_prompt=True).removeprefix(system), False))
    ids: list[int] = []
    mask: list[int] = []
    for text, trained in segments:
        part = tokenizer(text, add_special_tokens=False)["input_ids"]
        ids += part
        mask += [int(trained)] * len(part)
    return ids, mask


def warm_start_agent(
    model_dir: Path,
    conversations: list[list[dict]],
    tools: list[dict],
    *,
    steps: int,
    batch_size: int = 16,
    lr: float = 3e-3,
    seed: int = 0,
) -> float:
    """Teacher-force ``conversations`` into ``model_dir`` in place; returns the final loss."""
    from transformers import AutoTokenizer  # lazy: transformers

    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    examples = [transcript_example(tokenizer, c, tools) for c in conversations]

    def draw(rng: random.Random) -> list[Example]:
        return rng.sample(examples, min(batch_size, len(examples)))

    return teacher_force(model_dir, draw, steps=steps, lr=lr, seed=seed)
