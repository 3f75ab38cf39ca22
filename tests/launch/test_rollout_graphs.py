"""A rollout whose largest decode batches would get no captured ACL graph, and so decode eager, several times
slower (vllm-ascend #16049: an off-stride max_num_seqs under FULL_DECODE_ONLY), is refused by `npu-rl train
--dry-run`, the launch's preflight and `npu-rl doctor` on the stack line whose vllm-ascend has the rule, and
passes on the other line or with a good value; eager by choice is warned about. The rule's cases are checked
against the sizes vLLM 0.23.0 and vllm-ascend 0.23.0 / 0.9.1 compute (npu_rl.platform.aclgraph cites them)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from npu_rl.cli import main
from npu_rl.errors import UserError
from npu_rl.launcher.preflight import check_launch, run_checks
from npu_rl.launcher.spec import build_launch
from npu_rl.platform import aclgraph
from npu_rl.platform.aclgraph import check, engine_settings, grid_0_23
from npu_rl.platform.doctor import Host
from npu_rl.recipe import load_recipe

LINE_09 = "cann9.1-verl0.9"  # vLLM / vllm-ascend 0.23.0: the rule applies
LINE_06 = "cann8.2-verl0.6"  # vLLM / vllm-ascend 0.9.1: PIECEWISE ACL graphs up to 512
RECIPE_09 = "qwen2_5_1_5b_math_a2_1card_verl09"
COMPILATION = "+actor_rollout_ref.rollout.engine_kwargs.vllm.compilation_config"
FULL_DECODE_ONLY = {COMPILATION: {"cudagraph_mode": "FULL_DECODE_ONLY"}}


@pytest.fixture(autouse=True)
def workspace(tmp_path, monkeypatch) -> Path:
    ws = tmp_path / "ws"
    ws.mkdir()
    monkeypatch.setenv("NPU_RL_WORKSPACE", str(ws))
    return ws


def _recipe(stack: str = LINE_09, seqs: int | None = 12, eager: bool = False, overrides=None, **sets):
    values = {"stack": stack, "rollout.enforce_eager": eager, "verl_overrides": overrides or FULL_DECODE_ONLY}
    if seqs is not None:
        values["rollout.max_num_seqs"] = seqs
    return load_recipe(RECIPE_09, values | sets)


def _file(tmp_path: Path, seqs: int = 12, stack: str | None = None) -> str:
    """The recipe a user would write: the verl 0.9 line's Qwen run with graphs on and FULL_DECODE_ONLY."""
    data = {
        "extends": RECIPE_09,
        "rollout": {"enforce_eager": False, "max_num_seqs": seqs},
        "verl_overrides": FULL_DECODE_ONLY,
    }
    if stack:
        data["stack"] = stack
    path = tmp_path / f"graphs_{seqs}_{stack or 'own'}.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return str(path)


# --- the rule -------------------------------------------------------------------------------------------


def test_the_size_grid_is_vllm_0_23s():
    # vllm/config/vllm.py:1703-1729: 1, 2, 4, multiples of 8 below 256, of 16 from 256, and
    # max_num_batched_tokens where it fits under the ceiling.
    assert grid_0_23(12, 8192) == [1, 2, 4, 8]
    assert grid_0_23(20, 8192)[-1] == 16
    assert grid_0_23(300, 8192)[-3:] == [256, 272, 288]
    assert grid_0_23(512, 8192)[-1] == 512 and len(grid_0_23(512, 8192)) == 3 + 31 + 17
    assert grid_0_23(12, 10) == [1, 2, 4, 8, 10]


@pytest.mark.parametrize("seqs", [1, 2, 4, 8, 16, 24, 64, 248, 256, 272, 512])
def test_on_the_grid_every_decode_batch_has_a_graph(seqs):
    verdict = check(_recipe(seqs=seqs))
    assert verdict.status == "ok", verdict
    assert f"up to {seqs}" in verdict.detail


@pytest.mark.parametrize(
    "seqs, largest, below, above",
    [(3, 2, 2, 4), (12, 8, 8, 16), (20, 16, 16, 24), (100, 96, 96, 104), (300, 288, 288, 304), (500, 496, 496, 512)],
)
def test_off_the_grid_the_largest_batches_would_run_eager(seqs, largest, below, above):
    verdict = check(_recipe(seqs=seqs))
    assert verdict.status == "fail"
    assert f"rollout.max_num_seqs {seqs} with cudagraph_mode FULL_DECODE_ONLY" in verdict.detail
    assert f"stops at {largest}" in verdict.detail and "Truncating max_cudagraph_capture_size" in verdict.detail
    first = largest + 1
    assert f"decode batches of {first}-{seqs} sequences" in verdict.detail or f"batches of {seqs} seq" in verdict.detail
    assert verdict.fix.startswith(f"set rollout.max_num_seqs to {below} or {above}")
    # The rule is the capture ceiling's, whatever the mode: verl 0.9's default FULL_AND_PIECEWISE too.
    default_mode = check(_recipe(seqs=seqs, overrides={"trainer.val_before_train": False}))
    assert default_mode.status == "fail" and "cudagraph_mode FULL_AND_PIECEWISE" in default_mode.detail


