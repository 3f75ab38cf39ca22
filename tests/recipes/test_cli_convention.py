"""One CLI convention: every job that reads a recipe takes --recipe and --set, one flag name per
meaning (old spellings still parse), shared defaults, and a missing package is one error line."""

from __future__ import annotations

import argparse

import pytest

from npu_rl import cli, defaults
from npu_rl.cli import build_parser, main


def _leaves(parser: argparse.ArgumentParser, path=()):
    subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    if not subs:
        yield path, parser
        return
    for name, child in subs[0].choices.items():
        yield from _leaves(child, (*path, name))


def test_every_job_that_reads_a_recipe_also_takes_set():
    reading = {
        path: p for path, p in _leaves(build_parser()) if any("--recipe" in a.option_strings for a in p._actions)
    }
    assert ("render", "k8s") in reading and ("ray", "head") in reading and len(reading) >= 14
    lacking = [
        " ".join(path) for path, p in reading.items() if not any("--set" in a.option_strings for a in p._actions)
    ]
    assert lacking == []


def test_render_k8s_applies_set_overrides(tmp_path, capsys):
    argv = ["render", "k8s", "--recipe", "qwen2_5_1_5b_math_a2_4card", "--out", str(tmp_path)]
    assert main([*argv, "--set", "logging.experiment=from-set"]) == 0
    (written,) = tmp_path.glob("*.yaml")
    assert "from-set" in written.read_text()


def test_one_flag_name_per_meaning_old_spellings_still_parse():
    parse = build_parser().parse_args
    for role in ("head", "worker", "wait"):
        assert parse(["ray", role, "--ray-port", "7000"]).ray_port == 7000
        assert parse(["ray", role, "--port", "7000"]).ray_port == 7000  # as rendered k8s jobs spell it
    assert parse(["train", "--recipe", "r", "--ray-port", "7000"]).ray_port == 7000
    assert (
        parse(["ray", "wait", "--timeout", "5"]).wait_timeout
        == parse(["ray", "wait", "--wait-timeout", "5"]).wait_timeout
        == 5
    )
    doctor = parse(["doctor", "--recipe", "r", "--free-port", "1", "--port", "2"])
    assert doctor.free_ports == [1, 2] and not hasattr(doctor, "ray_port")


def test_defaults_come_from_one_module():
    from npu_rl.cluster.supervisor import HeadOptions, WorkerOptions
    from npu_rl.render.k8s import K8sOptions

    parse = build_parser().parse_args
    head, worker = parse(["ray", "head"]), parse(["ray", "worker"])
    assert (
        head.wait_timeout == HeadOptions(1, 1).wait_timeout == K8sOptions().wait_timeout_s == defaults.NODES_TIMEOUT_S
    )
    assert worker.join_timeout == defaults.NODES_TIMEOUT_S
    assert HeadOptions(1, 1).port == defaults.RAY_PORT
    assert WorkerOptions(None, 1).max_backoff == worker.max_backoff
    k8s = parse(["render", "k8s", "--recipe", "r", "--out", "o"])
    assert (k8s.queue, k8s.pvc, k8s.shm_size, k8s.max_retry, k8s.target) == (
        K8sOptions().queue,
        K8sOptions().pvc,
        K8sOptions().shm_size,
        K8sOptions().max_retry,
        defaults.K8S_TARGET,
    )


def test_a_job_whose_package_is_missing_says_what_to_install(tmp_path, monkeypatch, capsys):
    (tmp_path / "needs_pkg.py").write_text("import npu_rl_no_such_package  # noqa: F401\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(cli, "COMMAND_MODULES", [*cli.COMMAND_MODULES, "needs_pkg"])
    assert main(["needs_pkg", "--any", "thing"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [
        "npu-rl: error: `npu-rl needs_pkg` needs the Python package npu_rl_no_such_package, which is not "
        "installed (pip install npu_rl_no_such_package)"
    ]
    assert main(["recipe", "validate", "--recipe", "tiny_math_cpu"]) == 0  # the other jobs are all there


def test_a_package_missing_when_the_job_runs_is_one_line_naming_its_extra(monkeypatch, capsys):
    import npu_rl.image.build as build

    def no_docker(*args, **kwargs):
        raise ModuleNotFoundError("No module named 'docker'", name="docker")

    monkeypatch.setattr(build, "build_variant", no_docker)
    assert main(["image", "build", "--variant", "cpu"]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.startswith("npu-rl: error: `npu-rl image` needs the Python package docker, which is not installed")
    assert "pip install" in line


def test_a_missing_npu_rl_module_is_a_bug_not_a_missing_package(monkeypatch):
    monkeypatch.setattr(cli, "COMMAND_MODULES", [*cli.COMMAND_MODULES, "npu_rl.commands.no_such_job"])
    with pytest.raises(ModuleNotFoundError):
        build_parser()


def test_a_reader_that_goes_away_ends_the_job_quietly():
    # `npu-rl train --dry-run | head -1` once head has exited: the launch's lines meet a closed pipe.
    import subprocess
    import sys

    from npu_rl.exit_codes import Exit

    proc = subprocess.Popen(
        [sys.executable, "-m", "npu_rl", "train", "--recipe", "tiny_math_cpu", "--dry-run"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        bufsize=0,
    )
    proc.stdout.close()  # the reader is gone before the job writes (its imports take a second)
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=120) == Exit.PIPE_CLOSED, err
    assert "Traceback" not in err and "BrokenPipe" not in err, err
