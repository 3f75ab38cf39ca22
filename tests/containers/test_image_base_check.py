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


class _RacingContainers:
    """podman's service answering 500 for the probe's container that has just exited, ``races`` times."""

    def __init__(self, races: int):
        self.races, self.calls = races, 0

    def run(self, *args, **kwargs):
        import json

        from npu_rl.image.engine import docker_sdk

        self.calls += 1
        if self.calls <= self.races:
            raise docker_sdk().errors.APIError('500 Server Error: ("read /proc/28707/cgroup: no such process")')
        return json.dumps(REAL).encode()


def test_the_probe_is_run_again_when_the_engine_loses_the_exited_container():
    client = type("Client", (), {})()
    client.containers = _RacingContainers(races=2)
    assert base_check.python_set(client, "base:tag") == REAL and client.containers.calls == 3
    client.containers = _RacingContainers(races=base_check.RACE_TRIES)
    with pytest.raises(base_check.UserError, match=r"^base image base:tag: cannot run it .*no such process"):
        base_check.python_set(client, "base:tag")
