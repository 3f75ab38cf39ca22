"""The cann9.1-verl0.9 stack line's Ascend images, built on the stand-in of its base and rehearsed inside.

`npu-rl image build --variant a2|a3 --stack cann9.1-verl0.9 --stand-in` builds docker/Dockerfile on the
stand-in of quay.io/ascend/vllm-ascend:v0.23.0 (its Python layer as vllm-ascend's Dockerfile makes it,
on python:3.12-slim-bookworm or its stand-in, without CANN: npu_rl.envs.ascend_base says what it
lacks), with the line's lock and the Dockerfile's strict pip check. Then the line's compose file runs
`rehearse-qwen` in the A2 image: the seeds' Qwen2.5 run on verl 0.9.0, through prepare, up to where verl
would reserve NPUs. The seeds' line's images are tests/containers/test_ascend_images.py.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path

import pytest
from compose_run import compose_project
from needs import missing_setup

from npu_rl import versions
from npu_rl.image.build import build_variant
from npu_rl.image.engine import engine
from npu_rl.render.compose import LINE_TRAIN_RECIPES, line_file

REPO = Path(__file__).resolve().parents[2]
LINE = "cann9.1-verl0.9"
RECIPE = LINE_TRAIN_RECIPES[LINE]

pytestmark = [pytest.mark.image, pytest.mark.timeout(3000)]


@pytest.fixture(scope="module")
def images():
    if not (os.environ.get("DOCKER_HOST") or Path("/var/run/docker.sock").exists() or shutil.which("podman")):
        missing_setup("no Docker and no podman", f"apt-get install podman, then `make image-ascend STACK={LINE}`")
    logs: list[str] = []
    built = {v: build_variant(v, root=REPO, stand_in=True, stack=LINE, log=logs.append) for v in ("a2", "a3")}
    return built, logs


def test_the_lines_images_carry_its_stack(images, capsys):
    built, logs = images
    pins = versions.load(stack=LINE)
    with engine() as eng:
        attrs = {v: eng.client.images.get(b.tag).attrs for v, b in built.items()}
        # The image's own Python set, read in it: the line's, not the seeds'.
        probe = (
            "import importlib.metadata as m, json, sys; print(json.dumps({d: m.version(d) for d in "
            "('verl', 'vllm', 'vllm-ascend', 'torch', 'torch-npu', 'transformers', 'megatron-core', 'transferqueue',"
            " 'arctic-inference')} | {'python': '%d.%d' % sys.version_info[:2]}))"
        )
        out = eng.client.containers.run(
            built["a2"].tag, ["-c", probe], entrypoint="python3", remove=True, network_mode="none"
        )
    found = json.loads(out.decode().strip().splitlines()[-1])
    assert found["python"] == versions.get("common.python", pins) == "3.12"
    assert found["verl"] == versions.get("verl.version", pins) and found["transformers"] == versions.get(
        "common.transformers", pins
    )
    assert found["vllm"] == f"{versions.get('ascend.vllm', pins)}+empty"
    assert found["vllm-ascend"] == versions.get("ascend.vllm_ascend", pins)
    assert found["torch-npu"] == versions.get("ascend.torch_npu", pins) and found["torch"] == "2.10.0"
    assert found["megatron-core"] == versions.get("ascend.megatron_core", pins) and found["transferqueue"] == "0.1.8"
    # Built here from its sdist, as the base image's pip builds it.
    assert found["arctic-inference"] == "0.1.1"
    for variant, a in attrs.items():
        labels = a["Config"]["Labels"]
        assert labels["io.npu-rl.chip"] == variant and labels["io.npu-rl.verl"] == versions.line_verl(LINE)
        assert labels["org.opencontainers.image.base.name"].endswith(f"vllm-ascend0.23.0-{LINE}-standin")
        assert built[variant].tag.endswith(f"-{LINE}-{variant}-standin")
    # The stand-in base passed the line's Python-set check (Python 3.12, torch 2.10.0, ...) before each build.
    assert sum("has the pinned Python set (Python 3.12" in line for line in logs) == 2, logs
    layers = {v: a["RootFS"]["Layers"] for v, a in attrs.items()}
    shared = next((i for i, (x, y) in enumerate(zip(layers["a2"], layers["a3"])) if x != y), len(layers["a2"]))
    # The chips share every layer before `ARG CHIP` (the base, the line's locked set), as on the seeds' line.
    runtime = (REPO / "docker" / "Dockerfile").read_text().split("FROM runtime AS eval")[0]
    after_chip = [line for line in runtime.split("\nARG CHIP\n")[1].splitlines() if line.startswith(("RUN", "COPY"))]
    assert len(layers["a2"]) - shared <= len(after_chip), (shared, len(layers["a2"]), after_chip)
    with capsys.disabled():
        for b in built.values():
            print(f"\nimage {b.tag} on {b.base}: {b.size_bytes / 1e9:.2f} GB in {b.seconds:.0f} s")


def test_rehearse_qwen_of_the_lines_compose_file_runs_in_its_a2_image(images, tmp_path, tiny_model, capsys):
    built, _ = images
    ws = tmp_path / "ws"
    tiny_model(ws / "standin" / "tiny-qwen2", steps=1)
    variables = {"MODEL_SOURCE": "/workspace/standin/tiny-qwen2", "MATH_SOURCE": "sample", "SHM_SIZE": "2g"}
    start = time.monotonic()
    with compose_project(
        "rehearse", ws, "npurlline", REPO / "compose" / line_file(LINE), NPU_RL_IMAGE=built["a2"].tag, **variables
    ) as compose:
        run = compose.up("rehearse-qwen", timeout=1800)
    seconds = time.monotonic() - start
    log = run.stdout + run.stderr
    assert run.returncode == 0, log[-4000:]
    assert f"rehearsal of {RECIPE} passed; stopped at ResourcePoolManager.create_resource_pool" in log, log[-3000:]
    report = json.loads(next(ws.rglob("rehearsal.json")).read_text())
    assert report["complete"] and report["error"] is None
    # verl 0.9.0 in the image, on the stand-in of its Ascend platform, planned one A2 card: NPU bundles.
    assert [len(g["bundles"]) for g in report["plan"]["requested"]] == [1]
    assert report["plan"]["requested"][0]["bundles"][0].get("NPU") == 1, report["plan"]
    assert "worker config FSDPActorConfig built" in report["checked"]
    assert any("PlatformNPUStandIn (device npu" in c for c in report["checked"]), report["checked"]
    with capsys.disabled():
        print(f"\ncompose -f {line_file(LINE)} rehearse-qwen in {built['a2'].tag}: {seconds:.0f} s")
