"""Run inside the cpu-vllm image (tests/containers/test_vllm_rollout.py): vLLM 0.9.1's CPU decode attention,
which is IPEX's paged-attention kernel there, on the block tables vLLM hands it.

IPEX's decode kernel can take the sequences that share their first KV block with sequence 0 for the beams of
one beam search: it then requires the batch to be made of equal groups of that many sequences, each group of
one context length (intel-extension-for-pytorch, csrc/cpu/aten/kernels/PagedAttentionKrnl.cpp,
``deduce_prompt``). vLLM's prefix cache gives the samples of one prompt its cached first block, so a GRPO
batch breaks that assumption: one layout raises "num seqs is not divisible by beam size", another computes
attention over the wrong lengths without a word (measured here on IPEX 2.7.0: a largest difference of 18
against plain attention). Sequences that share no block (the prefix cache off, as npu-rl's CPU platform sets
it: npu_rl.patches.cpu_platform) decode exactly.

Prints one JSON line: for each case, the error raised or the largest difference from plain attention.
"""

from __future__ import annotations

import json

import torch
from vllm.attention.ops.ipex_attn import PagedAttention, _use_ipex

HEADS, HEAD_SIZE, BLOCK = 2, 32, 128  # the tiny vLLM model's heads; vLLM's CPU block size with IPEX
DTYPE = torch.bfloat16


def decode(tables: list[list[int]], lengths: list[int], seed: int = 0) -> dict:
    gen = torch.Generator().manual_seed(seed)
    blocks = 1 + max(b for t in tables for b in t)
    kv_cache = torch.zeros(2, blocks, BLOCK * HEADS * HEAD_SIZE, dtype=DTYPE)
    key_cache, value_cache = PagedAttention.split_kv_cache(kv_cache, HEADS, HEAD_SIZE)
    # One key and value per physical slot, written the way vLLM writes them.
    keys = torch.randn(blocks * BLOCK, HEADS, HEAD_SIZE, generator=gen).to(DTYPE)
    values = torch.randn(blocks * BLOCK, HEADS, HEAD_SIZE, generator=gen).to(DTYPE)
    slots = torch.arange(blocks * BLOCK)
    one = torch.tensor(1.0)
    PagedAttention.write_to_paged_cache(keys, values, key_cache, value_cache, slots, "auto", one, one)
    query = torch.randn(len(tables), HEADS, HEAD_SIZE, generator=gen).to(DTYPE)
    width = max(len(t) for t in tables)
    block_tables = torch.tensor([t + [0] * (width - len(t)) for t in tables], dtype=torch.int32)
    context = torch.tensor(lengths, dtype=torch.int32)
    out = torch.zeros_like(query)
    scale = HEAD_SIZE**-0.5
    try:
        PagedAttention.forward_decode(
            out, query, key_cache, value_cache, block_tables, context, max(lengths), "auto", HEADS, scale,
            None, one, one,
        )  # fmt: skip
    except RuntimeError as e:
        return {"error": str(e).splitlines()[0]}
    worst = 0.0
    for i, (table, n) in enumerate(zip(tables, lengths)):
        pos = torch.tensor([table[p // BLOCK] * BLOCK + p % BLOCK for p in range(n)])
        k, v = keys[pos].float(), values[pos].float()  # [n, heads, size]
        att = torch.einsum("hd,nhd->hn", query[i].float(), k) * scale
        ref = torch.einsum("hn,nhd->hd", att.softmax(-1), v)
        worst = max(worst, (out[i].float() - ref).abs().max().item())
    return {"max_abs_diff": worst}


def batch(shared: int, total: int, shared_len: int = 140) -> tuple[list[list[int]], list[int]]:
    """``total`` decoding sequences of two blocks each, the first ``shared`` of them samples of one prompt
    whose first block is cached (one length: started together), the others prompts of their own at other
    lengths, as a GRPO batch is laid out when a long prompt's samples come first."""
    tables = [[0, 1 + i] for i in range(shared)]
    first = 1 + shared
    tables += [[first + 2 * i, first + 2 * i + 1] for i in range(total - shared)]
    return tables, [shared_len] * shared + [131 + (3 * i) % 100 for i in range(total - shared)]


CASES = {
    # 13 sequences decoding, 4 of them one prompt's samples on its cached first block: IPEX raises.
    "shared_first_block_13_seqs": batch(4, 13),
    # The tiny recipe's 64 (8 prompts x 8 samples), the first 8 one prompt's samples: IPEX takes them for 8
    # beams, and every group of 8 for one batch of one length, which the others are not: no error, wrong.
    "shared_first_block_64_seqs": batch(8, 64),
    # The same 64 with a block of their own each: what the prefix cache off gives.
    "own_blocks_64_seqs": batch(0, 64),
}

if __name__ == "__main__":
    print(json.dumps({"ipex": _use_ipex, **{name: decode(*case) for name, case in CASES.items()}}))
