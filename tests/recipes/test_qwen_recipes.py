"""The Qwen recipes use the demo's prompt semantics (not the CPU demo's own template) and the
1-card recipe runs the 280 steps its header names."""

from __future__ import annotations

from npu_rl import cli
from npu_rl.model.tokenizer_override import load_override, resolve_override
from npu_rl.recipe.loader import load_recipe

QWEN = ["qwen2_5_1_5b_math_a2_1card", "qwen2_5_1_5b_math_a2_4card"]
MATH_TRAIN = 7500  # MATH-lighteval's train split


def _render(recipe: str, messages, tools=None) -> str:
    from transformers.utils.chat_template_utils import _compile_jinja_template

    template = load_override(resolve_override(load_recipe(recipe).model.tokenizer_config))["chat_template"]
    return _compile_jinja_template(template).render(messages=messages, tools=tools, add_generation_prompt=True)


def test_the_qwen_template_is_the_demo_prompt_in_qwen_chat_format():
    for recipe in QWEN:
        assert load_recipe(recipe).model.tokenizer_config == "tokenizer/qwen2_5_math_demo_chat_template.json"
        out = _render(recipe, [{"role": "user", "content": "1+1?"}])
        assert out.startswith(
            "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant."
        )
        assert "within <answer> tags with the answer enclosed in \\boxed{}." in out and "Step 1" not in out
        assert out.endswith("<|im_end|>\n<|im_start|>user\n1+1?<|im_end|>\n<|im_start|>assistant\n")
    # A system message of the conversation replaces the default; tools get Qwen's tools block.
    out = _render(
        QWEN[0],
        [{"role": "system", "content": "S"}, {"role": "user", "content": "x"}],
        tools=[{"type": "function", "function": {"name": "calc"}}],
    )
    assert out.startswith("<|im_start|>system\nS\n\n# Tools\n") and '"name": "calc"' in out
    assert out.count("<|im_start|>system") == 1
    # The CPU demo keeps the project's own template.
    assert load_recipe("tiny_math_cpu").model.tokenizer_config == "tokenizer/math_reasoning_chat_template.json"


def test_the_one_card_recipe_runs_280_steps(capsys):
    r = load_recipe("qwen2_5_1_5b_math_a2_1card")
    per_epoch = MATH_TRAIN // r.algorithm.train_batch_size  # verl's train dataloader drops the last partial batch
    assert per_epoch * r.algorithm.total_epochs >= 280 == r.algorithm.total_training_steps
    assert cli.main(["train", "--recipe", r.name, "--dry-run"]) in (0, None)
    assert "trainer.total_training_steps=280" in capsys.readouterr().out
