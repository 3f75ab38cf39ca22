"""A short supervised warm start for the tiny CPU model.

The NPU recipes start GRPO from an Instruct model that already answers in the
expected layout and is sometimes right; a randomly initialised model is never
right, every group gets the same reward, GRPO's advantages are all zero and no
update happens. A few seconds of teacher forcing on the sample's worked answers
gives the tiny model that starting point, so the CPU demo exercises a real
learning signal (non-zero advantages, KL, clipping) through the same trainer.
"""

from __future__ import annotations

import random
from pathlib import Path


def target_response(solution: str, answer: str) -> str:
    """The layout the MATH reward grades: numbered reasoning in <think>, boxed answer in <answer>."""
    return f"<think>\nStep 1: {solution}\n</think>\n<answer>\n\\boxed{{{answer}}}\n</answer>"


def build_examples(tokenizer, rows: list[dict], prompt_suffix: str) -> list[tuple[list[int], int]]:
    from ..data.math import extract_ground_truth

    examples = []
    for row in rows:
        answer = extract_ground_truth(row["solution"])
        if answer is None:
            continue
        messages = [{"role": "user", "content": f"{row['problem']} {prompt_suffix}"}]
        prompt_ids = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True)
        # The solution's prose without its final boxed sentence keeps responses short.
        reasoning = row["solution"].split("\\boxed")[0].rstrip(" $=.").strip() or "Compute."
        response = target_response(reasoning, answer) + tokenizer.eos_token
        response_ids = tokenizer(response, add_special_tokens=False)["input_ids"]
        examples.append((list(prompt_ids) + response_ids, len(prompt_ids)))
    return examples


def warm_start(model_dir: Path, rows: list[dict], *, steps: int = 300, batch_size: int = 16, lr: float = 3e-3,
               seed: int = 0) -> float:
    """Teacher-force the worked answers into ``model_dir`` in place; returns the final loss."""
    import torch
    from rich.progress import Progress
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from ..data.math import INSTRUCTION

    torch.manual_seed(seed)
    rng = random.Random(seed)
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir, torch_dtype=torch.float32)
    model.train()
    examples = build_examples(tokenizer, rows, INSTRUCTION)
    optim = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(optim, T_max=steps)
    pad = tokenizer.pad_token_id
    loss_value = float("nan")
    with Progress(transient=True) as progress:
        task = progress.add_task("warm start (teacher forcing)", total=steps)
        for _ in range(steps):
            batch = rng.sample(examples, min(batch_size, len(examples)))
            width = max(len(ids) for ids, _ in batch)
            input_ids = torch.full((len(batch), width), pad, dtype=torch.long)
            labels = torch.full((len(batch), width), -100, dtype=torch.long)
            mask = torch.zeros((len(batch), width), dtype=torch.long)
            for i, (ids, n_prompt) in enumerate(batch):
                input_ids[i, : len(ids)] = torch.tensor(ids)
                labels[i, n_prompt : len(ids)] = torch.tensor(ids[n_prompt:])
                mask[i, : len(ids)] = 1
            loss = model(input_ids=input_ids, attention_mask=mask, labels=labels).loss
            optim.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optim.step()
            sched.step()
            loss_value = loss.item()
            progress.update(task, advance=1, description=f"warm start (loss {loss_value:.3f})")
    model.save_pretrained(model_dir, safe_serialization=True)
    return loss_value
