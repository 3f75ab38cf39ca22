"""Each verl patch names the verl releases it supports and, for each, the source it relies on there."""

from __future__ import annotations

import importlib

import pytest

from npu_rl import patches
from npu_rl.patches import guard

# Patches of what only verl 0.9's lines run: the SFT trainer (npu-rl runs SFT recipes there only).
ONLY_ON_0_9 = {"sft_resume"}


@pytest.mark.parametrize(
    "name,module", [(n, importlib.import_module(m)) for n, m in patches.PATCHES.items() if n not in ONLY_ON_0_9]
)
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
    with pytest.raises(guard.PatchVersionError, match=r"'cpu' supports verl 0\.6\.1, 0\.9\.0 but verl 0\.7\.0"):
        cpu_platform.PATCH.require_version()
    with pytest.raises(guard.PatchVersionError, match=r"supports verl 0\.6\.1, 0\.9\.0 but verl 0\.7\.0"):
        assert cpu_platform.PATCH.fingerprints  # the fingerprints of a release the patch does not know


def test_a_hook_for_another_release_changes_nothing(monkeypatch):
    # One patch, two releases' code: each hook runs only under the release it was written for.
    import types

    patch = guard.Patch("two_releases", {guard.VERL_0_6_1: {}, guard.VERL_0_9_0: {}})
    seen = []

    @patch.applies_to("some.module", releases=(guard.VERL_0_6_1,))
    def old(mod):
        seen.append("0.6.1")

    @patch.applies_to("some.module", releases=(guard.VERL_0_9_0,))
    def new(mod):
        seen.append("0.9.0")

    @patch.applies_to("some.module")
    def both(mod):
        seen.append("both")

    for release, expected in (("0.6.1", ["0.6.1", "both"]), ("0.9.0", ["0.9.0", "both"])):
        monkeypatch.setattr(guard, "installed_verl_version", lambda release=release: release)
        seen.clear()
        module = types.ModuleType("some.module")
        for fn in (old, new, both):
            fn(module, check=False)
        assert seen == expected, release


PORTED_TO_0_9 = [n for n, m in patches.PATCHES.items() if guard.VERL_0_9_0 in importlib.import_module(m).PATCH.supports]


@pytest.mark.parametrize("name", PORTED_TO_0_9)
def test_a_patch_ported_to_verl_0_9_matches_its_source(name):
    # The fingerprints of the line's verl are checked where that verl is installed: its CPU environment.
    import subprocess

    from needs import missing_setup

    from npu_rl.paths import project_root

    python = project_root() / ".venv-cann9.1-verl0.9" / "bin" / "python"
    if not python.is_file():
        missing_setup("the cann9.1-verl0.9 CPU environment", "make venv STACK=cann9.1-verl0.9")
    code = (
        "import importlib, json; from npu_rl.patches import guard, PATCHES; "
        f"p = importlib.import_module(PATCHES[{name!r}]).PATCH; "
        "print(json.dumps([guard.installed_verl_version(), guard.changed_fingerprints(p.fingerprints)]))"
    )
    out = subprocess.run([str(python), "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    import json

    release, changed = json.loads(out.stdout.strip().splitlines()[-1])
    assert release == "0.9.0" and changed == {}


def test_every_patch_supports_the_default_lines_verl():
    from npu_rl import versions

    pin = str(versions.get("verl.version"))
    assert guard.unsupported(patches.PATCHES, pin) == sorted(ONLY_ON_0_9)
    assert guard.unsupported(ONLY_ON_0_9, guard.VERL_0_9_0) == []  # and test_a_patch_ported_to_verl_0_9_...
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
