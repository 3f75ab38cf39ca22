"""The throughput card says whether the rollout decoded from ACL graphs or eager where the run's console logs
tell, and which decode batches ran eager after vLLM cut the capture ceiling. The log samples are written here,
in the forms vLLM 0.23.0 / vllm-ascend 0.23.0 (the verl 0.9 line) and vLLM / vllm-ascend 0.9.1 (the seeds'
line) print them, behind Ray's actor prefixes (npu_rl.report.rollout_graphs cites each line's source)."""

from __future__ import annotations

import json

from report_synth import healthy_metrics, with_timing, write_events

from npu_rl.recipe import load_recipe
from npu_rl.report import build_report
from npu_rl.report.rollout_graphs import read_lines, rollout_graphs
from npu_rl.report.scalars import load_run
from npu_rl.report.throughput import throughput_card

RECIPE_09 = "qwen2_5_1_5b_math_a2_1card_verl09"
COMPILATION = "+actor_rollout_ref.rollout.engine_kwargs.vllm.compilation_config"

# verl 0.9 on vllm-ascend 0.23.0, max_num_seqs 12 under FULL_DECODE_ONLY: the ceiling 12 is cut to 8.
VERL09_TRUNCATED = """\
(TaskRunner pid=2231) INFO:2026-12-06 05:40:01,118:rollout replica 0 starting
(vLLMHttpServer pid=4512) WARNING 12-06 05:41:40 [vllm.py:1759] Truncating max_cudagraph_capture_size to 8
(vLLMHttpServer pid=4512) INFO 12-06 05:41:42 [core.py:114] Initializing a V1 LLM engine (v0.23.0) with config: \
model='/data/models/Qwen2.5-1.5B-Instruct', speculative_config=None, tokenizer='/data/models/Qwen2.5-1.5B-Instruct', \
dtype=torch.bfloat16, max_seq_len=1536, tensor_parallel_size=1, enforce_eager=False, kv_cache_dtype=auto, \
compilation_config={'mode': <CompilationMode.VLLM_COMPILE: 3>, 'cudagraph_mode': <CUDAGraphMode.FULL_DECODE_ONLY: \
(2, 0)>, 'cudagraph_capture_sizes': [1, 2, 4, 8], 'max_cudagraph_capture_size': 8, 'compile_ranges_endpoints': \
[8192]}, kernel_config=KernelConfig()
(EngineCore pid=4601) Capturing CUDA graphs (decode, FULL): 100%|##########| 4/4 [00:03<00:00,  1.21it/s]
(EngineCore pid=4601) INFO 12-06 05:42:30 [gpu_model_runner.py:6586] Graph capturing finished in 4 secs, took 0.12 GiB
(EngineCore pid=4601) INFO 12-06 05:43:02 [acl_graph.py:243] Replaying aclgraph
(TaskRunner pid=2231) step:1 - timing_s/gen:88.2
"""

# verl 0.6.1 on vllm-ascend 0.9.1 with enforce_eager (the seeds' 1-card recipe).
VERL06_EAGER = """\
(WorkerDict pid=1234) INFO 06-12 10:00:00 [platform.py:209] Compilation disabled, using eager mode by default
(WorkerDict pid=1234) INFO 06-12 10:00:01 [core.py:70] Initializing a V1 LLM engine (v0.9.1) with config: \
model='/data/models/Qwen2.5-1.5B-Instruct', speculative_config=None, enforce_eager=True, \
compilation_config={"level":0,"cudagraph_capture_sizes":[],"max_capture_size":0}
(WorkerDict pid=1234) INFO 06-12 10:00:30 [model_runner_v1.py:2188] Skipping NPU graph capture for eager mode.
"""

# verl 0.6.1 on vllm-ascend 0.9.1, graphs on (the 4-card recipe): PIECEWISE ACL graphs, 22 of 67 sizes.
VERL06_GRAPHS = """\
(WorkerDict pid=1234) INFO 06-12 10:00:00 [platform.py:235] PIECEWISE compilation enabled on NPU. use_inductor \
not supported - using only ACL Graph mode
(WorkerDict pid=1234) INFO 06-12 10:00:00 [utils.py:237] Adjusted ACL graph batch sizes for Qwen2ForCausalLM model \
(layers: 28): 67 \u2192 22 sizes
(WorkerDict pid=1234) INFO 06-12 10:00:01 [core.py:70] Initializing a V1 LLM engine (v0.9.1) with config: \
model='/data/models/Qwen2.5-1.5B-Instruct', enforce_eager=False, compilation_config={"level":3,\
"cudagraph_capture_sizes":[512,488,464,440,416,392,368,344,320,296,272,248,224,200,176,152,128,104,80,56,32,1],\
"max_capture_size":512}
(WorkerDict pid=1234) INFO 06-12 10:01:30 [model_runner_v1.py:2205] Graph capturing finished in 71 secs, took 0.52 GiB
"""


