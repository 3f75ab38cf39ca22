import json
import socket

import pytest

from npu_rl.cli import main
from npu_rl.errors import UserError
from npu_rl.launcher.preflight import preflight, run_checks
from npu_rl.recipe import load_recipe

A2_1CARD = "qwen2_5_1_5b_math_a2_1card"
A2_4CARD = "qwen2_5_1_5b_math_a2_4card"


@pytest.fixture
def ready_workspace(workspace):
    """Model weights and data files where the recipes expect them."""
    for recipe in (A2_1CARD, "tiny_math_cpu"):
        r = load_recipe(recipe)
        model = workspace / r.model.path
        model.mkdir(parents=True)
        (model / "config.json").write_text("{}")
        (model / "model.safetensors").write_bytes(b"\0" * 4096)
        for f in r.data.train_files + r.data.val_files:
            (workspace / f).parent.mkdir(parents=True, exist_ok=True)
            (workspace / f).write_bytes(b"PAR1")
    return workspace


@pytest.fixture
def npu_image(fake_dist):
    fake_dist("torch_npu", "2.5.1.post1")


def _by_name(results):
    return {r.name: r for r in results}


def test_ready_a2_host_passes_every_train_check(fake_host, ready_workspace, npu_image):
    host = fake_host(devices=8, smi="a2").host()
    results = run_checks(load_recipe(A2_1CARD), "train", host=host)
    assert {r.name for r in results} == {
        "verl",
        "torch_npu",
        "CANN",
        "driver",
        "devices",
        "HBM",
        "shm",
        "model",
        "rollout model",
        "rollout graphs",
        "data",
        "disk",
        "ports",
    }
    assert [r for r in results if r.status != "ok"] == []
    assert "using 0" in _by_name(results)["devices"].detail
    preflight(load_recipe(A2_1CARD), for_job="train", host=host)


def test_cann_mismatch_fails_with_a_one_line_fix(fake_host, ready_workspace, npu_image):
    host = fake_host(cann="8.1.RC1").host()
    with pytest.raises(UserError) as err:
        preflight(load_recipe(A2_1CARD), for_job="train", host=host)
    message = str(err.value)
    assert message.startswith("CANN: 8.1.RC1, pin is 8.2.RC1")
    assert "npu-rl image build --variant a2" in message and "\n" not in message


def test_an_image_on_the_stand_in_base_says_it_can_only_rehearse(fake_host, ready_workspace, npu_image, monkeypatch):
    from npu_rl.platform import cann

    host = fake_host(cann=None).host()
    real = _by_name(run_checks(load_recipe(A2_1CARD), "train", host=host))
    assert real["torch_npu"].status == "ok" and "npu-rl image build --variant a2" in real["CANN"].fix
    monkeypatch.setenv(cann.STAND_IN_MARKER, "stand-in base: no CANN")
    results = _by_name(run_checks(load_recipe(A2_1CARD), "train", host=host))
    assert results["torch_npu"].status == "fail" and "hidden" in results["torch_npu"].detail
    assert results["CANN"].detail.endswith(": stand-in base: no CANN")
    with pytest.raises(UserError) as err:
        preflight(load_recipe(A2_1CARD), for_job="train", host=host)
    assert "npu-rl train --rehearse" in str(err.value) and "\n" not in str(err.value)


def test_missing_driver_and_control_nodes_are_reported(fake_host, ready_workspace, npu_image):
    fh = fake_host(driver=None)
    (fh.dev / "hisi_hdc").unlink()
    results = _by_name(run_checks(load_recipe(A2_1CARD), "train", host=fh.host()))
    assert results["driver"].status == "fail" and "/usr/local/Ascend/driver" in results["driver"].fix
    assert results["devices"].status == "fail" and "--device /dev/hisi_hdc" in results["devices"].fix


