"""The Ascend base image's Python set against the pins (npu_rl.image.base_check), on the probe's answers."""

from __future__ import annotations

import pytest

from npu_rl import versions
from npu_rl.image import base_check

# What quay.io/ascend/vllm-ascend:v0.9.1 reports: CPU torch, vLLM built with the empty target, torch_npu's post release.
REAL = {
    "python": "3.11",
    "dists": {
        "torch": "2.5.1+cpu",
        "torchvision": "0.20.1",
        "torch_npu": "2.5.1.post1",
        "vllm": "0.9.1+empty",
        "vllm_ascend": "0.9.1",
        "lark": "1.2.2",
    },
}


def _with(**dists: str | None) -> dict:
    out = {"python": REAL["python"], "dists": dict(REAL["dists"])}
    for name, version in dists.items():
        if version is None:
            out["dists"].pop(name)
        else:
            out["dists"][name] = version
    return out


def test_the_real_base_and_the_stand_in_match():
    assert base_check.mismatches(REAL) == []
    # The stand-in's PyPI torch has no local label; the names are compared as packaging normalises them.
    standin = _with(torch="2.5.1", torch_npu=None, vllm_ascend=None)
    standin["dists"] |= {"torch-npu": "2.5.1.post1", "vllm-ascend": "0.9.1"}
    assert base_check.mismatches(standin) == []


@pytest.mark.parametrize(
    ("found", "first"),
    [
        (_with(torch="2.6.0"), "torch 2.6.0, the pins want 2.5.1 (ascend.torch)"),
        (_with(torch="2.5.1.post1"), "torch 2.5.1.post1, the pins want 2.5.1 (ascend.torch)"),
        (_with(torchvision="0.21.0"), "torchvision 0.21.0, the pins want 0.20.1 (ascend.torchvision)"),
        (_with(torch_npu="2.6.0rc1"), "torch-npu 2.6.0rc1, the pins want 2.5.1 (ascend.torch_npu)"),
        (_with(vllm="0.9.2"), "vllm 0.9.2, the pins want 0.9.1 (ascend.vllm)"),
        (_with(vllm_ascend=None), "no vllm-ascend, the pins want 0.9.1 (ascend.vllm_ascend)"),
        ({**REAL, "python": "3.10"}, "Python 3.10, the pins want 3.11 (common.python)"),
    ],
)
def test_a_different_pinned_package_is_named_first(found, first):
    assert base_check.mismatches(found)[0] == first


def test_every_mismatch_is_listed_in_order():
    found = _with(torch="2.6.0", vllm="0.10.0")
    assert [m.split(",")[0] for m in base_check.mismatches(found)] == ["torch 2.6.0", "vllm 0.10.0"]
    assert len(base_check.PINNED) == 5 and {k for _, k, _ in base_check.PINNED} <= set(
        f"ascend.{k}" for k in versions.load()["ascend"]
    )
