"""The local backend: greedy, batched generation with transformers over the
validation split, graded with the training reward's accuracy. For CPU runs and
quick checks; the NPU path uses OpenCompass."""

from __future__ import annotations

import json
from collections.abc import Callable
from contextlib import nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import UserError
from .dataset import Problem, dataset_label, load_problems
from .grading import Grade, grade, load_grader
from .table import Row


@dataclass
class Sample:
    data_source: str
    prompt: str
    output: str
    ground_truth: str
    acc: float
    score: float
    pred: str | None
    boxed: float | None = None


@dataclass
class EvalResult:
    model: str
    step: int
    model_dir: str
    samples: list[Sample] = field(default_factory=list)

    @property
    def n(self) -> int:
        return len(self.samples)

    @property
    def correct(self) -> int:
        return sum(1 for s in self.samples if s.acc > 0)

    @property
    def accuracy(self) -> float:
        return 100.0 * self.correct / self.n if self.n else 0.0

    def rows(self, baseline: bool = False) -> list[Row]:
        """accuracy (percent) and mean reward per dataset, so reward-vs-accuracy gaps show in the table; where
        the reward says which answers were boxed, the boxed share and the accuracy among boxed answers
        (percent), which tell a model that learnt the format from one that learnt the answers."""
        by_ds: dict[str, list[Sample]] = {}
        for s in self.samples:
            by_ds.setdefault(dataset_label(s.data_source), []).append(s)
        rows = []
        for ds, items in by_ds.items():
            acc = 100.0 * sum(1 for s in items if s.acc > 0) / len(items)
            reward = sum(s.score for s in items) / len(items)
            rows.append(Row(self.model, self.step, ds, "accuracy", acc, baseline))
            rows.append(Row(self.model, self.step, ds, "reward", reward, baseline))
            if all(s.boxed is not None for s in items):
                boxed = [s for s in items if s.boxed]
                rows.append(Row(self.model, self.step, ds, "boxed", 100.0 * len(boxed) / len(items), baseline))
                right = 100.0 * sum(1 for s in boxed if s.acc > 0) / len(boxed) if boxed else 0.0
                rows.append(Row(self.model, self.step, ds, "boxed accuracy", right, baseline))
        return rows

    def write_samples(self, path: Path) -> Path:
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "w", encoding="utf-8") as f:
            for s in self.samples:
                f.write(json.dumps(s.__dict__, ensure_ascii=False) + "\n")
        return path


def _device(requested: str | None) -> str:
    if requested:
        return requested
    import torch  # lazy: torch

    npu = getattr(torch, "npu", None)  # registered by torch_npu when it is imported
    if npu is not None and npu.is_available():
        return "npu"
    return "cuda" if torch.cuda.is_available() else "cpu"


def load_model(model_dir: Path, device: str, chat_template: str | None = None):
    from transformers import AutoModelForCausalLM, AutoTokenizer  # lazy: transformers

    if not (model_dir / "config.json").is_file():
        raise UserError(f"{model_dir}: not a Hugging Face model directory (no config.json)")
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    if chat_template is not None:
        tokenizer.chat_template = chat_template
    if tokenizer.chat_template is None:
        raise UserError(f"{model_dir}: the tokenizer has no chat template")
    # Left padding keeps every prompt's last token next to its first generated one.
    tokenizer.padding_side = "left"
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    model = AutoModelForCausalLM.from_pretrained(model_dir, torch_dtype="auto").to(device)
    model.eval()
    return model, tokenizer


def _batches(order: list[int], size: int):
    for i in range(0, len(order), size):
        yield order[i : i + size]


def generate(
    model,
    tokenizer,
    prompts: list[str],
    *,
    max_new_tokens: int,
    batch_size: int,
    on_batch: Callable[[int], None] | None = None,
) -> list[str]:
    """Greedy completions of ``prompts`` in their order.

    Prompts are batched by length so that little compute goes to padding. They are
    never truncated: cutting one would drop the assistant turn the answer follows.
    """
    import torch  # lazy: torch

    lengths = [len(tokenizer(p, add_special_tokens=False).input_ids) for p in prompts]
    order = sorted(range(len(prompts)), key=lambda i: lengths[i])
    outputs: list[str] = [""] * len(prompts)
    eos = model.generation_config.eos_token_id
    if eos is None:
        eos = tokenizer.eos_token_id
    for idx in _batches(order, batch_size):
        enc = tokenizer(
            [prompts[i] for i in idx],
            return_tensors="pt",
            padding=True,
            add_special_tokens=False,
            return_token_type_ids=False,
        ).to(model.device)
        with torch.inference_mode():
            out = model.generate(
                **enc,
                do_sample=False,
                max_new_tokens=max_new_tokens,
                eos_token_id=eos,
                pad_token_id=tokenizer.pad_token_id,
                temperature=None,
                top_p=None,
                top_k=None,
            )
        new_tokens = out[:, enc["input_ids"].shape[1] :]
        # verl decodes validation responses the same way before grading them.
        texts = tokenizer.batch_decode(new_tokens, skip_special_tokens=True)
        for i, text in zip(idx, texts):
            outputs[i] = text
        if on_batch:
            on_batch(len(idx))
    return outputs


def _progress(enabled: bool):
    if not enabled:
        return nullcontext(None)
    from rich.console import Console  # lazy: rich
    from rich.progress import (  # lazy: rich
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    return Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TimeRemainingColumn(),
        console=Console(stderr=True),
    )


def grade_outputs(problems: list[Problem], outputs: list[str], prompts: list[str], grader) -> list[Sample]:
    samples = []
    for p, prompt, text in zip(problems, prompts, outputs, strict=True):
        g: Grade = grade(grader, p.data_source, text, p.ground_truth, p.extra_info)
        samples.append(Sample(p.data_source, prompt, text, p.ground_truth, g.acc, g.score, g.pred, g.boxed))
    return samples


def evaluate(
    model_dir: str | Path,
    val_files: list[str | Path],
    *,
    limit: int | None = None,
    max_new_tokens: int = 1024,
    batch_size: int = 8,
    chat_template: str | None = None,
    grader: Callable[..., Any] | None = None,
    model_label: str | None = None,
    step: int = 0,
    device: str | None = None,
    progress: bool = True,
) -> EvalResult:
    """Generate greedily for the validation problems with the model in ``model_dir``
    and grade each answer with the reward's accuracy (``npu_rl.reward.math`` by default)."""
    if batch_size <= 0 or max_new_tokens <= 0:
        raise UserError(f"batch_size and max_new_tokens must be positive (got {batch_size}, {max_new_tokens})")
    model_dir = Path(model_dir)
    if not model_dir.is_dir():
        raise UserError(f"model directory not found: {model_dir}")
    problems = load_problems(list(val_files), limit)
    grader = grader or load_grader()
    model, tokenizer = load_model(model_dir, _device(device), chat_template)
    prompts = [tokenizer.apply_chat_template(p.messages, add_generation_prompt=True, tokenize=False) for p in problems]
    label = model_label or model_dir.name
    with _progress(progress) as bar:
        task = bar.add_task(f"eval {label}", total=len(prompts)) if bar else None
        outputs = generate(
            model,
            tokenizer,
            prompts,
            max_new_tokens=max_new_tokens,
            batch_size=batch_size,
            on_batch=(lambda k: bar.advance(task, k)) if bar else None,
        )
    result = EvalResult(model=label, step=step, model_dir=str(model_dir))
    result.samples = grade_outputs(problems, outputs, prompts, grader)
    return result
