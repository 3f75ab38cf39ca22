"""The terminal of `npu-rl train` (npu_rl.console): what a run's raw stream becomes on screen, in the three
modes, and where the raw stream is kept. The runs themselves: tests/smoke (a pseudo-terminal), the other runs
of tests/e2e and tests/containers (no TTY), tests/e2e/test_train_console.py (failures)."""

from __future__ import annotations

import io
import sys

import pytest

from npu_rl import run_files
from npu_rl.console import lines, noise
from npu_rl.console.progress import activity
from npu_rl.console.train import TrainConsole, choose_mode
from npu_rl.recipe import load_recipe

ESC = "\x1b"
# What a healthy CPU run prints, as the driver reads it (Ray's colour codes and actor prefixes included).
STREAM = [
    f"{ESC}[36m(pid=11){ESC}[0m /x/megatron/core/optimizer/__init__.py:18: UserWarning: Transformer Engine and "
    "Apex are not installed. Falling back to Torch optimizers.",
    "(pid=11)   warnings.warn(",
    "Failed to detect NPU type.",
    "Traceback (most recent call last):",
    "ModuleNotFoundError: No module named 'acl'",
    f"{ESC}[36m(TaskRunner pid=12){ESC}[0m Training Progress:   0%|          | 0/3 [00:00<?, ?it/s]",
    "(TaskRunner pid=12) step:0 - val-core/MATH/acc/mean@1:0.25 - val-aux/MATH/format/mean@1:0.5",
    "(WorkerDict pid=13) /x/dp_actor.py:109: UserWarning: In CPU autocast, but the target dtype is not supported.",
    "(TaskRunner pid=12) step:1 - training/rollout_probs_diff_mean:1.5e-07 - "
    "training/rollout_actor_probs_pearson_corr:0.9999 - critic/score/mean:0.25 - "
    "reward/acc:0.25 - reward/format:0.5 - reward/cot:0.0 - timing_s/step:2.0 - perf/throughput:1234.5",
    "(TaskRunner pid=12) local_global_step_folder: /ckpt/global_step_2",
    "(TaskRunner pid=12) /x/y.py:3: UserWarning: max_response_length truncates 40% of responses",
    "(TaskRunner pid=12) /x/y.py:3: UserWarning: max_response_length truncates 40% of responses "
    f"{ESC}[32m [repeated 2x across cluster]{ESC}[0m",
    "(TaskRunner pid=12) npu-rl: global_step_2 is complete; removed global_step_1 (max_actor_ckpt_to_keep 1)",
    "(TaskRunner pid=12) step:2 - critic/score/mean:nan - timing_s/step:2.0 - val-core/MATH/acc/mean@1:0.5",
]


class _Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_a_raw_line_is_read_without_colour_prefix_and_repeat_note():
    line = lines.read(f"{ESC}[36m(TaskRunner pid=7, ip=10.0.0.2){ESC}[0m text [repeated 3x across cluster]\n")
    assert line == lines.Line("TaskRunner", "text")
    assert lines.read("plain").source == "" and lines.read("a\rb\n").text == "b"


def test_step_lines_parse_to_numbers():
    step, metrics = lines.step_metrics("step:4 - a/b:1.5 - c:nan - d:3 - e:not-a-number")
    assert step == 4 and metrics["a/b"] == 1.5 and metrics["d"] == 3 and "e" not in metrics
    assert metrics["c"] != metrics["c"]  # nan
    assert lines.step_metrics("global_step_4 saved") is None
    assert lines.total_steps("Training Progress:  33%|███▎      | 1/3 [00:01<00:02]") == 3


def test_verl_0_9s_step_and_checkpoint_lines_are_read():
    # verl 0.9 prints numpy scalars by their repr and logs the checkpoint folder (trainer_base.py:892).
    step, metrics = lines.step_metrics(
        "(TaskRunnerV1 pid=9) step:8 - val-core/MATH/acc/mean@1:np.float64(0.53125) - actor/entropy:0.03"
    )
    assert step == 8 and metrics == {"val-core/MATH/acc/mean@1": 0.53125, "actor/entropy": 0.03}
    line = lines.read("(TaskRunnerV1 pid=9) INFO:2026-12-04 21:12:43,538:Saving checkpoint to /c/global_step_8")
    assert lines.checkpoint_folder(line.text) == "/c/global_step_8"