def test_the_fix_is_the_largest_batch_captured_or_a_good_max_num_seqs():
    fixed = check(
        _recipe(overrides={COMPILATION: {"cudagraph_mode": "FULL_DECODE_ONLY", "max_cudagraph_capture_size": 16}})
    )
    assert fixed.status == "ok" and "up to 16" in fixed.detail
    assert check(_recipe(seqs=16)).status == "ok"


def test_speculative_tokens_multiply_the_decode_step():
    # MTP with one speculative token: each decode step is 2 tokens a sequence (verl 0.9 model.mtp).
    mtp = {"actor_rollout_ref.model.mtp.enable": True, "actor_rollout_ref.model.mtp.enable_rollout": True}
    assert engine_settings(_recipe(overrides=FULL_DECODE_ONLY | mtp)).decode_query_len == 2
    assert check(_recipe(seqs=12, overrides=FULL_DECODE_ONLY | mtp)).status == "ok"  # ceiling 24: on the grid
    ten = check(_recipe(seqs=10, overrides=FULL_DECODE_ONLY | mtp))  # ceiling 20, grid stops at 16
    assert ten.status == "fail" and "decode batches of 9-10 sequences (2 tokens each)" in ten.detail


def test_sizes_or_a_ceiling_the_recipe_chose_are_warned_about_not_refused():
    sizes = {COMPILATION: {"cudagraph_mode": "FULL_DECODE_ONLY", "cudagraph_capture_sizes": [1, 2, 4, 8]}}
    chosen = check(_recipe(overrides=sizes))
    assert chosen.status == "warn" and "decode batches of 9-12 sequences" in chosen.detail
    assert "add 12 to" in chosen.fix
    # verl's rollout.cudagraph_capture_sizes go over the compilation_config's (vllm_async_server.py:284-285).
    rollout = {"actor_rollout_ref.rollout.cudagraph_capture_sizes": [4, 8, 12], **FULL_DECODE_ONLY}
    assert check(_recipe(overrides=rollout)).status == "ok"
    # A ceiling on the grid below max_num_seqs is a choice; one off the grid is cut, which the recipe did
    # not ask for.
    on_grid = {COMPILATION: {"cudagraph_mode": "FULL_DECODE_ONLY", "max_cudagraph_capture_size": 8}}
    assert check(_recipe(overrides=on_grid)).status == "warn"
    off_grid = {COMPILATION: {"cudagraph_mode": "FULL_DECODE_ONLY", "max_cudagraph_capture_size": 12}}
    cut = check(_recipe(overrides=off_grid))
    assert cut.status == "fail" and "the capture ceiling 12" in cut.detail
    # Both given and different: vLLM refuses them at engine start.
    both = {COMPILATION: {"cudagraph_capture_sizes": [1, 2, 4, 8], "max_cudagraph_capture_size": 16}}
    assert "refuses them at engine start" in check(_recipe(overrides=both)).detail


def test_the_engines_512_cap_is_warned_about():
    # vllm-ascend caps its default ceiling at 512 by design; nothing is cut, and verl's and vLLM's docs say so.
    verdict = check(_recipe(seqs=1024))
    assert verdict.status == "warn" and "end at 512 (its cap)" in verdict.detail
    assert "decode batches of 513-1024 sequences" in verdict.detail
    assert verdict.fix.startswith("set rollout.max_num_seqs to 512")


def test_eager_by_choice_warns_only_where_the_graphs_would_fall_short():
    eager = check(_recipe(eager=True))
    assert eager.status == "warn" and eager.detail.startswith("eager by choice (rollout.enforce_eager is true)")
    assert check(_recipe(eager=True, seqs=16)).status == "ok"
    assert check(_recipe(eager=True, seqs=None)).status == "ok"  # verl 0.9's default 256
    none = check(_recipe(overrides={COMPILATION: {"cudagraph_mode": "NONE"}}))
    assert none.status == "warn" and "cudagraph_mode is NONE" in none.detail


