"""The tiny CPU model and `npu-rl model fetch` from a local directory."""

from __future__ import annotations

import json

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from npu_rl.cli import main


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    out = tmp_path_factory.mktemp("m") / "tiny"
    assert main(["model", "tiny", "--out", str(out), "--warm-start-steps", "0"]) == 0
    return out


def test_tiny_model_is_a_loadable_qwen2_with_the_recipe_chat_template(tiny):
    model = AutoModelForCausalLM.from_pretrained(tiny)
    tok = AutoTokenizer.from_pretrained(tiny)
    assert model.config.model_type == "qwen2"
    assert model.config.hidden_size == 64 and model.config.num_hidden_layers == 2
    for special in ("<|im_start|>", "<|im_end|>", "<|endoftext|>", "<think>", "</answer>"):
        assert len(tok(special, add_special_tokens=False)["input_ids"]) == 1, special
    text = tok.apply_chat_template(
        [{"role": "user", "content": "What is 2+2?"}], add_generation_prompt=True, tokenize=False
    )
    assert text.startswith("<|im_start|>system\n") and "<think>" in text and "\\boxed" in text
    assert text.endswith("<|im_start|>assistant\n")
    ids = tok(text, return_tensors="pt")
    # min_new_tokens keeps greedy decoding from stopping at EOS: the prompt, then exactly 4 new tokens.
    out = model.generate(**ids, max_new_tokens=4, min_new_tokens=4, do_sample=False, pad_token_id=tok.pad_token_id)
    prompt_len = ids["input_ids"].shape[1]
    assert out.shape == (1, prompt_len + 4)
    assert torch.equal(out[0, :prompt_len], ids["input_ids"][0])
    assert all(0 <= t < model.config.vocab_size for t in out[0, prompt_len:].tolist())
    again = model.generate(**ids, max_new_tokens=4, min_new_tokens=4, do_sample=False, pad_token_id=tok.pad_token_id)
    assert torch.equal(out, again)


def test_tiny_model_is_deterministic_for_a_seed(tiny, tmp_path):
    again = tmp_path / "again"
    assert main(["model", "tiny", "--out", str(again), "--warm-start-steps", "0"]) == 0
    a = AutoModelForCausalLM.from_pretrained(tiny).state_dict()
    b = AutoModelForCausalLM.from_pretrained(again).state_dict()
    assert all(torch.equal(a[k], b[k]) for k in a)


def test_warm_start_lowers_the_loss(tiny, tmp_path):
    import shutil

    from npu_rl.data.sample import generate
    from npu_rl.model.warmstart import warm_start

    work = tmp_path / "w"
    shutil.copytree(tiny, work)
    rows = generate(32, seed=1)
    first = warm_start(work, rows, steps=1, lr=0.0)
    after = warm_start(work, rows, steps=40)
    assert after < first * 0.8


def test_fetch_copies_a_local_dir_and_applies_the_recipe_tokenizer_config(tiny, tmp_path, capsys):
    src = tmp_path / "src"
    import shutil

    shutil.copytree(tiny, src)
    cfg = json.loads((src / "tokenizer_config.json").read_text())
    cfg["chat_template"] = "plain"
    (src / "tokenizer_config.json").write_text(json.dumps(cfg))
    out = tmp_path / "out"
    assert main(["model", "fetch", str(src), "--out", str(out), "--recipe", "qwen2_5_1_5b_math_a2_4card"]) == 0
    applied = json.loads((out / "tokenizer_config.json").read_text())
    assert "<think>" in applied["chat_template"] and applied["chat_template"] != "plain"
    assert not any(k.startswith("_") for k in applied)
    assert (out / "model.safetensors").is_file()


def test_fetch_of_a_dir_without_weights_fails_clearly(tmp_path, capsys):
    (tmp_path / "empty").mkdir()
    (tmp_path / "empty" / "config.json").write_text("{}")
    assert main(["model", "fetch", str(tmp_path / "empty"), "--out", str(tmp_path / "o")]) == 2
    assert "no weights" in capsys.readouterr().err
