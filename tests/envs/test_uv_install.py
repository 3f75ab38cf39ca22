"""`make venv` installs with uv and keeps pip's strictness: every package of the lock, by its hashes.

The uv that installs comes from the dev lock by pip with ``--require-hashes`` (npu_rl.envs.pipconf pinned);
the install itself runs the Makefile's own recipe against a lock with one hash altered, and must refuse it.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from npu_rl.envs import pipconf

REPO = Path(__file__).resolve().parents[2]
LOCKS = REPO / "configs" / "locks"


def test_pinned_is_the_locks_whole_entry():
    entry = pipconf.pinned(LOCKS / "dev.txt", "uv")
    lines = entry.splitlines()
    assert lines[0].startswith("uv==") and lines[0].endswith("\\")
    hashes = [ln.strip().removesuffix("\\").strip() for ln in lines[1:]]
    assert hashes and all(h.startswith("--hash=sha256:") for h in hashes)
    # Every hash the lock gives uv, none of the next package's.
    text = (LOCKS / "dev.txt").read_text()
    start = text.index(lines[0])
    block = text[start : text.index("\n", text.index(lines[-1], start))]
    assert block.count("--hash=") == len(hashes)


def test_pinned_refuses_a_lock_without_the_package(tmp_path):
    lock = tmp_path / "lock.txt"
    lock.write_text("six==1.16.0 \\\n    --hash=sha256:" + "0" * 64 + "\n")
    with pytest.raises(SystemExit, match="npu-rl: error: .* pins no uv"):
        pipconf.pinned(lock, "uv")


def test_uv_finds_the_cpu_torch_wheel_where_pip_would(tmp_path):
    lock = tmp_path / "cpu.txt"
    lock.write_text("# torch-index: https://download.example/whl/cpu\ntorch==2.13.0+cpu \\\n    --hash=sha256:00\n")
    (tmp_path / "wheels").mkdir()
    (tmp_path / "wheels" / "torch-2.13.0+cpu-cp311-cp311-linux_x86_64.whl").write_bytes(b"")
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(pipconf, "find_links_dirs", lambda: [tmp_path / "wheels"])
        assert pipconf.uv_torch_args(lock) == ["--find-links", str(tmp_path / "wheels")]
        mp.setattr(pipconf, "find_links_dirs", lambda: [])
        args = pipconf.uv_torch_args(lock)
        assert args[:2] == ["--extra-index-url", "https://download.example/whl/cpu"]
        # Not uv's first-index default: the torch index's own numpy or pillow would hide the lock's pins.
        assert args[2:] == ["--index-strategy", "unsafe-best-match"]


def test_the_makefiles_uv_install_refuses_a_tampered_hash(tmp_path):
    """The recipe `make venv` runs, on a copy of the dev lock whose first package's hashes are all wrong."""
    uv = REPO / ".venv" / "bin" / "uv"
    if not uv.is_file():
        pytest.skip("no .venv/bin/uv (make venv)")
    locks = tmp_path / "locks"
    locks.mkdir()
    dev = (LOCKS / "dev.txt").read_text().splitlines(keepends=True)
    first = next(i for i, ln in enumerate(dev) if "==" in ln and not ln.startswith("#"))
    tampered, i = dev[:first], first
    tampered.append(dev[i])
    i += 1
    while i < len(dev) and dev[i].strip().startswith("--hash=sha256:"):
        tampered.append(
            dev[i].split("sha256:")[0] + "sha256:" + "0" * 64 + (" \\\n" if dev[i].rstrip().endswith("\\") else "\n")
        )
        i += 1
    (locks / "cpu.txt").write_text("".join(tampered))
    target = tmp_path / "env"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(target)], check=True)
    # The Makefile's own variables, expanded by make: UV_LOCKED over the tampered lock into `target`.
    run = subprocess.run(
        ["make", "-s", "-f", str(REPO / "Makefile"), "-f", "-", "uv-probe", f"LOCKS={locks}"],
        input=f"uv-probe:\n\t@$(call UV_LOCKED,{target},{locks}/cpu.txt)\n",
        cwd=REPO, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert run.returncode != 0, run.stdout + run.stderr
    assert "hash mismatch" in (run.stdout + run.stderr).lower(), run.stdout + run.stderr
    site = next(target.glob("lib/python*/site-packages"), None)
    installed = [p.name for p in site.iterdir()] if site else []
    assert not [n for n in installed if n.endswith(".dist-info")], installed
    shutil.rmtree(target)