def test_what_the_launch_passes_is_what_the_rule_reads():
    # A JSON string (verl json.loads it, vllm_async_server.py:271-272), a dotted key, --set's nested form.
    as_json = {COMPILATION: json.dumps({"cudagraph_mode": "FULL_DECODE_ONLY"})}
    assert check(_recipe(overrides=as_json)).status == "fail"
    dotted = {f"{COMPILATION}.cudagraph_mode": "FULL_DECODE_ONLY"}
    assert engine_settings(_recipe(overrides=dotted)).mode == "FULL_DECODE_ONLY"
    nested = load_recipe(
        RECIPE_09,
        {
            "rollout.enforce_eager": False,
            "verl_overrides.actor_rollout_ref.rollout.max_num_seqs": 20,
        },
    )
    e = engine_settings(nested)
    assert (
        e.max_num_seqs.value == 20 and e.max_num_seqs.source == "verl_overrides actor_rollout_ref.rollout.max_num_seqs"
    )
    assert check(nested).status == "fail"
    # verl_overrides win over the recipe's field: the launcher appends them last.
    over = _recipe(seqs=12, overrides=FULL_DECODE_ONLY | {"actor_rollout_ref.rollout.max_num_seqs": 16})
    assert check(over).status == "ok"
    # Unset, verl 0.9's own default (rollout.yaml:84).
    assert engine_settings(_recipe(seqs=None)).max_num_seqs.value == 256
    bad = check(_recipe(overrides={COMPILATION: "{not json"}))
    assert bad.status == "fail" and "not JSON" in bad.detail


def test_sequence_parallel_keeps_the_multiples_of_the_tp_size():
    flashcomm = {"+actor_rollout_ref.rollout.engine_kwargs.vllm.additional_config": {"enable_flashcomm1": True}}
    sets = {"rollout.tensor_model_parallel_size": 4, "resources.devices_per_node": 4}
    assert check(_recipe(seqs=16, overrides=FULL_DECODE_ONLY | flashcomm, **sets)).status == "ok"
    four = check(_recipe(seqs=20, overrides=FULL_DECODE_ONLY | flashcomm, **sets))
    assert four.status == "fail" and "set rollout.max_num_seqs to 16 or 24" in four.fix


def test_ascend_launch_blocking_with_graphs_is_refused_on_the_verl09_line():
    verdict = check(_recipe(seqs=16, env={"ASCEND_LAUNCH_BLOCKING": "1"}))
    assert verdict.status == "fail" and "ASCEND_LAUNCH_BLOCKING" in verdict.detail
    assert check(_recipe(seqs=16, eager=True, env={"ASCEND_LAUNCH_BLOCKING": "1"})).status == "ok"


def test_the_seeds_line_has_vllm_0_9_1s_rules():
    # PIECEWISE ACL graphs at 1, 2, 4, 8, ... 512 whatever max_num_seqs (vllm/config.py:4587-4607): 12 is fine,
    # and cudagraph_mode is no vLLM 0.9.1 setting (dropped, vllm/entrypoints/llm.py:204-207).
    twelve = check(_recipe(stack=LINE_06))
    assert (
        twelve.status == "warn" and "up to 512" in twelve.detail and "cudagraph_mode is no vLLM 0.9.1" in twelve.detail
    )
    assert check(_recipe(stack=LINE_06, overrides={"trainer.val_before_train": False})).status == "ok"
    # full_cuda_graph keeps the sizes up to max_num_seqs (vllm_ascend/utils.py:185-187): the same cut.
    full = check(_recipe(stack=LINE_06, overrides={COMPILATION: {"full_cuda_graph": True}}))
    assert full.status == "fail" and "full_cuda_graph keeps the capture sizes up to max_num_seqs, 12" in full.detail
    # verl 0.6.1's default 1024 sequences are above the 512 cap: warned about.
    default = check(_recipe(stack=LINE_06, seqs=None, overrides={"trainer.val_before_train": False}))
    assert default.status == "warn" and "max_num_seqs 1024 (verl 0.6.1's default)" in default.detail
    # Torchair graphs cover max_num_seqs; with enforce_eager vllm-ascend 0.9.1 refuses to start.
    torchair = {"rollout.graph_mode": True}
    assert check(_recipe(stack=LINE_06, overrides={"a.b": 1}, **torchair)).status == "ok"
    refused = check(_recipe(stack=LINE_06, eager=True, overrides={"a.b": 1}, **torchair))
    assert refused.status == "fail" and "ascend_config.py:208-213" in refused.detail
    # verl 0.6.1 hands LLM two compilation_configs when both are given: a TypeError.
    twice = {COMPILATION: {"level": 3}, "actor_rollout_ref.rollout.cudagraph_capture_sizes": [8, 16]}
    assert "TypeError" in check(_recipe(stack=LINE_06, overrides=twice)).detail


