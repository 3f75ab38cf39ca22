"""The NPU recipes' rollout engine on CPU: verl 0.6.1's vLLM rollout on vLLM 0.9.1's CPU backend, in the
cpu-vllm image (`make image-cpu-vllm`), through the compose service users run (`cpu-vllm-demo`).

One workspace, each run through docker-compose against the image:
- IPEX's decode kernel, which vLLM's CPU attention calls, on the block tables a prefix cache makes: the cause of
  a resumed run's crash, which the CPU platform's setting (prefix caching off) avoids;
- the demo, short: a head-size-32 tiny model, GRPO through the launcher with the vLLM engine in each of the
  two FSDP workers (weights synced into it every step), the consistency gate at step 1 on vLLM's own
  log-probs, a checkpoint, merge, eval and the report; then its run resumed twice on one node, 2 -> 4 -> 8
  steps, each time into new engines with the gate passing again at the run's first step (the 2-node resume:
  tests/cluster/test_multinode_vllm.py);
- the gate's drill that only its correlation catches (every weight sync into vLLM loads nothing): the run
  stops at its first step, before the optimizer step, with exit INCONSISTENT (a sync landing with noise, which
  the mean difference catches, is drilled on the hf rollout: tests/e2e/test_consistency_gate.py);
- the old_log_prob skip against the recomputed pass on vLLM's rollouts: the first resumed step (3, the pass
  skipped, as the recipe runs) against a run from a copy of the same checkpoint that recomputes it: the same
  rollouts, the same actor metrics and the same parameters after the update.
"""

from __future__ import annotations

import json
import math
import re
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import torch
from compose_run import Compose, compose_project, require_compose
from console_steps import raw_steps, shown_steps

from npu_rl.defaults import DEMO_WARM_START_STEPS
from npu_rl.demo import RECIPE, VLLM_MODEL_ARGS
from npu_rl.exit_codes import Exit
from npu_rl.image.build import build_variant
from npu_rl.patches.consistency import CORR_METRIC, DRILL_ENV, METRIC, SKIPPED_DRILL
from npu_rl.report.scalars import load_run
from npu_rl.run_files import MARKER

REPO = Path(__file__).resolve().parents[2]
SERVICE = "cpu-vllm-demo"
# The demo's steps, then the totals its run is resumed to (each run's first step is gated).
STEPS = 2
RESUMED_TO = (4, 8)
# The demo's paths inside the container (compose's command: --workdir /workspace/demo-vllm).
DEMO_DIR = "demo-vllm"
TRAIN = ["npu-rl", "train", "--recipe", "tiny_math_cpu", "--set", "rollout.name=vllm"]
TRAIN += ["--set", "model.path=models/tiny-qwen2-vllm"]

pytestmark = [pytest.mark.image, pytest.mark.timeout(2400)]


@dataclass
class Demo:
    """The workspace the short vLLM demo left, and how to run more jobs in it through compose."""

    ws: Path
    compose: Compose
    log: str = ""  # the demo's compose output
    measured: dict[str, float] = field(default_factory=dict)

    @property
    def run_dir(self) -> Path:
        return self.ws / DEMO_DIR

    def train(self, sets: dict[str, object], *env: str, timeout: int = 900) -> tuple[int, str]:
        """`npu-rl train` of the vLLM recipe in the demo's workspace (``env``: NAME=VALUE for the container)."""
        args = [a for k, v in sets.items() for a in ("--set", f"{k}={v}")]
        extra = [a for e in env for a in ("-e", e)]
        run = self.compose("run", "--rm", "-e", f"NPU_RL_WORKSPACE=/workspace/{DEMO_DIR}", *extra,
                           SERVICE, *TRAIN, *args, timeout=timeout)  # fmt: skip
        return run.returncode, run.stdout + run.stderr


