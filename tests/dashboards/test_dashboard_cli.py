"""`npu-rl dashboard` refuses what it cannot serve in one line, before starting anything."""

from __future__ import annotations

from npu_rl.cli import main


def _one_error_line(capsys) -> str:
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    return err


def test_missing_run_directory(tmp_path, capsys):
    assert main(["dashboard", "--run", str(tmp_path / "nope")]) == 2
    assert _one_error_line(capsys).startswith(f"npu-rl: error: run directory not found: {tmp_path / 'nope'}")


def test_run_without_swanlab_logs_names_the_backend(tmp_path, capsys):
    (tmp_path / "tensorboard").mkdir()
    assert main(["dashboard", "--run", str(tmp_path), "--swanlab"]) == 2
    err = _one_error_line(capsys)
    assert f"no swanlab logs under {tmp_path}" in err and "logging.backends" in err


def test_neither_run_nor_recipe(capsys):
    assert main(["dashboard"]) == 2
    assert "give --run DIR, or --recipe R" in _one_error_line(capsys)


def test_bad_port(tmp_path, capsys):
    import pytest

    with pytest.raises(SystemExit) as stop:  # argparse's own usage error, as every job's
        main(["dashboard", "--run", str(tmp_path), "--tensorboard-port", "70000"])
    assert stop.value.code == 2
    assert "--tensorboard-port" in _one_error_line(capsys)


def test_busy_port_is_refused_before_anything_starts(tmp_path, capsys):
    import socket

    (tmp_path / "tensorboard").mkdir()
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        assert main(["dashboard", "--run", str(tmp_path), "--tensorboard", "--tensorboard-port", str(port)]) == 2
    assert f"port {port} on 127.0.0.1 is in use" in _one_error_line(capsys)
    assert not list(tmp_path.glob(".tensorboard.log")), "a server was started"


def test_without_a_kind_serves_only_what_the_run_logged(tmp_path):
    from npu_rl.dashboards import plan

    (tmp_path / "tensorboard").mkdir()
    assert [d.kind for d in plan(tmp_path, (), "127.0.0.1", {"tensorboard": 0, "swanlab": 0})] == ["tensorboard"]


def test_run_and_recipe_together(tmp_path, capsys):
    assert main(["dashboard", "--run", str(tmp_path), "--recipe", "tiny_math_cpu"]) == 2
    assert "not both" in _one_error_line(capsys)