def test_the_seeds_line_acl_stream_budget_samples_sizes_keeping_the_largest(workspace):
    recipe = _recipe(
        stack=LINE_06,
        overrides={"trainer.val_before_train": False},
        **{"rollout.tensor_model_parallel_size": 2, "resources.devices_per_node": 2},
    )
    model = workspace / recipe.model.path
    model.mkdir(parents=True)
    (model / "config.json").write_text(json.dumps({"num_hidden_layers": 28}))
    # floor(1920 / 29 / 3) = 22 sizes (TP and expert-TP above 1), first and last kept (utils.py:205-236).
    e = engine_settings(recipe)
    assert e.graph_budget == 22
    cap = aclgraph.CAPTURES["0.9.1"](e)
    assert len(cap.sizes) == 22 and cap.sizes[0] == 1 and cap.largest == 512
    verdict = check(recipe)
    assert verdict.status == "ok" and "keeps 22 of 67 sizes" in verdict.detail


def test_no_recipe_of_the_repo_is_refused():
    for path in sorted(Path(__file__).resolve().parents[2].joinpath("configs/recipes").glob("*.yaml")):
        # A multi-turn recipe runs on verl 0.9's tool agent loop only, an SFT recipe on its SFT trainer only (the
        # schema refuses them elsewhere).
        own = load_recipe(path.stem)
        agent = own.rollout.multi_turn.enabled or own.sft is not None
        for stack in (LINE_09,) if agent else (LINE_06, LINE_09):
            sets = {"stack": stack}
            if path.stem == "tiny_math_cpu" and stack == LINE_09:
                sets["rollout.name"] = "vllm"
            assert check(load_recipe(path.stem, sets)).status != "fail", (path.stem, stack)


# --- where it is caught ----------------------------------------------------------------------------------


def test_train_dry_run_refuses_it_on_the_line_where_the_rule_applies(tmp_path, capsys):
    assert main(["train", "--recipe", _file(tmp_path), "--dry-run"]) == 2
    captured = capsys.readouterr()
    err = captured.err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("npu-rl: error: rollout graphs: rollout.max_num_seqs 12")
    assert "decode batches of 9-12 sequences" in err[0] and "fix: set rollout.max_num_seqs to 8 or 16" in err[0]
    assert "verl.trainer.main_ppo" not in captured.out


def test_train_dry_run_passes_on_the_other_line_and_with_a_good_value(tmp_path, capsys):
    assert main(["train", "--recipe", _file(tmp_path, stack=LINE_06), "--dry-run"]) == 0
    captured = capsys.readouterr()
    assert "verl.trainer.main_ppo" in captured.out and "actor_rollout_ref.rollout.max_num_seqs=12" in captured.out
    assert "npu-rl: warning: rollout graphs:" in captured.err  # the dropped cudagraph_mode
    assert main(["train", "--recipe", _file(tmp_path, seqs=16), "--dry-run"]) == 0
    captured = capsys.readouterr()
    assert "verl.trainer.main_ppo" in captured.out and "rollout graphs" not in captured.err


def test_the_launch_preflight_refuses_it_before_ray(tmp_path):
    recipe = load_recipe(_file(tmp_path))
    with pytest.raises(UserError, match=r"^rollout graphs: rollout.max_num_seqs 12 .*; fix: set rollout"):
        check_launch(build_launch(recipe), recipe, host=False)


def _doctor_rows(out: str) -> dict[str, str]:
    rows = {}
    for line in out.splitlines():
        cells = [c.strip() for c in line.strip("│ ").split("│")]
        if len(cells) == 3 and cells[0]:
            rows[cells[0]] = cells[1]
    return rows


def test_doctor_refuses_it_on_the_line_where_the_rule_applies(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "1000")
    main(["doctor", "--recipe", _file(tmp_path)])
    out = capsys.readouterr().out
    assert _doctor_rows(out)["rollout graphs"] == "fail"
    fixes = [line for line in out.splitlines() if line.startswith("fix rollout graphs:")]
    assert fixes == [fixes[0]] and "set rollout.max_num_seqs to 8 or 16" in fixes[0]
    results = {r.name: r for r in run_checks(load_recipe(_file(tmp_path)), "train", host=Host())}
    assert results["rollout graphs"].status == "fail"


@pytest.mark.parametrize("stack, seqs, status", [(LINE_06, 12, "warn"), (LINE_09, 16, "ok")])
def test_doctor_passes_on_the_other_line_and_with_a_good_value(tmp_path, capsys, monkeypatch, stack, seqs, status):
    monkeypatch.setenv("COLUMNS", "1000")
    main(["doctor", "--recipe", _file(tmp_path, seqs=seqs, stack=stack)])
    out = capsys.readouterr().out
    assert _doctor_rows(out)["rollout graphs"] == status
    assert "fix rollout graphs" not in out