@pytest.fixture(scope="module")
def demo(tmp_path_factory, model_cache):
    require_compose()
    build_variant("cpu-vllm", root=REPO, log=lambda _: None)
    ws = tmp_path_factory.mktemp("vllm") / "ws"
    ws.mkdir()
    # The demo's warm start runs in the image (its torch, not this host's): kept in the machine's model cache
    # under what makes it (the image's lock, Dockerfile and compose build, the steps and heads), and found by
    # the next run's demo, which reuses a model it finds (tests/e2e/test_demo_learns.py takes that path too).
    image_inputs = [(REPO / f).read_bytes() for f in ("configs/locks/vllm-cpu.txt", "docker/Dockerfile.cpu")]
    image_inputs.append((REPO / "compose/docker-compose.yml").read_bytes())
    cached = model_cache.entry(RECIPE, "cpu-vllm image", image_inputs, DEMO_WARM_START_STEPS, VLLM_MODEL_ARGS)
    model = ws / DEMO_DIR / "models" / "tiny-qwen2-vllm"
    if (cached / "config.json").is_file():
        shutil.copytree(cached, model)
    variables = {
        "DEMO_STEPS": str(STEPS),
        # The demo's own warm start: a base that gets some answers right, so that rewards vary within a
        # group and the equivalence below compares a real update (after 50 steps every score was 0).
        "DEMO_WARM_START_STEPS": str(DEMO_WARM_START_STEPS),
    }
    with compose_project("cpu-vllm", ws, "npurlvllm", **variables) as compose:
        d = Demo(ws, compose)
        start = time.monotonic()
        up = compose.up(SERVICE)
        d.measured["demo_s"] = time.monotonic() - start
        d.log = up.stdout + up.stderr
        assert up.returncode == 0, d.log[-4000:]
        model_cache.keep(cached, lambda folder: shutil.copytree(model, folder))
        yield d


def test_the_vllm_rollout_trains_and_its_broken_sync_is_stopped(demo, capsys):
    log = demo.log
    assert set(range(1, STEPS + 1)) <= set(shown_steps(log)), log[-3000:]
    gate = re.search(r"npu-rl: consistency gate at step 1: rollout probs diff mean ([0-9.e-]+) <= ", log)
    assert gate, log[-3000:]
    demo.measured["gap_step1"] = float(gate.group(1))
    # vLLM's bfloat16 log-probs against the trainer's float32 ones: close, and not equal by construction
    # (the hf rollout shares the trainer's module).
    assert 0 < demo.measured["gap_step1"] < 0.05
    assert list(demo.run_dir.rglob(f"global_step_{STEPS}/actor/huggingface/model.safetensors")), "no merged model"
    assert list(demo.run_dir.rglob("report/report.html"))
    assert re.search(rf"held-out accuracy     : \d+\.\d\d -> \d+\.\d\d at step {STEPS} ", log), log[-3000:]

    # The drill: a sync into vLLM that never lands (the engine keeps load_format dummy's random weights) is
    # stopped at the first step, before the update.
    for experiment, drill in (("drill_skipped", SKIPPED_DRILL),):
        code, log = demo.train(
            {"logging.experiment": experiment, "algorithm.total_training_steps": 2}, f"{DRILL_ENV}={drill}"
        )
        assert code == Exit.INCONSISTENT, log[-4000:]
        (line,) = [ln for ln in log.splitlines() if "npu-rl: error:" in ln]
        assert "consistency gate at step 1: the rollout's token probabilities " in line, line
        assert "stopped before the optimizer step" in line
        assert shown_steps(log) == []
        verdicts = list(demo.run_dir.rglob(f"{experiment}/consistency.json"))
        assert verdicts, "no verdict file"
        (step,) = json.loads(verdicts[0].read_text())["steps"]
        demo.measured[f"gap_{experiment}"] = step["probs_diff_mean"]
        demo.measured[f"corr_{experiment}"] = step["probs_corr"]
        assert not step["ok"]
        # Tokens both sides find unlikely: the mean difference stays under its limit (measured 0.0014), the
        # correlation is gone (0.018 against a healthy 0.9999).
        assert f"({CORR_METRIC}; limit " in line, line
        assert step["probs_diff_mean"] < 0.05 and step["probs_corr"] < 0.5
    with capsys.disabled():
        print(
            f"\ncpu-vllm demo ({STEPS} steps) {demo.measured['demo_s']:.0f} s; {METRIC}: step 1 "
            f"{demo.measured['gap_step1']:.5f}; correlation: "
            f"skipped sync {demo.measured['corr_drill_skipped']:.3f} (gap {demo.measured['gap_drill_skipped']:.4f})"
        )


