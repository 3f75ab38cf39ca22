"""Each verl patch names the verl releases it supports and, for each, the source it relies on there."""

from __future__ import annotations

import importlib

import pytest

from npu_rl import patches
from npu_rl.patches import guard


@pytest.mark.parametrize("name,module", [(n, importlib.import_module(m)) for n, m in patches.PATCHES.items()])
def test_patched_verl_sources_unchanged(name, module):
    fingerprints = module.PATCH.fingerprints
    assert fingerprints, f"patch {name} must list the verl functions it replaces (FINGERPRINTS)"
    assert guard.changed_fingerprints(fingerprints) == {}, (
        f"verl code patched by {name!r} changed; re-check the patch against the new source"
    )


def test_fingerprint_detects_a_change(tmp_path):
    target = "verl.utils.device:get_nccl_backend"
    original = guard.module_file("verl.utils.device")
    copy = tmp_path / "device.py"
    copy.write_text(original.read_text())
    fp = {target: guard.fingerprint(target)}
    assert guard.changed_fingerprints(fp, {"verl.utils.device": copy}) == {}
    copy.write_text(original.read_text().replace('return "hccl"', 'return "hccl2"'))
    assert list(guard.changed_fingerprints(fp, {"verl.utils.device": copy})) == [target]
    with pytest.raises(guard.PatchVersionError, match="get_nccl_backend changed"):
        guard.require_unchanged("cpu", fp, {"verl.utils.device": copy})
    assert guard.changed_fingerprints({"verl.utils.device:no_such_fn": "x"}) == {
        "verl.utils.device:no_such_fn": ("x", "missing")
    }


def test_version_guard_names_both_versions(monkeypatch):
    import verl

    from npu_rl.patches import cpu_platform

    cpu_platform.PATCH.require_version()  # the installed verl is one the patch supports
    monkeypatch.setattr(verl, "__version__", "0.7.0")
    with pytest.raises(guard.PatchVersionError, match=r"'cpu' supports verl 0\.6\.1 but verl 0\.7\.0"):
        cpu_platform.PATCH.require_version()
    with pytest.raises(guard.PatchVersionError, match=r"supports verl 0\.6\.1 but verl 0\.7\.0"):
        assert cpu_platform.PATCH.fingerprints  # the fingerprints of a release the patch does not know


def test_every_patch_supports_the_default_lines_verl():
    from npu_rl import versions

    pin = str(versions.get("verl.version"))
    assert guard.unsupported(patches.PATCHES, pin) == []
    assert guard.unsupported(["cpu", "attest"], "9.9.9") == ["cpu", "attest"]


def test_unknown_patch_name_is_refused():
    with pytest.raises(ValueError, match="unknown npu-rl patch 'nope'"):
        patches.install(["nope"])


def test_post_import_hook_runs_after_import(tmp_path, monkeypatch):
    from npu_rl.patches.hooks import when_imported

    (tmp_path / "npu_rl_hook_probe.py").write_text("VALUE = 1\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    seen = []
    when_imported("npu_rl_hook_probe", lambda m: seen.append(m.VALUE))
    assert seen == []
    import npu_rl_hook_probe  # noqa: F401

    assert seen == [1]
    when_imported("npu_rl_hook_probe", lambda m: seen.append(2))  # already imported: runs at once
    assert seen == [1, 2]