def test_a_torchrun_ranks_exception_is_the_runs_error_line():
    console = TrainConsole(mode="raw", total=None, start_step=0, out=io.StringIO())
    for raw in ["[rank0]: Traceback (most recent call last):", "[rank0]:   File x.py, line 3",
                "[rank0]: ValueError: sequence length 20000 exceeds max_length 16384"]:  # fmt: skip
        console.feed(raw)
    assert console.error_line() == "ValueError: sequence length 20000 exceeds max_length 16384"
    assert lines.read("[rank3]: x").source == "rank3"


def test_the_sft_trainers_lines_show_its_loss_and_the_checkpoint_it_saved():
    # verl 0.9's SFT trainer: tqdm's bar and the step line share a line, its checkpoint is printed after the
    # step's line (checkpoint_handler.py:92), and validation is a line of its own for the same step.
    out = io.StringIO()
    stream = [
        "Epoch 1/8:   6%|▋         | 1/16 [00:04<01:10,  4.67s/it]step:2 - train/loss:6.44 - train/lr:0.002",
        "Saving checkpoint to: /c/tiny_agent_sft_cpu/global_step_2",
        "Epoch 1/8:  12%|█▎        | 2/16 [00:06<00:45,  3.27s/it]step:3 - train/loss:6.15 - train/lr:0.0019",
        "step:3 - val/loss:6.01",
    ]
    with TrainConsole(mode="plain", total=3, start_step=0, out=out) as console:
        steps = [console.feed(raw) for raw in stream]
    assert steps == [2, None, 3, 3]
    said = out.getvalue().splitlines()
    assert "npu-rl: checkpoint global_step_2 saved: /c/tiny_agent_sft_cpu/global_step_2" in said
    assert any(line.startswith("npu-rl: step 2/3") and "loss 6.440" in line for line in said)
    assert "npu-rl: validation at step 3: held-out loss 6.0100" in said


@pytest.mark.parametrize("every,shown", [(0, [3]), (2, [3, 4, 6]), (None, [])])
def test_a_gate_line_only_on_the_steps_the_gate_checks(every, shown):
    # verl 0.9 logs the rollout/trainer gap every step; the gate checks the run's first step and every N
    # (npu_rl.patches.consistency Gate.due), and the console says "gate ... passed" only for those.
    out = io.StringIO()
    gate = {} if every is None else {"gate_max": 0.05, "gate_min_corr": 0.8, "gate_every": every}
    with TrainConsole(mode="plain", total=6, start_step=2, out=out, **gate) as console:
        for step in range(3, 7):
            console.feed(
                f"(TaskRunner pid=12) step:{step} - training/rollout_probs_diff_mean:0.001 - "
                "training/rollout_actor_probs_pearson_corr:0.99 - timing_s/step:2.0"
            )
    gated = [int(line.split("at step ")[1].split(":")[0]) for line in out.getvalue().splitlines() if "gate" in line]
    assert gated == shown


def test_plain_mode_shows_steps_and_events_and_hides_the_listed_noise():
    out = io.StringIO()
    with TrainConsole(mode="plain", total=None, start_step=0, out=out, gate_max=0.05, gate_min_corr=0.8) as console:
        steps = [console.feed(raw) for raw in STREAM]
    assert [s for s in steps if s is not None] == [0, 1, 2]
    shown = out.getvalue().splitlines()
    assert all(line.startswith("npu-rl: ") for line in shown), shown
    text = "\n".join(shown)
    assert "validation before training: held-out acc 0.2500" in text
    assert "consistency gate at step 1: rollout probs diff mean 1.5e-07 <= 0.05, correlation 1 >= 0.8: passed" in text
    assert "validation at step 2: held-out acc 0.5000" in text
    # The rotation the patch reports goes with the checkpoint's own line.
    assert "checkpoint global_step_2 saved: /ckpt/global_step_2 (removed global_step_1, keeping 1)" in text
    assert "is complete" not in text
    # A warning nobody listed reaches the terminal once, however often Ray repeats it.
    assert text.count("max_response_length truncates") == 1 and "warning from TaskRunner" in text
    for hidden in ("Apex", "autocast", "acl", "Traceback", "warnings.warn", "Training Progress"):
        assert hidden not in text, hidden
    step_lines = [line for line in shown if line.startswith("npu-rl: step ")]
    assert [line.split(" | ")[0] for line in step_lines] == ["npu-rl: step 1/3", "npu-rl: step 2/3"]
    assert "reward 0.250 (acc 0.25, format 0.50)" in step_lines[0] and "1234 tok/s/card" in step_lines[0]
    assert "ETA 0:00:" in step_lines[0] and "held-out acc 0.250 @0" in step_lines[0]
    assert "reward" not in step_lines[1]  # a nan mean is left out, not printed as nan


