import pytest

from npu_rl.cli import main
from npu_rl.errors import UserError
from npu_rl.image import api as image_api
from npu_rl.image import build as image_build
from npu_rl.image.progress import Display, Event, parse_chunk
from npu_rl.image.spec import build_args, spec


def test_parse_docker_and_podman_step_lines():
    assert parse_chunk({"stream": "Step 2/7 : RUN pip install x\n"}) == [Event("step", "RUN pip install x", 2, 7)]
    assert parse_chunk({"stream": "STEP 3/4: COPY a /a\n--> 4d77\n"}) == [
        Event("step", "COPY a /a", 3, 4),
        Event("output", "--> 4d77"),
    ]
    assert parse_chunk({"stream": "\n"}) == []


def test_parse_errors_and_pull_status():
    err = parse_chunk({"errorDetail": {"message": "COPY failed:\n no such file"}, "error": "x"})
    assert err == [Event("error", "COPY failed: no such file")]
    status = parse_chunk({"status": "Downloading", "id": "abc123", "progressDetail": {"current": 5, "total": 10}})
    assert status == [Event("status", "abc123: Downloading", current=5, total=10)]


def test_display_tracks_steps_and_keeps_a_tail():
    import io

    from rich.console import Console

    console = Console(file=io.StringIO(), force_terminal=False, record=True, width=120)
    with Display("t", console=console, tail_lines=2) as d:
        for chunk in (
            {"stream": "Step 1/2 : FROM scratch\n"},
            {"stream": "a [b]\nc\n"},
            {"stream": "Step 2/2 : COPY x /x\n"},
            {"stream": "d\n"},
        ):
            d.feed(parse_chunk(chunk))
        d.finish()
        assert d.step == (2, 2, "COPY x /x")
        assert list(d.tail) == ["c", "d"]
    # What the user sees: each step once, in order; output lines only in the live line (not verbose).
    shown = console.export_text()
    assert shown.index("step 1/2 FROM scratch") < shown.index("step 2/2 COPY x /x")
    assert "a [b]" not in shown


def test_variants_tags_and_targets():
    assert spec("a2").tag.endswith("-a2") and spec("a2").target == "runtime"
    assert spec("a3", "eval").tag.endswith("-a3-eval")
    assert spec("cpu").dockerfile == "docker/Dockerfile.cpu" and spec("cpu").target is None
    with pytest.raises(ValueError):
        spec("a5")
    with pytest.raises(ValueError):
        spec("cpu", "eval")
    # The chip build arg follows the variant; A2 and A3 differ only there.
    a2, a3 = build_args("a2"), build_args("a3")
    assert (a2["CHIP"], a3["CHIP"]) == ("a2", "a3")
    assert {k: v for k, v in a2.items() if k != "CHIP"} == {k: v for k, v in a3.items() if k != "CHIP"}


def test_no_daemon_is_one_line_error(tmp_path, capsys):
    rc = main(["image", "build", "--variant", "cpu", "--host", f"unix://{tmp_path}/absent.sock"])
    err = capsys.readouterr().err
    assert rc == 2
    assert err.startswith(f"npu-rl: error: no Docker daemon reachable at unix://{tmp_path}/absent.sock")
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err


def _context(tmp_path, dockerfile: str):
    ctx = tmp_path / "ctx"
    (ctx / "docker").mkdir(parents=True)
    (ctx / "hello.txt").write_text("hi\n")
    (ctx / "docker" / "Dockerfile").write_text(dockerfile)
    return ctx


def test_build_through_the_docker_api(podman_api, tmp_path):
    """A Dockerfile without RUN steps, built by podman's Docker-compatible API through npu_rl.image."""
    ctx = _context(
        tmp_path,
        "FROM scratch\nARG VERL_COMMIT\nARG CHIP\n"
        'LABEL io.npu-rl.verl.commit="${VERL_COMMIT}" io.npu-rl.chip="${CHIP}"\n'
        "COPY hello.txt /hello.txt\n",
    )
    client = image_build.connect(podman_api)
    args = {k: v for k, v in build_args("a3").items() if k in ("VERL_COMMIT", "CHIP")}
    image_id = image_api.build_image(
        client, context=ctx, dockerfile="docker/Dockerfile", tag="npu-rl-test:sdk", buildargs=args
    )
    try:
        image = client.images.get("npu-rl-test:sdk")
        assert image.id == image_id or image.id.endswith(image_id.split(":")[-1])
        assert image.labels["io.npu-rl.verl.commit"] == args["VERL_COMMIT"]
        assert image.labels["io.npu-rl.chip"] == "a3"
    finally:
        client.images.remove("npu-rl-test:sdk", force=True)


def test_failed_build_is_a_user_error_naming_the_step(podman_api, tmp_path):
    ctx = _context(tmp_path, "FROM scratch\nCOPY missing.txt /x\n")
    client = image_build.connect(podman_api)
    with pytest.raises(UserError) as err:
        image_api.build_image(client, context=ctx, dockerfile="docker/Dockerfile", tag="npu-rl-test:bad", buildargs={})
    message = str(err.value)
    assert message.startswith("building npu-rl-test:bad failed at step 2/2 (COPY missing.txt /x):")
    assert "missing.txt" in message.split(":", 2)[2] and "\n" not in message


def test_missing_dockerfile_is_a_user_error(podman_api, tmp_path):
    client = image_build.connect(podman_api)
    with pytest.raises(UserError, match="no docker/Dockerfile under"):
        image_api.build_image(client, context=tmp_path, dockerfile="docker/Dockerfile", tag="x:y", buildargs={})
