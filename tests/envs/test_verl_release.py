"""verl comes from its PyPI release (the locks, hash-checked), not from a git checkout, and the release is
the code of the pinned commit.

How that is checked without GitHub: configs/versions.yaml's `verl.release_files_sha256` was computed from
the git tree at `verl.commit` (the sha256 of every file the release installs under verl/ and scripts/,
read with `git show <commit>:<path>`, as sorted "path sha256" lines). Here the same digest is computed
over the files of the installed release (.venv's, from the cpu lock; the npu lock pins the same release),
so a different release, or a pin moved to another commit without a new digest, fails.
"""

from __future__ import annotations

import hashlib
from importlib import metadata

from npu_rl import versions
from npu_rl.envs import locks


def release_digest(dist: metadata.Distribution) -> tuple[int, str]:
    files = sorted(
        str(f) for f in dist.files or () if str(f).split("/")[0] in ("verl", "scripts") and "__pycache__" not in str(f)
    )
    lines = "".join(f"{f} {hashlib.sha256(dist.locate_file(f).read_bytes()).hexdigest()}\n" for f in files)
    return len(files), hashlib.sha256(lines.encode()).hexdigest()


def test_the_installed_release_is_the_pinned_commits_code():
    dist = metadata.distribution("verl")
    assert dist.version == str(versions.get("verl.version"))
    count, digest = release_digest(dist)
    assert count == 344
    assert digest == versions.get("verl.release_files_sha256")


def test_the_release_carries_the_converter_the_prepare_job_runs():
    from npu_rl.launcher.megatron import verl_converter

    converter = verl_converter()
    assert converter.is_file() and converter.name == "converter_hf_to_mcore.py"
    assert converter.parent.name == "scripts"
    assert "scripts/converter_hf_to_mcore.py" in {str(f) for f in metadata.distribution("verl").files}


def test_every_lock_installs_the_same_release():
    pins = {
        name: {p.name: p.version for p in locks.read(locks.get(name))}.get("verl")
        for name in ("cpu", "npu", "npu-eval")
    }
    assert set(pins.values()) == {str(versions.get("verl.version"))}, pins
