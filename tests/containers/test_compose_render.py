import json
import re
import subprocess
from pathlib import Path

import pytest
import yaml

from npu_rl import versions
from npu_rl.cli import build_parser
from npu_rl.platform.devices import CONTROL_DEVICES, HOST_MOUNTS
from npu_rl.platform.doctor import MIN_SHM
from npu_rl.recipe import load_recipe
from npu_rl.render.committed import render_all
from npu_rl.render.compose import LINE_TRAIN_RECIPES, TRAIN_RECIPE, render_compose

REPO = Path(__file__).resolve().parents[2]
COMPOSE = REPO / "compose" / "docker-compose.yml"
FILES = [COMPOSE, *(COMPOSE.parent / f"docker-compose.{line}.yml" for line in LINE_TRAIN_RECIPES)]
DASHBOARDS = {"tensorboard", "swanlab"}
NPU_SERVICES = {"train-qwen", "eval", "notebook"}


@pytest.fixture(scope="module")
def compose() -> dict:
    return yaml.safe_load(COMPOSE.read_text())


def _defaults(text: str) -> str:
    """The compose file as docker compose reads it with no .env: ${X:-d} -> d, $$ -> $."""
    return re.sub(r"\$\{(\w+):-([^}]*)\}", r"\2", text).replace("$$", "$")


def test_committed_files_match_a_fresh_render(tmp_path):
    written = render_compose(tmp_path)
    lines = sorted(f"docker-compose.{line}.yml" for line in LINE_TRAIN_RECIPES)
    assert sorted(p.name for p in written) == sorted([".env.example", "docker-compose.yml", *lines])
    for path in written:
        committed = REPO / "compose" / path.name
        assert committed.read_text() == path.read_text(), f"{committed} is stale: run `npu-rl render compose`"


def test_render_all_includes_compose(tmp_path):
    written = render_all(tmp_path)
    assert tmp_path / "compose" / "docker-compose.yml" in written


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
def test_validates_against_the_compose_spec(path, shared_dir):
    from jsonschema import Draft7Validator

    schema = json.loads((shared_dir / "schemas" / "compose" / "compose-spec.json").read_text())
    validator = Draft7Validator(schema)  # the spec is written against draft-07
    validator.validate(yaml.safe_load(path.read_text()))
    # Also after substituting the defaults (ports, shm sizes and devices as the engine sees them).
    validator.validate(yaml.safe_load(_defaults(path.read_text())))


def test_a_lines_file_is_the_same_training_services_in_that_lines_image():
    # docker-compose.<line>.yml: the line's recipe (the seeds' run on it), the line's image and build args;
    # eval and the CPU demos are the default line's (docker-compose.yml).
    seeds = yaml.safe_load(COMPOSE.read_text())
    for line, recipe in LINE_TRAIN_RECIPES.items():
        other = yaml.safe_load((COMPOSE.parent / f"docker-compose.{line}.yml").read_text())
        assert set(other["services"]) == set(seeds["services"]) - {
            "eval", "cpu-demo", "cpu-vllm-demo", "cpu-notebook", "sandbox"
        }  # fmt: skip
        args = other["x-npu-build"]["args"]
        assert args["STACK"] == line and args["NPU_LOCK"] == f"configs/locks/{line}/npu.txt"
        assert args["VERL_VERSION"] == versions.line_verl(line) and load_recipe(recipe).stack == line
        for name, service in other["services"].items():
            assert service["image"].endswith(f"-{line}-a2}}"), (name, service["image"])
            if name in ("train-qwen", "rehearse-qwen", "prepare"):
                assert recipe in service["command"], (name, service["command"])
            seed_service = {k: v for k, v in seeds["services"][name].items() if k not in ("image", "command", "build")}
            assert {k: v for k, v in service.items() if k not in ("image", "command", "build")} == seed_service, name