def test_too_few_devices_for_the_recipe(fake_host, ready_workspace, npu_image):
    host = fake_host(devices=2).host()
    results = _by_name(run_checks(load_recipe(A2_4CARD), "train", host=host))
    assert results["devices"].status == "fail"
    assert "needs 4 NPU(s) but only 2" in results["devices"].fix
    # Eval runs on one device, so the same host is fine for it.
    assert _by_name(run_checks(load_recipe(A2_4CARD), "eval", host=host))["devices"].status == "ok"


def test_busy_npu_fails_the_hbm_check(fake_host, ready_workspace, npu_image):
    fh = fake_host(devices=8, smi="a2")
    fh.device_spec = "2"  # NPU 2 is running another job in the capture
    results = _by_name(run_checks(load_recipe(A2_1CARD), "train", host=fh.host()))
    assert results["HBM"].status == "fail"
    assert results["HBM"].detail == f"NPU 2: {65536 - 61850} MB free of 65536 MB"
    assert "gpu_memory_utilization=0.8" in results["HBM"].fix
    # A lower utilization fits into what is left.
    low = load_recipe(A2_1CARD, {"rollout.gpu_memory_utilization": 0.05})
    assert _by_name(run_checks(low, "train", host=fh.host()))["HBM"].status == "ok"


def test_a3_node_sixteen_devices(fake_host, ready_workspace, npu_image):
    host = fake_host(devices=16, smi="a3").host()
    recipe = load_recipe(A2_1CARD, {"resources.devices_per_node": 16, "resources.platform": "npu-a3"})
    results = _by_name(run_checks(recipe, "train", host=host))
    assert results["devices"].status == "ok" and results["devices"].detail.startswith("16 found")
    assert results["HBM"].status == "ok" and results["HBM"].detail.count("GiB") == 16


def test_without_npu_smi_hbm_is_a_warning(fake_host, ready_workspace, npu_image):
    host = fake_host(smi=None).host()
    warnings = []
    preflight(load_recipe(A2_1CARD), for_job="train", host=host, warn=warnings.append)
    assert warnings == ["HBM: npu-smi not available; HBM not checked"]


def test_small_shm_and_full_disk(fake_host, ready_workspace, npu_image):
    host = fake_host(shm_bytes=64 * 1024**2, free_bytes=100 * 1024**2).host()
    results = _by_name(run_checks(load_recipe(A2_1CARD), "train", host=host))
    assert results["shm"].status == "fail" and "--shm-size" in results["shm"].fix
    assert results["disk"].status == "fail" and "checkpoint.dir" in results["disk"].fix


def test_busy_port_fails(fake_host, ready_workspace, npu_image):
    with socket.socket() as s:
        s.bind(("0.0.0.0", 0))
        s.listen()
        port = s.getsockname()[1]
        results = _by_name(run_checks(load_recipe(A2_1CARD), "train", host=fake_host().host(), ports=[port]))
    assert results["ports"].status == "fail" and results["ports"].detail == f"port {port} in use"


def test_small_shm_only_warns_on_cpu(fake_host, ready_workspace):
    warnings = []
    host = fake_host(shm_bytes=64 * 1024**2).host()
    preflight(load_recipe("tiny_math_cpu"), for_job="train", host=host, warn=warnings.append)
    assert warnings == ["shm: /fake/dev/shm is 64 MiB, Ray wants 256 MiB"]


def test_cpu_recipe_checks_only_what_applies(fake_host, ready_workspace):
    # A bare host: no CANN, driver, devices or npu-smi, none of which a CPU run needs.
    fh = fake_host(devices=0, cann=None, driver=None, smi=None)
    results = run_checks(load_recipe("tiny_math_cpu"), "train", host=fh.host())
    assert [r.name for r in results] == ["verl", "rollout", "shm", "model", "rollout model", "data", "disk", "ports"]
    assert all(r.status == "ok" for r in results), results