def test_ipex_decode_needs_sequences_that_share_no_block(demo):
    """The cause of a resumed vLLM run's crash ("num seqs is not divisible by beam size"), and the condition
    npu-rl's CPU platform keeps (prefix caching off): run in the image, through vLLM's own decode call."""
    probe = demo.ws / "ipex_decode_probe.py"
    probe.write_text((Path(__file__).parent / "ipex_decode_probe.py").read_text())
    run = demo.compose("run", "--rm", "--entrypoint", "python", SERVICE, f"/workspace/{probe.name}", timeout=300)
    assert run.returncode == 0, (run.stdout + run.stderr)[-3000:]
    found = json.loads(run.stdout.strip().splitlines()[-1])
    assert found["ipex"] is True  # the kernel vLLM's CPU attention runs in the image
    # Should IPEX stop taking shared blocks for beams, these fail: the setting can then go (cpu_platform).
    assert "num seqs is not divisible by beam size" in found["shared_first_block_13_seqs"].get("error", ""), found
    assert found["shared_first_block_64_seqs"].get("max_abs_diff", 0) > 1.0, found  # silently wrong
    assert found["own_blocks_64_seqs"]["max_abs_diff"] < 0.02, found  # bfloat16's rounding only


# The engine's variables as the cpu patch and the recipe give a run's (npu_rl.patches.cpu_platform).
ENGINE_ENV = ("VLLM_USE_V1=1", "VLLM_CPU_KVCACHE_SPACE=1", "VLLM_CPU_OMP_THREADS_BIND=all")


def test_the_engine_as_the_cpu_patch_builds_it_decodes_a_batch_sharing_a_prefix(demo):
    """vLLM's V1 engine built from verl's rollout config as verl builds it, on two long prompts sampled 5 and 59
    times: with verl's default (the prefix cache on) the engine dies in IPEX's decode, as the resumed run did;
    through the cpu patch every prompt decodes as it does alone."""
    probe = demo.ws / "vllm_prefix_probe.py"
    probe.write_text((Path(__file__).parent / "vllm_prefix_probe.py").read_text())
    model = f"/workspace/{DEMO_DIR}/models/tiny-qwen2-vllm"
    found = {}
    for mode in ("verl", "patched"):
        env = [a for e in ENGINE_ENV for a in ("-e", e)]
        run = demo.compose("run", "--rm", *env, "--entrypoint", "python", SERVICE, f"/workspace/{probe.name}",
                           model, mode, timeout=600)  # fmt: skip
        assert run.returncode == 0, (run.stdout + run.stderr)[-3000:]
        found[mode] = json.loads(run.stdout.strip().splitlines()[-1])
        found[mode]["log"] = run.stdout + run.stderr
    verl, patched = found["verl"], found["patched"]
    assert verl["enable_prefix_caching"] is True and "error" in verl, verl
    assert "num seqs is not divisible by beam size" in verl["log"], verl["log"][-3000:]
    assert patched["enable_prefix_caching"] is False and "error" not in patched, patched["log"][-3000:]
    assert patched["differ"] == [], patched


# The resumed step the old_log_prob comparison reads, and where its recomputing twin runs.
OLP_STEP = STEPS + 1
OLP_RECOMPUTE = "olp_recompute"


def test_the_demos_run_resumes_into_new_engines_twice(demo):
    """2 steps (the demo's), then 4, then 8: each `npu-rl train` resumes from the newest checkpoint with new
    vLLM engines, the weights synced into them before the first rollout, and trains on."""
    ckpts = demo.run_dir / "checkpoints" / "npu_rl_demo" / "tiny_math_cpu"
    # The old_log_prob test's twin starts from this checkpoint too (a copy, before the resume rotates it).
    twin = ckpts.with_name(OLP_RECOMPUTE)
    shutil.copytree(ckpts / f"global_step_{STEPS}", twin / f"global_step_{STEPS}")
    (twin / MARKER).write_text(str(STEPS))
    done = STEPS
    for total in RESUMED_TO:
        # Every step of the first resume kept (step 3 is the old_log_prob comparison's), none rotated away.
        keep = {"checkpoint.save_freq": 1} if done == STEPS else {}
        code, log = demo.train({"algorithm.total_training_steps": total, "checkpoint.max_to_keep": 8, **keep})
        assert code == 0, log[-4000:]
        assert f"resuming tiny_math_cpu from global_step_{done}" in log, log[-3000:]
        assert shown_steps(log) == list(range(done + 1, total + 1)), log[-3000:]
        assert f"npu-rl: consistency gate at step {done + 1}: rollout probs diff mean " in log, log[-3000:]
        assert "Traceback" not in log and "npu-rl: error" not in log
        # Without a terminal (compose's run): one plain line per step with its ETA, none of the raw stream.
        assert raw_steps(log) == [] and "[ray]" not in log, log[-3000:]
        assert all(" | ETA " in ln for ln in log.splitlines() if ln.startswith("npu-rl: step ")), log[-3000:]
        gate = json.loads((demo.run_dir / "logs" / "npu_rl_demo" / "tiny_math_cpu" / "consistency.json").read_text())
        assert [(v["step"], v["ok"]) for v in gate["steps"]] == [(done + 1, True)], gate
        done = total
    assert sorted(int(d.name.rsplit("_", 1)[1]) for d in ckpts.glob("global_step_*"))[-1] == RESUMED_TO[-1]


