"""Whether an Ascend base image carries the Python set the pins were made for, asked before building.

docker/Dockerfile installs configs/locks/npu.txt with ``--no-deps`` over the base image's packages;
that lock was resolved against the pinned torch, torchvision, torch_npu, vLLM and vllm-ascend on the
pinned Python (configs/locks/npu-base.txt). On a base with another of these the image would build
and then fail at run time, or at best at the strict ``pip check`` after minutes of downloads, so
``npu-rl image build`` reads the base's installed distributions first (one short container) and
refuses with the first mismatch.
"""

from __future__ import annotations

import json
from typing import Any

from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from .. import versions
from ..envs.locks import LOCK_DIR, lock_name
from ..errors import UserError
from .engine import _one_line, docker_sdk

RACE_TRIES = 3

# Run with the base's own python3: its version and every installed distribution's.
# The first of two copies of a distribution on sys.path is the one imported: it is the one kept.
PROBE = (
    "import importlib.metadata as m, json, sys; d = {}; "
    "[d.setdefault(x.metadata['Name'], x.version) for x in m.distributions() if x.metadata['Name']]; "
    "print(json.dumps({'python': '%d.%d' % sys.version_info[:2], 'dists': d}))"
)

# Distribution, pin key, whether a later post release of the pin matches (Ascend publishes torch_npu
# 2.5.1.post1 for the pin 2.5.1). Local labels never count: the base's torch is 2.5.1+cpu, its vLLM
# 0.9.1+empty.
PINNED = (
    ("torch", "ascend.torch", False),
    ("torchvision", "ascend.torchvision", False),
    ("torch-npu", "ascend.torch_npu", True),
    ("vllm", "ascend.vllm", False),
    ("vllm-ascend", "ascend.vllm_ascend", True),
)


def _matches(found: str, pin: str, post: bool) -> bool:
    try:
        have, want = Version(found), Version(pin)
    except InvalidVersion:
        return False
    if (have.epoch, have.release, have.pre, have.dev) != (want.epoch, want.release, want.pre, want.dev):
        return False
    return (have.post or 0) >= (want.post or 0) if post else have.post == want.post


def mismatches(found: dict[str, Any], pins: dict[str, Any] | None = None) -> list[str]:
    """What in ``found`` (the probe's answer) differs from the pins, in the order of :data:`PINNED`."""
    python = str(versions.get("common.python", pins))
    out = []
    if found.get("python") != python:
        out.append(f"Python {found.get('python')}, the pins want {python} (common.python)")
    dists: dict[str, Any] = {canonicalize_name(k): v for k, v in (found.get("dists") or {}).items()}
    for name, key, post in PINNED:
        pin = str(versions.get(key, pins))
        have = dists.get(name)
        if have is None:
            out.append(f"no {name}, the pins want {pin} ({key})")
        elif not _matches(have, pin, post):
            out.append(f"{name} {have}, the pins want {pin} ({key})")
    return out


def python_set(client: Any, ref: str) -> dict[str, Any]:
    """The base's Python version and installed distributions, from a container without network."""
    docker = docker_sdk()
    for attempt in range(RACE_TRIES):
        try:
            out = client.containers.run(
                ref, ["-c", PROBE], entrypoint="python3", remove=True, network_mode="none", stdout=True, stderr=False
            )
            break
        except docker.errors.ContainerError as err:
            raise UserError(
                f"base image {ref}: python3 -c failed in it, so its Python set cannot be checked "
                f"({_one_line(err)[:200]})"
            ) from None
        except docker.errors.APIError as err:
            # podman's service answers 500 when it inspects a container whose process has just exited ("read
            # /proc/<pid>/cgroup: no such process", seen in CI): the probe ran; run it again.
            if attempt + 1 < RACE_TRIES and "no such process" in str(err):
                continue
            why = _one_line(err)[:200]
            raise UserError(f"base image {ref}: cannot run it to read its Python set ({why})") from None
    text = out.decode("utf-8", errors="replace") if isinstance(out, bytes) else str(out)
    try:
        return json.loads(text.strip().splitlines()[-1])
    except (ValueError, IndexError):
        raise UserError(f"base image {ref}: unreadable answer to the Python set probe: {text[-200:]!r}") from None


def check(client: Any, ref: str, pins: dict[str, Any] | None = None) -> dict[str, Any]:
    """Refuse ``ref`` (UserError, one line) when its Python set is not the one ``pins`` (a stack line's;
    the default line's by default) were made for; its set otherwise."""
    found = python_set(client, ref)
    wrong = mismatches(found, pins)
    if wrong:
        more = f" (and {len(wrong) - 1} more: {'; '.join(wrong[1:])})" if len(wrong) > 1 else ""
        lock = f"{LOCK_DIR}/{lock_name(str(versions.get('line.name', pins)), 'npu')}.txt"
        raise UserError(
            f"base image {ref} has {wrong[0]}{more}: {lock} was resolved for the "
            f"pinned set, build on {versions.get('ascend.base_image', pins)} or pass --stand-in"
        )
    return found
