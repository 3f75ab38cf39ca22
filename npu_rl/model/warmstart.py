"""A short supervised warm start for the tiny CPU model, from a fallible teacher.

The NPU recipes start GRPO from an Instruct model that already answers in the expected layout and is
sometimes right; a randomly initialised model is never right, every group gets the same reward, GRPO's
advantages are all zero and no update happens. Teacher forcing on the sample's answers gives that start.

The teacher is fallible in two ways, each drawn afresh every time an example is used: with
probability ``sign_error`` it gets the answer's sign wrong, and with probability ``format_error``
it states the answer in a sentence instead of the ``\\boxed{}`` the prompt asks for. The warmed-up
model copies the right number and mostly boxes it, but picks its sign by a coin flip, on training
and held-out problems alike. Nothing but the reward tells the right sign from the wrong one, so a
held-out gain among boxed answers after GRPO is the reward's doing; with an infallible teacher
there would be nothing left for RL to learn. The format is left mostly learnt (``FORMAT_ERROR``)
so that the demo's gain is in the answers, not in the box (docs/demo.md, "Why these settings").
"""

from __future__ import annotations

import random
from pathlib import Path

from ..data.math import INSTRUCTION, extract_ground_truth


def target_response(solution: str, answer: str, boxed: bool = True) -> str:
    """The layout the MATH reward grades: numbered reasoning in <think>, boxed answer in <answer>."""
    stated = f"\\boxed{{{answer}}}" if boxed else f"The answer is {answer}."
    return f"<think>\nStep 1: {solution}\n</think>\n<answer>\n{stated}\n</answer>"


def flip_sign(answer: str) -> str:
    """The teacher's slip: ``-7`` for ``7`` and ``7`` for ``-7``."""
    return answer[1:] if answer.startswith("-") else f"-{answer}"


SIGN_ERROR = 0.5
FORMAT_ERROR = 0.3

# token ids (prompt + response), and the prompt's length or a 0/1 mask of the tokens trained
Example = tuple[list[int], int | list[int]]


def build_examples(
    tokenizer, rows: list[dict], prompt_suffix: str
) -> list[dict[tuple[bool, bool], tuple[list[int], int]]]:
    """Every teacher answer to each row with a boxed answer, keyed (sign slipped, left unboxed)."""
    examples = []
    for row in rows:
        answer = extract_ground_truth(row["solution"])
        if answer is None:
            continue
        messages = [{"role": "user", "content": f"{row['problem']} {prompt_suffix}"}]
        # The ids themselves: transformers 5 returns a BatchEncoding unless told (the cann9.1-verl0.9 line's).
        prompt_ids = list(
            tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True, return_dict=False)
        )
        # The solution's prose without its final boxed sentence keeps responses short.
        reasoning = row["solution"].split("\\boxed")[0].rstrip(" $=.").strip() or "Compute."
        variants = {}
        for flipped in (False, True):
            for unboxed in (False, True):
                given = flip_sign(answer) if flipped else answer
                response = target_response(reasoning, given, boxed=not unboxed) + tokenizer.eos_token
                ids = tokenizer(response, add_special_tokens=False)["input_ids"]
                variants[flipped, unboxed] = (prompt_ids + ids, len(prompt_ids))
        examples.append(variants)
    return examples


def warm_start(
    model_dir: Path,
    rows: list[dict],
    *,
    steps: int = 1000,
    batch_size: int = 16,
    lr: float = 3e-3,
    sign_error: float = SIGN_ERROR,
    format_error: float = FORMAT_ERROR,
    seed: int = 0,
) -> float:
    """Teacher-force the fallible teacher's answers into ``model_dir`` in place; returns the final loss."""
    for name, p in (("sign_error", sign_error), ("format_error", format_error)):
        if not 0.0 <= p <= 1.0:
            raise ValueError(f"{name} must be in [0, 1], got {p}")
    from transformers import AutoTokenizer  # lazy: transformers

    examples = build_examples(AutoTokenizer.from_pretrained(model_dir), rows, INSTRUCTION)

    def draw(rng: random.Random) -> list[Example]:
        drawn = rng.sample(examples, min(batch_size, len(examples)))
        return [v[rng.random() < sign_error, rng.random() < format_error] for v in drawn]

    return teacher_force(model_dir, draw, steps=steps, lr=lr, seed=seed)


def teacher_force(model_dir: Path, draw, *, steps: int, lr: float = 3e-3, seed: int = 0) -> float:
    """``steps`` of teacher forcing on the batches ``draw(rng)`` gives, saved into ``model_dir`` in place;
    returns the final loss. An example is (token ids, prompt length), every later token trained, or (token
    ids, a 0/1 mask of the tokens trained)."""
    import torch  # lazy: torch
    from rich.progress import Progress  # lazy: rich
    from transformers import AutoModelForCausalLM, AutoTokenizer  # lazy: transformers

    torch.manual_seed(seed)
    rng = random.Random(seed)
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir, torch_dtype=torch.float32)
    model.train()
    optim = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(optim, T_max=steps)
    pad = tokenizer.pad_token_id
    loss_value = float("nan")
    from rich.console import Console  # lazy: rich

    # Never rich's Jupyter display: in a notebook kernel (notebooks/) it re-renders on every step
    # and made the warm start 15x slower (8.5 min instead of 35 s).
    with Progress(transient=True, console=Console(stderr=True, force_jupyter=False)) as progress:
        task = progress.add_task("warm start (teacher forcing)", total=steps)
        for _ in range(steps):
            batch = draw(rng)
            width = max(len(ids) for ids, _ in batch)
            input_ids = torch.full((len(batch), width), pad, dtype=torch.long)
            labels = torch.full((len(batch), width), -100, dtype=torch.long)
            mask = torch.zeros((len(batch), width), dtype=torch.long)
            for i, (ids, trained) in enumerate(batch):
                row = torch.tensor(ids)
                input_ids[i, : len(ids)] = row
                if isinstance(trained, int):
                    labels[i, trained : len(ids)] = row[trained:]
                else:
                    keep = torch.tensor(trained, dtype=torch.bool)
                    labels[i, : len(ids)] = torch.where(keep, row, torch.full_like(row, -100))
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