def test_live_mode_redraws_one_line_on_a_terminal():
    out = _Tty()
    with TrainConsole(mode="live", total=3, start_step=0, out=out) as console:
        for raw in STREAM:
            console.feed(raw)
    screen = out.getvalue()
    assert "step 2/3" in screen and "ETA" in screen and "\r" in screen
    assert "checkpoint global_step_2 saved" in screen and "Traceback" not in screen


def test_raw_mode_passes_the_stream_through(monkeypatch):
    out = io.StringIO()
    with TrainConsole(mode="raw", total=3, start_step=0, out=out) as console:
        steps = [console.feed(raw + "\n") for raw in STREAM]
    assert out.getvalue() == "".join(raw + "\n" for raw in STREAM) and [s for s in steps if s is not None] == [0, 1, 2]
    monkeypatch.setenv("NPU_RL_VERBOSE", "1")
    assert choose_mode(False, _Tty()) == "raw"
    monkeypatch.delenv("NPU_RL_VERBOSE")
    assert choose_mode(False, _Tty()) == "live" and choose_mode(False, io.StringIO()) == "plain"
    assert choose_mode(True, _Tty()) == "raw"


def test_a_long_step_gets_a_heartbeat_line():
    out = io.StringIO()
    with TrainConsole(mode="plain", total=5, start_step=0, out=out, heartbeat_s=0.2) as console:
        console.feed("step:1 - timing_s/step:1.0")
        import time

        time.sleep(0.5)  # the heartbeat thread wakes every min(heartbeat_s, 30) seconds
    assert "npu-rl: step 2 running for 0:00:00 (step 1 done)" in out.getvalue()


def test_the_failure_line_is_the_last_exception_not_the_noise():
    console = TrainConsole(mode="plain", total=None, start_step=0, out=io.StringIO())
    for raw in [
        "(TaskRunner pid=1) Traceback (most recent call last):",
        "(TaskRunner pid=1) ray.exceptions.RayTaskError(ValueError): ray::TaskRunner.run() (pid=1)",
        "(TaskRunner pid=1) ValueError: the reward exploded",
        "Failed to detect NPU type.",
        "ModuleNotFoundError: No module named 'acl'",
        "  File x.py, line 3",
    ]:
        console.feed(raw)
    assert console.error_line() == "ValueError: the reward exploded"


@pytest.mark.parametrize("entry", noise.NOISE, ids=lambda n: n.pattern[:30])
def test_every_noise_entry_hides_a_line_of_a_real_run_and_says_why(entry):
    # One line per entry as CPU runs print it (console.log of the tiny recipe); an entry that no longer
    # matches what the libraries print would let that line through.
    seen = [
        "Failed to detect NPU type.",
        "UserWarning: Transformer Engine and Apex are not installed. Falling back to Torch optimizers.",
        "FutureWarning: The pynvml package is deprecated. Please install nvidia-ml-py instead.",
        "CPU Autocast only supports dtypes of torch.bfloat16, torch.float16 currently.",
        "FutureWarning: FSDP.state_dict_type() and FSDP.set_state_dict_type() are being deprecated.",
        "UserWarning: Torch profiler tool config is not fully supported now.",
        "UserWarning: Disabled critic as algorithm.adv_estimator != gae. If it is not intended, ...",
        "UserWarning: 'set_vital' is deprecated, please do not call",
        "WARNING:2026-12-03 22:03:53,105:`generation_config` default values have been modified to match",
        # The tiny SFT recipe's run on one rank (verl 0.9's SFT trainer).
        "/x/torch/distributed/fsdp/fully_sharded_data_parallel.py:478: UserWarning: FSDP is switching to use "
        "`NO_SHARD` instead of ShardingStrategy.FULL_SHARD since the world size is 1.",
        # The cpu-vllm image's run of the tiny recipe with rollout.name vllm (tests/containers/test_vllm_rollout.py).
        "WARNING 12-04 03:27:49 [env_override.py:17] NCCL_CUMEM_ENABLE is set to 0, skipping override. This may",
        "WARNING 12-04 03:28:06 [utils.py:2737] Methods determine_num_available_blocks,device_config,"
        "get_cache_block_size_bytes,initialize_cache not implemented in <vllm.v1.worker.cpu_worker.CPUWorker object>",
        "WARNING 12-04 03:29:35 [_logger.py:72] Pin memory is not supported on CPU.",
        # The cann9.1-verl0.9 line's run (verl 0.9.0, vLLM 0.23's CPU backend as its rollout server).
        "UserWarning: torchtitan engine is not available: ModuleNotFoundError(\"No module named 'torchtitan'\")",
        "WARNING 12-04 21:09:10 [importing.py:58] Triton is installed, but doesn't include CPU backend.",
        "WARNING:2026-12-04 21:09:11,987:IPC is not supported on your devices. Falling back to shared memory for "
        "weight transfer, which may cause performance degradation.",
        "2026-12-04 20:30:22,212 - WARNING - transfer_queue.utils.common - target_num_threads 8 should not exceed "
        "total physical CPU cores 2. Setting to 2.",
        "(Worker pid=10582) WARNING 12-04 21:10:27 [cpu_worker.py:114] libtcmalloc is not found in LD_PRELOAD.",
        "WARNING 12-04 20:29:15 [envs.py:2088] Unknown vLLM environment variable detected: VLLM_USE_V1",
        "WARNING 12-04 20:29:15 [vllm.py:1055] Enforce eager set, disabling torch.compile and CUDAGraphs.",
        "WARNING 12-04 21:10:55 [model.py:1502] Default vLLM sampling parameters have been overridden by the model's "
        "`generation_config.json`: `{'repetition_penalty': 1.0}`.",
        "WARNING 12-04 21:10:55 [api_router.py:30] LoRA dynamic loading & unloading is enabled in the API server.",
        "WARNING 12-04 21:11:02 [input_processor.py:282] Passing raw prompts to InputProcessor is deprecated and will "
        "be removed in v0.18.",
    ]
    assert any(entry.matches(line) for line in seen) and len(entry.reason) > 20


