"""Both Ascend images built from docker/Dockerfile on the stand-in base, and rehearsed inside.

`npu-rl image build --variant a2|a3 --stand-in` builds on the stand-in of the Ascend base image
(its Python layer made as its Dockerfile makes it, without CANN: npu_rl.envs.ascend_base says
what it lacks), with the Dockerfile's strict pip check. Then, in the built images:
`docker compose --profile rehearse up rehearse-qwen` (train-qwen's command with --rehearse,
after the prepare service) with the compose file users run, and the DeepSeek recipe's rehearsal
in the A3 image (one node of its cluster: the placement is planned against the recipe's nodes,
nothing runs on the other 15). Both stop where verl would reserve NPUs.

What `make image-ascend` built is reused (same inputs, same layers); on a machine without it the
first build here takes minutes.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml
from needs import missing_setup

from npu_rl import versions
from npu_rl.cli import main
from npu_rl.image.build import build_variant
from npu_rl.image.engine import engine

REPO = Path(__file__).resolve().parents[2]
COMPOSE = REPO / "compose" / "docker-compose.yml"
QWEN = "qwen2_5_1_5b_math_a2_1card"
DEEPSEEK = "deepseek_r1_671b_a3"

pytestmark = [pytest.mark.image, pytest.mark.timeout(2400)]


@pytest.fixture(scope="module")
def images():
    if not (os.environ.get("DOCKER_HOST") or Path("/var/run/docker.sock").exists() or shutil.which("podman")):
        missing_setup("no Docker and no podman", "apt-get install podman, then `make image-ascend`")
    logs: list[str] = []
    built = {v: build_variant(v, root=REPO, stand_in=True, log=logs.append) for v in ("a2", "a3")}
    return built, logs


def _run_in(client, tag: str, command: list[str], ws: Path, timeout: int = 900) -> tuple[int, str]:
    container = client.containers.run(
        tag,
        command,
        detach=True,
        volumes={str(ws): {"bind": "/workspace", "mode": "rw"}},
        shm_size="2g",
        network_mode="none",
    )
    try:
        code = container.wait(timeout=timeout)["StatusCode"]
        return code, container.logs().decode("utf-8", errors="replace")
    finally:
        container.remove(force=True)


def test_both_chips_build_on_the_stand_in_and_share_their_layers(images, capsys):
    built, logs = images
    with engine() as eng:
        attrs = {v: eng.client.images.get(b.tag).attrs for v, b in built.items()}
    for variant, a in attrs.items():
        labels = a["Config"]["Labels"]
        assert labels["io.npu-rl.chip"] == variant
        assert labels["io.npu-rl.stand-in"].startswith("stand-in base:"), labels
        assert "NPU_RL_STAND_IN" in " ".join(a["Config"]["Env"])
        assert built[variant].tag.endswith(f"-{variant}-standin")
    # Layers are named by their content: what comes before `ARG CHIP` (the base, the locked set) is one set
    # of layers for both chips; the chip's CANN step and npu-rl's install after it are built for each.
    layers = {v: a["RootFS"]["Layers"] for v, a in attrs.items()}
    shared = next((i for i, (x, y) in enumerate(zip(layers["a2"], layers["a3"])) if x != y), len(layers["a2"]))
    runtime = (REPO / "docker" / "Dockerfile").read_text().split("FROM runtime AS eval")[0]
    after_chip = [line for line in runtime.split("\nARG CHIP\n")[1].splitlines() if line.startswith(("RUN", "COPY"))]
    assert len(layers["a3"]) == len(layers["a2"]) and len(layers["a2"]) - shared <= len(after_chip), (
        shared,
        len(layers["a2"]),
        after_chip,
    )
    # The base passed the Python-set check before either build.
    assert sum("has the pinned Python set" in line for line in logs) == 2, logs
    with capsys.disabled():
        for v, b in built.items():
            print(
                f"\nimage {b.tag} on {b.base}: {b.size_bytes / 1e9:.2f} GB in {b.seconds:.0f} s; "
                f"{len(layers[v])} layers, {shared} shared with the other chip"
            )


def test_rehearse_qwen_runs_train_qwens_command_through_compose_in_the_a2_image(
    images, tmp_path, tiny_model, require, capsys
):
    compose = require("docker-compose")
    built, _ = images
    ws = tmp_path / "ws"
    tiny_model(ws / "standin" / "tiny-qwen2", steps=1)
    with engine() as eng:
        env = {
            **os.environ,
            "DOCKER_HOST": eng.host,
            "WORKSPACE_DIR": str(ws),
            "NPU_RL_IMAGE": built["a2"].tag,
            "MODEL_SOURCE": "/workspace/standin/tiny-qwen2",
            "MATH_SOURCE": "sample",
            "SHM_SIZE": "2g",
            "COMPOSE_PROJECT_NAME": f"npurlrehearse{os.getpid()}",
        }
        base = [compose, "-f", str(COMPOSE), "--profile", "rehearse"]
        start = time.monotonic()
        try:
            run = subprocess.run(
                [
                    *base,
                    "up",
                    "--no-build",
                    "--abort-on-container-exit",
                    "--exit-code-from",
                    "rehearse-qwen",
                    "rehearse-qwen",
                ],
                env=env,
                capture_output=True,
                text=True,
                timeout=1500,
            )
        finally:
            subprocess.run([*base, "down"], env=env, capture_output=True, timeout=300)
        seconds = time.monotonic() - start
    log = run.stdout + run.stderr
    assert run.returncode == 0, log[-4000:]
    assert f"rehearsal of {QWEN} passed; stopped at ResourcePoolManager.create_resource_pool" in log, log[-3000:]
    # prepare put the stand-in model and the sample data where the recipe reads them, in the host volume.
    assert (ws / "models" / "Qwen2.5-1.5B-Instruct" / "config.json").is_file()
    assert (ws / "data" / "math" / "train.parquet").is_file()
    reports = list(ws.rglob("rehearsal.json"))
    assert len(reports) == 1, reports
    report = json.loads(reports[0].read_text())
    assert report["complete"] and report["error"] is None
    # The image's verl, with the recipe's patches in its TaskRunner, planned one A2 card.
    assert [len(g["bundles"]) for g in report["plan"]["requested"]] == [1]
    assert "reward" in " ".join(report["checked"]) and "worker config FSDPActorConfig built" in report["checked"]
    # train-qwen's own command in the same image and workspace, without NPUs: refused in one line that
    # says this image can only rehearse, before anything starts.
    train = yaml.safe_load(COMPOSE.read_text())["services"]["train-qwen"]["command"]
    with engine() as eng:
        code, out = _run_in(eng.client, built["a2"].tag, train, ws, timeout=300)
    errors = [line for line in out.splitlines() if line.startswith("npu-rl: error:")]
    assert code == 2 and len(errors) == 1 and "Traceback" not in out, out[-3000:]
    assert "stand-in base" in errors[0] and "npu-rl train --rehearse" in errors[0], errors
    with capsys.disabled():
        print(f"\ncompose rehearse-qwen in {built['a2'].tag}: {seconds:.0f} s; train-qwen's command: {errors[0]}")


def test_the_deepseek_recipe_rehearses_in_the_a3_image(
    images, tmp_path, tiny_model, deepseek_standin, capsys, monkeypatch
):
    built, _ = images
    ws = tmp_path / "ws"
    tiny_model(ws / "models" / "tiny-qwen2", steps=1)
    deepseek_standin(ws / "models" / "tiny-qwen2", ws / "models" / "tiny-dsv3")
    monkeypatch.setenv("NPU_RL_WORKSPACE", str(ws))
    assert main(["data", "math", "--from", "sample", "--out", str(ws / "data" / "sample")]) == 0
    train = pq.read_table(ws / "data" / "sample" / "train.parquet")
    pq.write_table(pa.concat_tables([train, train]), ws / "data" / "sample" / "train-512.parquet")
    command = [
        "npu-rl",
        "train",
        "--recipe",
        DEEPSEEK,
        "--rehearse",
        "--set",
        "model.path=models/tiny-dsv3",
        "--set",
        "data.train_files=[data/sample/train-512.parquet]",
        "--set",
        "data.val_files=[data/sample/test.parquet]",
    ]
    start = time.monotonic()
    with engine() as eng:
        code, log = _run_in(eng.client, built["a3"].tag, command, ws)
    seconds = time.monotonic() - start
    assert code == 0, log[-4000:]
    assert f"rehearsal of {DEEPSEEK} passed" in log, log[-3000:]
    report = json.loads(next(ws.rglob("rehearsal.json")).read_text())
    assert report["complete"]
    assert "worker config McoreActorConfig built" in report["checked"]
    # The recipe's 16 nodes of 16 dies each, planned; one placement group per node.
    assert [len(g["bundles"]) for g in report["plan"]["requested"]] == [16] * 16
    with capsys.disabled():
        print(f"\nDeepSeek rehearsal in {built['a3'].tag}: {seconds:.0f} s")


def test_a_base_with_another_torch_is_refused_before_building(images, tmp_path):
    """A base image whose torch is not the pin: one line naming it, exit 2, nothing built."""
    built, _ = images
    with engine() as eng:
        base = eng.client.images.get(built["a2"].base)
        # The stand-in base with torch's metadata saying 2.6.0, as a base built for another torch would.
        container = eng.client.containers.run(
            base.id,
            [
                "-c",
                (
                    "import importlib.metadata as m, re; p = m.distribution('torch')._path / 'METADATA'; "
                    "p.write_text(re.sub(r'(?m)^Version: .*$', 'Version: 2.6.0', p.read_text(), count=1))"
                ),
            ],
            entrypoint="python3",
            detach=True,
        )
        try:
            assert container.wait(timeout=120)["StatusCode"] == 0, container.logs()
            other = container.commit(repository="localhost/npu-rl-test-other-torch", tag=str(os.getpid()))
        finally:
            container.remove(force=True)
        ref = f"localhost/npu-rl-test-other-torch:{os.getpid()}"
        try:
            run = subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "npu_rl",
                    "image",
                    "build",
                    "--variant",
                    "a2",
                    "--base-image",
                    ref,
                    "--tag",
                    f"npu-rl-test-refused:{os.getpid()}",
                ],
                capture_output=True,
                text=True,
                timeout=600,
                env={**os.environ, "DOCKER_HOST": eng.host},
            )
            refused_built = [i for i in eng.client.images.list() if f"npu-rl-test-refused:{os.getpid()}" in i.tags]
        finally:
            eng.client.images.remove(other.id, force=True)
    assert run.returncode == 2, run.stdout + run.stderr
    lines = run.stderr.strip().splitlines()
    assert lines == [
        f"npu-rl: error: base image {ref} has torch 2.6.0, the pins want {versions.get('ascend.torch')} "
        "(ascend.torch): configs/locks/npu.txt was resolved for the pinned set, build on "
        f"{versions.get('ascend.base_image')} or pass --stand-in"
    ], run.stderr
    assert not refused_built


def test_a_missing_base_or_build_arg_is_one_line(images):
    built, _ = images
    with engine() as eng:
        missing = subprocess.run(
            [
                sys.executable,
                "-m",
                "npu_rl",
                "image",
                "build",
                "--variant",
                "a3",
                "--base-image",
                "localhost/npu-rl-no-such-base:0",
            ],
            capture_output=True,
            text=True,
            timeout=300,
            env={**os.environ, "DOCKER_HOST": eng.host},
        )
    assert missing.returncode == 2, missing.stdout + missing.stderr
    (line,) = missing.stderr.strip().splitlines()
    assert line.startswith(
        "npu-rl: error: base image localhost/npu-rl-no-such-base:0 is not here and cannot be pulled"
    ) and line.endswith("or --stand-in to build on a stand-in made here"), line
    # docker/Dockerfile built without the chip (as `docker build` without the pins would): its own check
    # names the argument, and the build's error is that one line.
    from npu_rl.envs import pipconf
    from npu_rl.errors import UserError
    from npu_rl.image.api import build_image, serve_files
    from npu_rl.image.build import CERT_NAME
    from npu_rl.image.spec import build_args

    args = {k: v for k, v in build_args("a2").items() if k != "CHIP"} | {
        "BASE_IMAGE": built["a2"].base,
        "WITH_MINDSPEED": "0",
    }
    cert = pipconf.cert_file()
    # Served as `npu-rl image build` serves it, so that the layers before the chip are the ones built already.
    with engine() as eng, serve_files({CERT_NAME: cert} if cert else {}) as url, pytest.raises(UserError) as err:
        if cert:
            args["PIP_CERT_URL"] = f"{url}{CERT_NAME}"
        build_image(
            eng.client,
            context=REPO,
            dockerfile="docker/Dockerfile",
            tag=f"npu-rl-test-nochip:{os.getpid()}",
            buildargs=args,
            target="runtime",
            network_mode="host",
        )
    assert "missing build arg CHIP" in str(err.value) and "\n" not in str(err.value), err.value
    assert err.value.exit_code == 2
