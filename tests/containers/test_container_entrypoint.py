import os
import subprocess
from pathlib import Path

import pytest

from npu_rl.platform.cann import SET_ENV_SCRIPTS

ENTRYPOINT = Path(__file__).resolve().parents[2] / "entrypoints" / "entrypoint.sh"


@pytest.fixture
def image_root(tmp_path, require):
    """A fake Ascend install whose set_env scripts record that they ran, and a fake npu-rl."""
    require("bash")
    ascend = tmp_path / "Ascend"
    for i, script in enumerate(SET_ENV_SCRIPTS):
        path = ascend / script
        path.parent.mkdir(parents=True)
        # nnal's real script parses "$@"; record what it was given.
        path.write_text(f'export LOADED_{i}=1\nexport ARGS_{i}="$*"\nfalse\n')
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake = bin_dir / "npu-rl"
    fake.write_text('#!/bin/bash\necho "npu-rl $*"\nenv | grep -E "^(LOADED|ARGS)_" | sort\n')
    fake.chmod(0o755)
    env = {"PATH": f"{bin_dir}:/usr/bin:/bin", "ASCEND_INSTALL_ROOT": str(ascend)}
    return env


def _run(env, *args):
    return subprocess.run([str(ENTRYPOINT), *args], env=env, capture_output=True, text=True, timeout=30)


def test_job_runs_through_npu_rl_with_the_cann_env(image_root):
    out = _run(image_root, "train", "--recipe", "r")
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0] == "npu-rl train --recipe r"
    loaded = [line for line in lines if line.startswith("LOADED_")]
    assert loaded == [f"LOADED_{i}=1" for i in range(len(SET_ENV_SCRIPTS))]
    # The sourced scripts do not see the job's arguments.
    assert [line for line in lines if line.startswith("ARGS_")] == [f"ARGS_{i}=" for i in range(len(SET_ENV_SCRIPTS))]


def test_programs_on_path_run_as_given(image_root):
    out = _run(image_root, "bash", "-c", 'echo "$LOADED_0 $0"')
    assert out.returncode == 0 and out.stdout.strip() == "1 bash"


def test_no_arguments_and_no_cann(image_root, tmp_path):
    env = {**image_root, "ASCEND_INSTALL_ROOT": str(tmp_path / "none")}
    out = _run(env)
    assert out.returncode == 0 and out.stdout.splitlines()[0] == "npu-rl "


def test_exit_status_is_the_jobs(image_root, tmp_path):
    failing = Path(image_root["PATH"].split(":")[0]) / "npu-rl"
    failing.write_text("#!/bin/bash\nexit 7\n")
    assert _run(image_root, "train").returncode == 7
    assert os.access(ENTRYPOINT, os.X_OK)