def test_each_attempt_gets_its_own_console_log(tmp_path, monkeypatch):
    monkeypatch.setenv("NPU_RL_WORKSPACE", str(tmp_path))
    recipe = load_recipe("tiny_math_cpu")
    for attempt in range(3):
        path = run_files.new_console_log(recipe)
        assert path == run_files.console_log(recipe) and not path.exists()
        path.write_text(f"attempt {attempt}\n")
    logs = sorted(p.name for p in path.parent.glob("console*.log"))
    assert logs == ["console.1.log", "console.2.log", "console.log"]
    assert (path.parent / "console.1.log").read_text() == "attempt 0\n" and path.read_text() == "attempt 2\n"


def test_a_job_without_steps_says_when_it_started_and_ended():
    out = io.StringIO()
    with activity("merging", out=out, every_s=0.1):
        import time

        time.sleep(0.25)
    said = out.getvalue().splitlines()
    assert said[0] == "merging ..." and "merging: still running after 0:00:00" in said
    assert said[-1] == "merging: done in 0:00:00"
    with pytest.raises(RuntimeError), activity("failing", out=(out := io.StringIO())):
        raise RuntimeError
    assert "done" not in out.getvalue()


def test_npu_rls_own_process_does_not_print_the_listed_warnings(capfd):
    import subprocess

    code = (
        "import warnings; from npu_rl.console.noise import quiet_warnings; quiet_warnings();"
        "warnings.warn('Apex is not installed. Falling back to Torch Norm');"
        "warnings.warn('a warning a user can act on')"
    )
    err = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True).stderr
    assert "Apex" not in err and "a warning a user can act on" in err


def test_a_pods_ray_output_loses_the_listed_traceback_and_keeps_any_other():
    quiet = noise.Tracebacks()
    ray_start = [
        "Local node IP: 10.0.0.2\n",
        "2026-12-03 22:28:34,754\tERROR npu.py:81 -- Failed to detect NPU type.\n",
        "Traceback (most recent call last):\n",
        '  File "/x/ray/_private/accelerators/npu.py", line 77, in get_current_node_accelerator_type\n',
        "    import acl\n",
        "ModuleNotFoundError: No module named 'acl'\n",
        "Ray runtime started.\n",
        "Traceback (most recent call last):\n",
        '  File "/x/ray/_private/services.py", line 9, in start\n',
        "OSError: [Errno 98] Address already in use\n",
    ]
    kept = [line for raw in ray_start for line in quiet.feed(raw)] + quiet.flush()
    assert kept == [ray_start[0], ray_start[6], *ray_start[7:]]