def test_docker_compose_config_accepts_it(require):
    exe = require("docker-compose")
    out = subprocess.run(
        [exe, "-f", str(COMPOSE), "config", "-q"], capture_output=True, text=True, timeout=120, cwd=COMPOSE.parent
    )
    assert out.returncode == 0, out.stderr
    resolved = subprocess.run(
        [exe, "-f", str(COMPOSE), "config"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=COMPOSE.parent,
        env={"PATH": "/usr/bin:/bin"},
    )
    services = yaml.safe_load(resolved.stdout)["services"]
    # Dashboards are reachable from this machine only, unless DASHBOARD_BIND says otherwise.
    for name in ("tensorboard", "swanlab", "notebook"):
        assert all(p.startswith("127.0.0.1:") for p in services[name]["ports"]), services[name]["ports"]


def test_services(compose):
    assert set(compose["services"]) == {
        "prepare",
        "train-qwen",
        "rehearse-qwen",
        "merge",
        "eval",
        "tensorboard",
        "swanlab",
        "notebook",
        "cpu-demo",
        "cpu-vllm-demo",
        "cpu-notebook",
        "sandbox",
    }
    assert compose["services"]["cpu-demo"]["profiles"] == ["cpu"]
    assert compose["services"]["cpu-vllm-demo"]["profiles"] == ["cpu-vllm"]
    assert "--rollout" in compose["services"]["cpu-vllm-demo"]["command"]
    assert compose["services"]["cpu-notebook"]["profiles"] == ["cpu"]
    # Both notebook services open the shipped notebooks from the checkout.
    for name in ("notebook", "cpu-notebook"):
        assert "../notebooks:/workspace/notebooks" in compose["services"][name]["volumes"], name


def test_no_service_is_privileged_and_npu_access_is_explicit(compose):
    for name, svc in compose["services"].items():
        assert not svc.get("privileged"), name
        # Only what the hang watchdog's py-spy needs to read the run's own processes, on the NPU services.
        assert svc.get("cap_add", []) == (["SYS_PTRACE"] if name in NPU_SERVICES else []), name
        assert svc.get("network_mode") != "host" and svc.get("pid") != "host", name
        devices = svc.get("devices", [])
        if name in NPU_SERVICES:
            assert devices == ["/dev/davinci${NPU_DEVICE:-0}:/dev/davinci${NPU_DEVICE:-0}"] + [
                f"/dev/{d}:/dev/{d}" for d in CONTROL_DEVICES
            ]
            for mount in HOST_MOUNTS:
                assert f"{mount}:{mount}:ro" in svc["volumes"], (name, mount)
        else:
            assert devices == [], name
        assert "/dev:/dev" not in svc.get("volumes", [])


def test_rehearse_qwen_is_train_qwen_with_rehearse_and_without_an_npu(compose):
    train, rehearse = compose["services"]["train-qwen"], compose["services"]["rehearse-qwen"]
    assert rehearse["profiles"] == ["rehearse"]
    assert sorted(rehearse["command"]) == sorted(train["command"] + ["--rehearse"])
    assert rehearse["command"][:4] == train["command"][:4]
    for key in ("image", "build", "depends_on", "shm_size", "init"):
        assert rehearse[key] == train[key], key
    assert rehearse["volumes"] == [v for v in train["volumes"] if v.endswith(":/workspace")]


def test_one_shot_jobs_do_not_restart(compose):
    for name, svc in compose["services"].items():
        assert svc["restart"] == ("unless-stopped" if name in (*DASHBOARDS, "sandbox") else "no"), name


def test_the_sandbox_service_holds_nothing_of_a_run(compose):
    """Policy-written code's service: no workspace or token volume, no NPU, no secret variable; only the
    runtime settings its jails need (docs/sandbox.md), and its port on 127.0.0.1 unless SANDBOX_BIND says."""
    svc = compose["services"]["sandbox"]
    assert svc["profiles"] == ["sandbox"] and "volumes" not in svc and "devices" not in svc
    assert svc["command"][:3] == ["npu-rl", "sandbox", "serve"] and "0.0.0.0" in svc["command"]
    assert set(svc["environment"]) == {"NPU_RL_SANDBOX_PYTHON"}
    assert svc["security_opt"] == ["systempaths=unconfined", "seccomp=unconfined"]
    assert svc["ports"] == ["${SANDBOX_BIND:-127.0.0.1}:${SANDBOX_PORT:-8080}:8080"]


def _size(text: str) -> int:
    m = re.fullmatch(r"(\d+)([kmg]?)b?", text.lower())
    return int(m.group(1)) * {"": 1, "k": 1024, "m": 1024**2, "g": 1024**3}[m.group(2)]


def test_shared_memory_satisfies_the_doctor(compose):
    services = yaml.safe_load(_defaults(COMPOSE.read_text()))["services"]
    assert _size(services["train-qwen"]["shm_size"]) >= MIN_SHM["npu"]
    assert _size(services["cpu-demo"]["shm_size"]) >= MIN_SHM["cpu"]


def test_data_survives_in_the_workspace_volume(compose):
    for name, svc in compose["services"].items():
        if name != "sandbox":  # it keeps nothing, and may see nothing of a run
            assert "${WORKSPACE_DIR:-../workspace}:/workspace" in svc["volumes"], name


def test_env_example_documents_every_variable():
    text = COMPOSE.read_text()
    used = set(re.findall(r"(?<!\$)\$\{(\w+)", text))
    used |= {
        k
        for svc in yaml.safe_load(text)["services"].values()
        for k, v in (svc.get("environment") or {}).items()
        if v is None
    }
    example = (REPO / "compose" / ".env.example").read_text()
    documented = set(re.findall(r"^#? ?(\w+)=", example, re.MULTILINE))
    assert used == documented
    # Each entry has a comment line above it.
    lines = example.splitlines()
    for i, line in enumerate(lines):
        if re.match(r"^#? ?\w+=", line):
            assert lines[i - 1].startswith("# ") and "=" not in lines[i - 1].split()[1], line


def test_npu_rl_commands_are_valid_cli_calls(compose):
    parser = build_parser()
    calls = [svc["command"] for svc in compose["services"].values() if svc.get("command", [""])[0] == "npu-rl"]
    assert len(calls) == 8  # prepare, train, its rehearsal, merge, eval, the two dashboards, the sandbox
    for cmd in calls:
        args = parser.parse_args([_interpolate(str(c), {}) for c in cmd[1:]])  # as compose fills in its defaults
        if args.command == "sandbox":
            assert callable(args.func)
        elif args.recipe:
            load_recipe(args.recipe)
        else:
            assert args.command == "dashboard" and args.run


def _interpolate(text: str, env: dict[str, str]) -> str:
    """docker compose's ${X:-default}: the value of X unless it is unset or empty."""
    return re.sub(r"\$\{(\w+):-([^}]*)\}", lambda m: env.get(m.group(1)) or m.group(2), text)


@pytest.mark.parametrize(
    "env",
    [{}, {"MATH_SOURCE": "/workspace/data/MATH-lighteval"}, {"MODEL_SOURCE": "/workspace/my-model", "MATH_SOURCE": ""}],
)
def test_prepare_service_maps_its_variables_to_npu_rl_prepare(compose, env, monkeypatch):
    """The prepare service's command, as compose interpolates it, reaches the prepare job with the
    sources the variables name; empty ones mean 'whatever the recipe says'."""
    import npu_rl.launcher.prepare as prepare_job

    calls = []
    monkeypatch.setattr(prepare_job, "prepare", lambda recipe, **kw: calls.append((recipe.name, kw)))
    cmd = [_interpolate(c, env) for c in compose["services"]["prepare"]["command"]]
    assert cmd[0] == "npu-rl"
    args = build_parser().parse_args(cmd[1:])
    assert args.command == "prepare"
    assert args.func(args) == 0
    recipe = load_recipe(TRAIN_RECIPE)
    assert calls == [
        (
            TRAIN_RECIPE,
            {
                "model_source": env.get("MODEL_SOURCE") or recipe.model.hub_id,
                "data_source": Path(env["MATH_SOURCE"]) if env.get("MATH_SOURCE") else None,
            },
        )
    ]


def test_train_service_runs_the_a2_single_card_recipe(compose):
    cmd = compose["services"]["train-qwen"]["command"]
    assert cmd[:4] == ["npu-rl", "train", "--recipe", TRAIN_RECIPE]
    recipe = load_recipe(TRAIN_RECIPE)
    assert recipe.resources.platform == "npu-a2" and recipe.resources.devices_per_node == 1
    assert compose["services"]["train-qwen"]["depends_on"]["prepare"]["condition"] == "service_completed_successfully"
    # The dashboards serve the run the train service writes, through `npu-rl dashboard` (the command
    # tests/dashboards runs on a real run): the recipe's log root under the workspace volume.
    from npu_rl import run_files

    monkeypatch = pytest.MonkeyPatch()
    monkeypatch.setenv("NPU_RL_WORKSPACE", "/workspace")
    try:
        expected = str(run_files.log_root(recipe))
    finally:
        monkeypatch.undo()
    for kind in ("tensorboard", "swanlab"):
        cmd = compose["services"][kind]["command"]
        assert cmd[:2] == ["npu-rl", "dashboard"] and f"--{kind}" in cmd and "--wait" in cmd, cmd
        assert cmd[cmd.index("--run") + 1] == expected
    assert compose["services"]["swanlab"]["environment"]["SWANLAB_MODE"] == "local"