def _run(tmp_path, recipe, log: str | None):
    seqs = recipe.algorithm.train_batch_size * recipe.algorithm.rollout_n
    run = write_events(tmp_path / "run", with_timing(healthy_metrics(), sequences=seqs, devices=1))
    if log is not None:
        (run / "console.log").write_text(log, encoding="utf-8")
    return run


def _recipe(**sets):
    return load_recipe(RECIPE_09, {"rollout.enforce_eager": False, **sets})


def test_the_card_says_graph_mode_and_which_decode_batches_ran_eager(tmp_path):
    recipe = _recipe(
        **{"rollout.max_num_seqs": 12, "verl_overrides": {COMPILATION: {"cudagraph_mode": "FULL_DECODE_ONLY"}}}
    )
    run = _run(tmp_path, recipe, VERL09_TRUNCATED)
    card = throughput_card(load_run(run), recipe, run_dir=run)
    logged = dict(card.logged)
    assert logged["rollout graphs"] == "graph: ACL graphs (FULL_DECODE_ONLY), captured up to 8 tokens"
    notes = [n for n in card.notes if "max_cudagraph_capture_size" in n]
    assert notes == [
        "vLLM truncated max_cudagraph_capture_size to 8: decode batches of 9-12 sequences ran eager "
        "(`npu-rl doctor`'s rollout graphs check says why)"
    ]
    text = "\n".join(card.text_lines())
    assert "rollout graphs graph: ACL graphs (FULL_DECODE_ONLY)" in text and "9-12 sequences ran eager" in text
    # Without the recipe the card still says what the logs say, in tokens.
    bare = throughput_card(load_run(run), None, run_dir=run)
    assert any("decode steps of more than 8 tokens, if any, ran eager" in n for n in bare.notes)


def test_a_cut_that_still_covers_max_num_seqs_is_no_note(tmp_path):
    recipe = _recipe(**{"rollout.max_num_seqs": 8})
    run = _run(tmp_path, recipe, VERL09_TRUNCATED)
    card = throughput_card(load_run(run), recipe, run_dir=run)
    assert dict(card.logged)["rollout graphs"].startswith("graph:")
    assert not [n for n in card.notes if "ran eager" in n]


def test_the_card_says_eager_and_the_seeds_lines_graphs(tmp_path):
    recipe = load_recipe("qwen2_5_1_5b_math_a2_1card")
    run = _run(tmp_path, recipe, VERL06_EAGER)
    assert dict(throughput_card(load_run(run), recipe, run_dir=run).logged)["rollout graphs"] == (
        "eager (no ACL graphs captured)"
    )
    g = read_lines(VERL06_GRAPHS.splitlines())
    assert g.kind == "graph" and g.mode == "PIECEWISE" and g.largest == 512 and not g.truncated
    assert g.text() == "graph: ACL graphs (PIECEWISE), captured up to 512 tokens"


def test_attempts_that_differ_and_logs_that_say_nothing(tmp_path):
    recipe = _recipe()
    run = _run(tmp_path, recipe, VERL09_TRUNCATED)
    (run / "console.1.log").write_text(VERL06_EAGER, encoding="utf-8")  # an earlier attempt, eager
    g = rollout_graphs(run)
    assert g is not None and g.files == ["console.1.log", "console.log"] and g.kind == "graph and eager"
    card = throughput_card(load_run(run), recipe, run_dir=run)
    assert any("show graph capture and eager runs both" in n for n in card.notes)
    # A log without the engine's lines, or none at all: no row (the card does not guess).
    quiet = _run(tmp_path / "q", recipe, "(TaskRunner pid=1) step:1 - timing_s/gen:88.2\n")
    assert "rollout graphs" not in dict(throughput_card(load_run(quiet), recipe, run_dir=quiet).logged)
    none = _run(tmp_path / "n", recipe, None)
    assert rollout_graphs(none) is None
    assert "rollout graphs" not in dict(throughput_card(load_run(none), recipe, run_dir=none).logged)


def test_the_report_reads_the_runs_logs(tmp_path):
    recipe = _recipe(
        **{"rollout.max_num_seqs": 12, "verl_overrides": {COMPILATION: {"cudagraph_mode": "FULL_DECODE_ONLY"}}}
    )
    run = _run(tmp_path, recipe, VERL09_TRUNCATED)
    report = build_report(run, recipe=recipe)
    health = json.loads((report.out_dir / "health.json").read_text())
    assert health["throughput"]["logged"]["rollout graphs"].startswith("graph: ACL graphs (FULL_DECODE_ONLY)")
    assert "9-12 sequences ran eager" in (report.out_dir / "health.md").read_text()
    assert "rollout graphs" in (report.out_dir / "report.html").read_text()
