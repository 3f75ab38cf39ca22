"""FP8 -> BF16 cast of a DeepSeek-V3/R1 HF checkpoint, on the CPU (no CUDA, no triton).

DeepSeek publishes V3/R1 with its linear weights in float8_e4m3fn, each ``<name>.weight`` next to a float32
``<name>.weight_scale_inv`` holding one factor per 128 x 128 block (shape ``(ceil(rows / 128), ceil(cols / 128))``;
the last row/column of blocks is partial). Dequantising is ``bf16(float32(weight) * scale[block])`` (block size:
config.json's ``quantization_config.weight_block_size``). DeepSeek's ``inference/fp8_cast_bf16.py`` does this
with a triton kernel on ``cuda``, which an Ascend host has neither of; this uses torch on the CPU, shard by shard:

* memory stays near one output shard (tensors are read lazily with safetensors' mmap; a scale stored
  in another shard is read from there through the index);
* each shard is written to a temporary name and renamed, so a shard under its final name is complete
  and a rerun skips it (resumable);
* the ``*.weight_scale_inv`` tensors are dropped, the index is rewritten for what is left, config.json
  loses ``quantization_config``, and the side files (tokenizer, remote code) are copied.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

from ..errors import UserError

WEIGHT_INDEX = "model.safetensors.index.json"
SCALE_SUFFIX = "_scale_inv"
BLOCK = 128
TMP_SUFFIX = ".tmp"
# Bytes per element of safetensors' dtype names (for the index's total_size).
ITEMSIZE = {
    "F64": 8,
    "I64": 8,
    "F32": 4,
    "I32": 4,
    "BF16": 2,
    "F16": 2,
    "I16": 2,
    "U8": 1,
    "I8": 1,
    "BOOL": 1,
    "F8_E4M3": 1,
    "F8_E5M2": 1,
}


def dequantize(weight, scale_inv, block: tuple[int, int] = (BLOCK, BLOCK)):
    """``weight`` (float8, rows x cols) times its per-block ``scale_inv``, as bfloat16."""
    import torch  # lazy: torch

    rows, cols = weight.shape
    br, bc = block
    want = (-(-rows // br), -(-cols // bc))
    if tuple(scale_inv.shape) != want:
        raise UserError(
            f"scale of shape {tuple(scale_inv.shape)} does not match a {rows}x{cols} weight in "
            f"{br}x{bc} blocks (expected {want})"
        )
    scale = scale_inv.to(torch.float32)
    scale = scale.repeat_interleave(br, dim=0)[:rows].repeat_interleave(bc, dim=1)[:, :cols]
    return (weight.to(torch.float32) * scale).to(torch.bfloat16)


def _weight_map(src: Path) -> dict[str, str]:
    index = src / WEIGHT_INDEX
    if index.is_file():
        try:
            return dict(json.loads(index.read_text(encoding="utf-8"))["weight_map"])
        except (ValueError, KeyError, TypeError) as e:
            raise UserError(f"{index}: not a safetensors index ({e})") from e
    shards = sorted(p.name for p in src.glob("*.safetensors"))
    if not shards:
        raise UserError(f"{src}: no *.safetensors weights to cast")
    from safetensors import safe_open  # lazy: safetensors

    out = {}
    for shard in shards:
        with safe_open(str(src / shard), framework="pt") as f:
            out.update(dict.fromkeys(f.keys(), shard))
    return out


def _block_size(src: Path) -> tuple[int, int]:
    config = src / "config.json"
    if config.is_file():
        q = json.loads(config.read_text(encoding="utf-8")).get("quantization_config") or {}
        size = q.get("weight_block_size")
        if size:
            return int(size[0]), int(size[1])
    return BLOCK, BLOCK


class _Shards:
    """Lazily opened safetensors files of the source checkpoint (mmap: nothing is read until asked)."""

    def __init__(self, src: Path):
        self.src = src
        self._open: dict[str, Any] = {}  # shard file name -> safetensors safe_open handle

    def get(self, shard: str, name: str):
        from safetensors import safe_open  # lazy: safetensors

        if shard not in self._open:
            self._open[shard] = safe_open(str(self.src / shard), framework="pt")
        return self._open[shard].get_tensor(name)

    def close(self) -> None:
        self._open.clear()


def cast_shard(
    src: Path, shard: str, names: list[str], weight_map: dict[str, str], shards: _Shards, block: tuple[int, int]
) -> dict:
    """The BF16 tensors of one source shard (scales dropped, FP8 weights dequantised)."""
    import torch  # lazy: torch

    out = {}
    for name in names:
        if name.endswith(SCALE_SUFFIX):
            continue
        t = shards.get(shard, name)
        if t.dtype == torch.float8_e4m3fn:
            scale_name = name + SCALE_SUFFIX
            if scale_name not in weight_map:
                raise UserError(f"{src / shard}: FP8 tensor {name} has no {scale_name}")
            t = dequantize(t, shards.get(weight_map[scale_name], scale_name), block)
        out[name] = t.contiguous()
    return out


def copy_hf_side_files(src: Path, dst: Path) -> list[Path]:
    """Give the BF16 weights the config, tokenizer and remote code of the published FP8
    checkpoint so the directory loads as a model; ``quantization_config`` is dropped from
    config.json (the weights are no longer FP8). Files already in ``dst`` are kept."""
    copied = []
    for f in sorted(src.iterdir()):
        if not f.is_file() or f.suffix == ".safetensors" or f.name == WEIGHT_INDEX or (dst / f.name).exists():
            continue
        if f.name == "config.json":
            config = json.loads(f.read_text(encoding="utf-8"))
            config.pop("quantization_config", None)
            (dst / f.name).write_text(json.dumps(config, indent=2) + "\n", encoding="utf-8")
        else:
            shutil.copy2(f, dst / f.name)
        copied.append(dst / f.name)
    return copied


def _write_index(dst: Path, weight_map: dict[str, str]) -> None:
    from safetensors import safe_open  # lazy: safetensors

    kept = {k: v for k, v in weight_map.items() if not k.endswith(SCALE_SUFFIX)}
    total = 0
    for shard in sorted(set(kept.values())):
        with safe_open(str(dst / shard), framework="pt") as f:
            for name in f.keys():  # noqa: SIM118 (a safe_open handle is not iterable)
                s = f.get_slice(name)
                n = 1
                for d in s.get_shape():
                    n *= d
                total += n * ITEMSIZE.get(s.get_dtype(), 2)
    index = {"metadata": {"total_size": total}, "weight_map": dict(sorted(kept.items()))}
    tmp = dst / (WEIGHT_INDEX + TMP_SUFFIX)
    tmp.write_text(json.dumps(index, indent=2) + "\n", encoding="utf-8")
    os.replace(tmp, dst / WEIGHT_INDEX)


def cast_checkpoint(src: Path, dst: Path, show_progress: bool = True) -> dict[str, int]:
    """Cast ``src`` (FP8 HF checkpoint) into ``dst``; returns {"written": n, "skipped": m} shards."""
    from safetensors.torch import save_file  # lazy: safetensors, torch

    src, dst = Path(src), Path(dst)
    if not src.is_dir():
        raise UserError(f"--input-fp8-hf-path {src}: directory not found")
    weight_map = _weight_map(src)
    missing = sorted({s for s in weight_map.values() if not (src / s).is_file()})
    if missing:
        raise UserError(f"{src}: shard {missing[0]} named by {WEIGHT_INDEX} is missing ({len(missing)} in all)")
    block = _block_size(src)
    by_shard: dict[str, list[str]] = {}
    for name, shard in weight_map.items():
        by_shard.setdefault(shard, []).append(name)
    dst.mkdir(parents=True, exist_ok=True)
    for stale in dst.glob("*" + TMP_SUFFIX):  # an interrupted write; redone below
        stale.unlink()
    shards = _Shards(src)
    counts = {"written": 0, "skipped": 0}
    from rich.progress import (  # lazy: rich
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
    )

    with Progress(
        TextColumn("fp8 -> bf16"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TextColumn("{task.description}"),
        disable=not show_progress,
    ) as bar:
        task = bar.add_task("", total=len(by_shard))
        for shard in sorted(by_shard):
            if (dst / shard).is_file():
                counts["skipped"] += 1
                bar.update(task, advance=1, description=f"{shard} (done before)")
                continue
            bar.update(task, description=shard)
            tensors = cast_shard(src, shard, by_shard[shard], weight_map, shards, block)
            tmp = dst / (shard + TMP_SUFFIX)
            if tensors:
                save_file(tensors, str(tmp), metadata={"format": "pt"})
                os.replace(tmp, dst / shard)
            del tensors
            counts["written"] += 1
            bar.update(task, advance=1)
    shards.close()
    _write_index(dst, weight_map)
    copy_hf_side_files(src, dst)
    print(f"fp8 -> bf16: {dst} ({counts['written']} shard(s) written, {counts['skipped']} already there)", flush=True)
    return counts