@pytest.mark.parametrize(
    "have, ok",
    [("0.9.1", False), ("0.9.1+cpu", True)],  # vLLM's own build (the Ascend base image's); the cpu-vllm image's
)
def test_the_vllm_rollout_on_cpu_needs_vllms_cpu_build(fake_host, ready_workspace, fake_dist, have, ok):
    recipe = load_recipe("tiny_math_cpu", {"rollout.name": "vllm"})
    host = fake_host(devices=0, cann=None, driver=None, smi=None).host()
    fake_dist("vllm", have)
    if ok:
        assert _by_name(run_checks(recipe, "train", host=host))["rollout"].detail == f"vllm {have}"
        return
    with pytest.raises(UserError, match=r"^rollout: rollout.name vllm on platform cpu needs vLLM's CPU build .*"
                       rf"this environment has vllm {have}; fix: run in the cpu-vllm image"):  # fmt: skip
        preflight(recipe, for_job="train", host=host)


def test_verl_version_against_the_pin(fake_host, ready_workspace, fake_dist):
    fake_dist("verl", "0.5.0")
    said = r"^verl: 0.5.0 is installed \(no stack line's\), but recipe tiny_math_cpu runs on stack line "
    with pytest.raises(UserError, match=said + r"cann8.2-verl0.6 \(verl 0.6.1\); fix: run it in the cann8.2-verl0.6 "):
        preflight(load_recipe("tiny_math_cpu"), for_job="train", host=fake_host().host())


def test_missing_data_and_model(fake_host, workspace):
    results = _by_name(run_checks(load_recipe("tiny_math_cpu"), "train", host=fake_host().host()))
    assert results["model"].status == "fail" and "npu-rl model" in results["model"].fix
    assert results["data"].status == "fail" and "npu-rl prepare" in results["data"].fix


def test_merge_needs_a_checkpoint(fake_host, ready_workspace, complete_checkpoint):
    recipe = load_recipe("tiny_math_cpu")
    with pytest.raises(UserError, match="^checkpoints: none under"):
        preflight(recipe, for_job="merge", host=fake_host().host())
    step = ready_workspace / recipe.checkpoint.dir / recipe.logging.project / recipe.logging.experiment
    (step / "global_step_5" / "actor").mkdir(parents=True)  # an unfinished save is no checkpoint
    with pytest.raises(UserError, match="^checkpoints: none under"):
        preflight(recipe, for_job="merge", host=fake_host().host())
    complete_checkpoint(step / "global_step_5", world=recipe.resources.world_size)
    preflight(recipe, for_job="merge", host=fake_host().host())


def test_unknown_job():
    with pytest.raises(ValueError, match="unknown job"):
        run_checks(load_recipe("tiny_math_cpu"), "serve")


def test_doctor_command_prints_table_and_fixes(workspace, capsys):
    rc = main(["doctor", "--recipe", "tiny_math_cpu"])
    out = capsys.readouterr().out
    assert rc == 1
    assert "npu-rl doctor: tiny_math_cpu" in out
    fix_lines = [line for line in out.splitlines() if line.startswith("fix ")]
    assert [line.split(":")[0] for line in fix_lines] == ["fix model", "fix data"]


@pytest.mark.parametrize("heads, ok", [(4, False), (2, True)])  # head size 16 (the hf demo's model), 32
def test_the_vllm_rollout_on_cpu_needs_a_head_size_vllm_takes(fake_host, ready_workspace, fake_dist, heads, ok):
    recipe = load_recipe("tiny_math_cpu", {"rollout.name": "vllm"})
    config = ready_workspace / recipe.model.path / "config.json"
    config.write_text(json.dumps({"hidden_size": 64, "num_attention_heads": heads}))
    fake_dist("vllm", "0.9.1+cpu")
    host = fake_host(devices=0, cann=None, driver=None, smi=None).host()
    result = _by_name(run_checks(recipe, "train", host=host))["rollout model"]
    assert result.status == ("ok" if ok else "fail"), result
    if not ok:
        assert "head size 16" in result.detail and "--heads 2 --kv-heads 2" in result.fix
    # The hf rollout takes any head size.
    assert _by_name(run_checks(load_recipe("tiny_math_cpu"), "train", host=host))["rollout model"].status == "ok"