ACTOR_TAGS = ("actor/pg_loss", "actor/kl_loss", "actor/pg_clipfrac", "actor/grad_norm", "actor/entropy")
ROLLOUT_TAGS = ("critic/score/mean", "critic/advantages/max", "response_length/mean")


def _shards(step_dir: Path) -> dict:
    shards = {}
    for rank in (0, 1):
        state = torch.load(step_dir / "actor" / f"model_world_size_2_rank_{rank}.pt", weights_only=False)
        shards.update({(rank, k): v.to_local() if hasattr(v, "to_local") else v for k, v in state.items()})
    return shards


def test_the_old_log_prob_skip_equals_the_recomputed_pass_on_vllm_rollouts(demo):
    """The old_log_prob skip changes nothing but the time. The skipped side is the demo's first resumed step (the
    recipe skips the pass); its twin resumes from a copy of the same checkpoint with the pass recomputed, and
    trains that one step. Both see the same rollouts (the same engines' seed, the same validation before) and
    make the same update. The skip is in the actor's update (npu_rl.patches.old_log_prob), whichever engine
    sampled: this is the suite's one run of it."""
    sets = {
        "logging.experiment": OLP_RECOMPUTE,
        "optimizations.recompute_old_log_prob": "true",
        "algorithm.total_training_steps": OLP_STEP,
        "checkpoint.max_to_keep": 8,
    }
    code, log = demo.train(sets)
    assert code == 0, log[-4000:]
    assert f"resuming {OLP_RECOMPUTE} from global_step_{STEPS}" in log, log[-3000:]
    runs = {}
    for name in ("tiny_math_cpu", OLP_RECOMPUTE):
        logs = demo.run_dir / "logs" / "npu_rl_demo" / name
        ckpt = demo.run_dir / "checkpoints" / "npu_rl_demo" / name / f"global_step_{OLP_STEP}"
        runs[name] = (load_run(logs), _shards(ckpt))
    (skip, skip_params), (recompute, recompute_params) = runs["tiny_math_cpu"], runs[OLP_RECOMPUTE]
    # Same rollouts (vLLM seeded the same way in both runs), or nothing below means anything.
    for tag in ROLLOUT_TAGS:
        assert skip[tag].value_at(OLP_STEP) == recompute[tag].value_at(OLP_STEP), tag
    assert abs(recompute["actor/pg_loss"].value_at(OLP_STEP)) > 1e-6, "no learning signal: the comparison is vacuous"
    for tag in ACTOR_TAGS:
        a, b = skip[tag].value_at(OLP_STEP), recompute[tag].value_at(OLP_STEP)
        assert math.isfinite(a) and math.isfinite(b) and abs(a - b) <= 1e-5, f"{tag}: skip {a} vs recompute {b}"
    assert "timing_s/old_log_prob" in recompute and OLP_STEP in recompute["timing_s/old_log_prob"].steps
    assert "timing_s/old_log_prob" not in skip
    assert skip_params.keys() == recompute_params.keys()
    # The update moved the weights (both sides equal because both trained, not because neither did).
    before = _shards(demo.run_dir / "checkpoints" / "npu_rl_demo" / OLP_RECOMPUTE / f"global_step_{STEPS}")
    assert any(not torch.equal(before[key], recompute_params[key]) for key in before), "the update moved nothing"
    for key in skip_params:
        torch.testing.assert_close(skip_params[key], recompute_params[key], rtol=1e-5, atol=1e-6, msg=str(key))
