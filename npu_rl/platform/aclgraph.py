"""Graph capture on the rollout engine: which of a recipe's decode batches vllm-ascend replays as a captured
graph and which run eager, by the rules of the vllm-ascend (and vLLM) release of the recipe's stack line.

A decode step of ``k`` sequences is ``k x decode_query_len`` tokens (1 + the speculative tokens). vLLM runs
it from a captured graph only when that count is at most the largest captured size; above it the step runs
eager, about 7.5x slower on an Atlas A2 (vllm-ascend issue #16049), and the engine says no more than a
"Truncating max_cudagraph_capture_size" warning. :func:`check` reads the settings the launch hands vLLM
(:func:`engine_settings`: the recipe's rollout fields, then ``verl_overrides``, which the launcher applies
last, then verl's defaults) and refuses a rollout whose capture ceiling the size grid silently cuts below its
largest decode batch (the off-stride max_num_seqs of #16049). It warns where the recipe chose eager
(``enforce_eager``, ``cudagraph_mode: NONE``) over such settings, chose the sizes itself, or meets the engine's
own 512 cap.

The rules, read at each line's pinned releases (the vLLM sdists the stack files pin by sha256; vllm-ascend
at its release tag; verl at the commit configs/stacks/<line>.yaml pins):

vLLM 0.23.0 + vllm-ascend v0.23.0 (5cb98caa) + verl 0.9.0 (483b8a00), line cann9.1-verl0.9:

- verl starts vLLM with ``compilation_config.cudagraph_mode`` FULL_AND_PIECEWISE unless
  ``rollout.engine_kwargs.vllm.compilation_config`` (a mapping or a JSON string) names one, and puts
  ``rollout.cudagraph_capture_sizes`` over its sizes (verl workers/rollout/vllm_rollout/
  vllm_async_server.py:270-285); the engine kwargs go in last and win (:312). Defaults: max_num_seqs 256,
  max_num_batched_tokens 8192 (trainer/config/rollout/rollout.yaml:84, :78); MTP speculation adds
  ``num_speculative_tokens`` to each decode step (vllm_async_server.py:330-335, vllm_rollout/utils.py:476-491).
- vllm-ascend sets the capture ceiling ``max_cudagraph_capture_size`` to min(max_num_seqs x
  decode_query_len, 512) when neither it nor ``cudagraph_capture_sizes`` is given (vllm_ascend/platform.py:
  207-241, applied at :248-261): upstream's x 2 headroom is dropped to save graph memory.
- vLLM caps the ceiling at max_num_batched_tokens and captures the grid 1, 2, 4, multiples of 8 below 256,
  multiples of 16 from 256 (1..32 then the grid with performance_mode interactivity), plus
  max_num_batched_tokens where it fits (vllm/config/vllm.py:1681-1729); with tensor parallelism and
  sequence parallelism it keeps the multiples of the TP size (:1731-1737; vllm-ascend again for flashcomm1,
  platform.py:549-568). A ceiling off the grid is cut to the grid's last size with "Truncating
  max_cudagraph_capture_size to N" (vllm/config/vllm.py:1744-1763; vllm-ascend's own message,
  utils.py:647-681); a ceiling and a size list that disagree are a ValueError (vllm/config/vllm.py:1750-1756).
- At run time a batch of more tokens than the ceiling dispatches to no graph in every mode
  (vllm/v1/cudagraph_dispatcher.py:276-285, which vllm-ascend's model runner calls, model_runner_v1.py:2977).
  So with max_num_seqs 12 the sizes are 1, 2, 4, 8 and decode batches of 9-12 run eager; 1, 2, 4 and the
  multiples of 8 (16 from 256) up to 512 are the values that lose nothing (PR #16623 proposes adding the
  ceiling itself to the grid).
- enforce_eager, or cudagraph_mode NONE, captures nothing (vllm/config/vllm.py:1271-1276; vllm-ascend
  platform.py:527-531). ASCEND_LAUNCH_BLOCKING=1 with graphs on is a ValueError (platform.py:645-656).
- ACL's graph budget: vllm-ascend no longer trims the capture list to a stream budget (the heuristic below
  was removed by #9962, 5f2ef5a0, before v0.21.0rc1; a capture that runs out of streams now fails with
  error 207008 and advice, compilation/acl_graph.py:28-51, 209). Only Ascend 950 (A5) PIECEWISE capture keeps at
  most MAX_CAPTURE_SIZES_FOR_950 = 4 sizes, the first and last kept (platform.py:76, 109-126, 624-625); the
  Atlas A2/A3 platforms npu-rl runs on are not A5.

vLLM 0.9.1 + vllm-ascend v0.9.1 (0740d102) + verl 0.6.1, line cann8.2-verl0.6:

- verl passes ``rollout.cudagraph_capture_sizes`` as a PIECEWISE compilation_config only when enforce_eager
  is off (verl 0.6.1 workers/rollout/vllm_rollout/vllm_rollout_spmd.py:218-227) and the engine kwargs beside
  it (:206, :252): both at once is Python's "multiple values for keyword argument". Defaults: max_num_seqs
  1024, max_num_batched_tokens 8192 (trainer/config/rollout/rollout.yaml:68, :62). vLLM 0.9.1 drops
  compilation_config keys it does not have (cudagraph_mode, max_cudagraph_capture_size: vllm/entrypoints/
  llm.py:204-207).
- vllm-ascend picks eager for enforce_eager, torchair graphs for ``additional_config.torchair_graph_config``
  (which refuses enforce_eager, ascend_config.py:208-213), else PIECEWISE ACL graphs (platform.py:208-242).
- ACL graph sizes: the user's list, else 1, 2, 4 and the multiples of 8 up to ``cuda_graph_sizes`` (512),
  cut at max_num_batched_tokens (vllm/config.py:2043, 4587-4610); with ``full_cuda_graph`` vllm-ascend keeps
  only the sizes up to max_num_seqs (vllm_ascend/utils.py:185-187), the same off-stride cut as above. A
  batch above the largest size runs eager (worker/model_runner_v1.py:888-895): verl's default 1024
  sequences are above 512.
- ACL's graph budget: at most MAX_CAPTURE_SIZE = 1920 graphs (2048 streams less 128 kept back,
  utils.py:54-59); PIECEWISE capture takes one per layer and size, so vllm-ascend keeps
  floor(1920 / (num_hidden_layers + 1) / parallel_factor) sizes, parallel_factor being 1 + how many of
  DP, TP, EP and expert-TP exceed 1, sampled evenly with the first and last kept (utils.py:205-236): the
  largest survives, the padding between sizes grows. A budget under 2 sizes breaks that sampling.
- Torchair graphs append max_num_seqs to ``graph_batch_sizes`` (worker/model_runner_v1.py:2339-2361):
  every decode batch pads into a graph.
"""

from __future__ import annotations

import copy
import json
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from .. import run_files, versions
from ..recipe.schema import Recipe

Status = Literal["ok", "warn", "fail"]

NAME = "rollout graphs"
ROLLOUT = "actor_rollout_ref.rollout"
ENGINE = f"{ROLLOUT}.engine_kwargs.vllm"
COMPILATION = f"{ENGINE}.compilation_config"
MODES = ("NONE", "PIECEWISE", "FULL", "FULL_DECODE_ONLY", "FULL_AND_PIECEWISE")
# The most max_num_seqs the nearest-good search looks at.
_SEARCH_LIMIT = 8192

# What verl's rollout config gives when the launch sets nothing (see the module docstring for lines).
VERL_DEFAULTS: dict[str, dict[str, Any]] = {
    versions.VERL_0_6_1: {"max_num_seqs": 1024, "max_num_batched_tokens": 8192, "cudagraph_mode": None},
    versions.VERL_0_9_0: {"max_num_seqs": 256, "max_num_batched_tokens": 8192, "cudagraph_mode": "FULL_AND_PIECEWISE"},
}


@dataclass(frozen=True)
class Verdict:
    status: Status
    detail: str
    fix: str = ""


@dataclass(frozen=True)
class Setting:
    """One engine setting, its value and how a user names the place it came from."""

    value: Any
    source: str
    explicit: bool  # the recipe set it (a field or verl_overrides), not verl's default

    def says(self, name: str) -> str:
        """``rollout.max_num_seqs 12``, or ``max_num_seqs 256 (verl 0.9.0's default)``."""
        return f"{self.source} {_show(self.value)}" if self.explicit else f"{name} {_show(self.value)} ({self.source})"


@dataclass(frozen=True)
class Engine:
    """What the launch hands vLLM that decides graph capture, read from the recipe."""

    vllm_ascend: str
    verl: str
    enforce_eager: Setting
    max_num_seqs: Setting
    max_num_batched_tokens: Setting
    cudagraph_mode: Setting  # upper-case name; None on a vLLM without modes
    capture_sizes: Setting  # list[int] | None
    max_capture_size: Setting  # int | None
    decode_query_len: int = 1
    tensor_parallel_size: int = 1
    sequence_parallel: bool = False
    interactivity: bool = False
    torchair: bool = False
    full_cuda_graph: bool = False
    cuda_graph_sizes: tuple[int, ...] = (512,)
    launch_blocking: bool = False
    graph_budget: int | None = None  # vllm-ascend 0.9.1's sizes per ACL stream budget, where the model says
    problems: tuple[str, ...] = ()  # settings the engine refuses outright
    dropped: tuple[str, ...] = ()  # compilation_config keys this vLLM drops

    @property
    def mode(self) -> str:
        return str(self.cudagraph_mode.value or "PIECEWISE")

    @property
    def need(self) -> int:
        """Tokens of the largest decode step: every sequence at once, within max_num_batched_tokens."""
        return min(int(self.max_num_seqs.value) * self.decode_query_len, int(self.max_num_batched_tokens.value))


@dataclass(frozen=True)
class Capture:
    """The sizes the engine captures, and whether the settings asked for more than it got."""

    sizes: tuple[int, ...]
    asked: int | None = None  # the ceiling before the size grid cut it, where it did
    chosen: bool = False  # the recipe chose the sizes or the ceiling itself
    notes: tuple[str, ...] = field(default_factory=tuple)

    @property
    def largest(self) -> int:
        return max(self.sizes, default=0)


# --- reading the launch's settings -----------------------------------------------------------------------

_DELETED = object()


def _show(value: Any) -> str:
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(map(str, value)) + "]"
    return str(value)


def _merge(base: dict[str, Any], over: Mapping[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for k, v in over.items():
        out[k] = _merge(out[k], v) if isinstance(v, Mapping) and isinstance(out.get(k), dict) else v
    return out


def overrides_tree(overrides: Mapping[str, Any]) -> dict[str, Any]:
    """``verl_overrides`` as one nested mapping, in order, as hydra applies them: ``+``/``++`` add or set a key,
    ``~`` deletes it (verl's default comes back), a mapping merges into the node, a dotted key or a
    ``--set verl_overrides.a.b=...`` (nested) lands on the same place."""
    tree: dict[str, Any] = {}
    for key, value in overrides.items():
        text = str(key)
        delete = text.startswith("~")
        *parents, leaf = text.lstrip("+~").split(".")
        node = tree
        for part in parents:
            child = node.get(part)
            if not isinstance(child, dict):
                child = node[part] = {}
            node = child
        if delete:
            node[leaf] = _DELETED
        elif isinstance(value, Mapping):  # a copy: the recipe's own mappings stay as they are
            node[leaf] = _merge(node[leaf] if isinstance(node.get(leaf), dict) else {}, copy.deepcopy(value))
        else:
            node[leaf] = copy.deepcopy(value)
    return tree


def _find(tree: Mapping[str, Any], dotted: str) -> Any:
    node: Any = tree
    for part in dotted.split("."):
        if not isinstance(node, Mapping) or part not in node:
            return None
        node = node[part]
    return None if node is _DELETED else node


def _mapping(value: Any, where: str, problems: list[str]) -> dict[str, Any]:
    """A mapping verl takes as a mapping or a JSON string (compilation_config, speculative_config)."""
    if value is None:
        return {}
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            problems.append(f"{where} is a string verl reads as JSON, and it is not JSON: {value!r}")
            return {}
    if not isinstance(value, Mapping):
        problems.append(f"{where} must be a mapping, got {_show(value)}")
        return {}
    return {k: v for k, v in value.items() if v is not _DELETED}


def _int(value: Any, where: str, problems: list[str]) -> int | None:
    if value is None:
        return None
    try:
        n = int(str(value).strip())
    except ValueError:
        problems.append(f"{where} {value!r} is not a whole number")
        return None
    if n < 1:
        problems.append(f"{where} {n} is below 1")
        return None
    return n


def _bool(value: Any) -> bool:
    return value is True or str(value).strip().lower() in ("true", "1", "yes", "on")


def _sizes(value: Any, where: str, problems: list[str]) -> list[int] | None:
    if value is None or value == []:
        return None  # verl passes the list only when it is truthy
    items = value if isinstance(value, (list, tuple)) else [value]
    out = [n for v in items if (n := _int(v, where, problems)) is not None]
    return out or None


def _setting(
    tree: Mapping[str, Any], keys: tuple[str, ...], field_value: Any, field_name: str | None, default: Any, verl: str
) -> Setting:
    """The first place that sets it: an engine kwarg or rollout key of verl_overrides (last applied, so they
    win), the recipe field, verl's default."""
    for key in keys:
        value = _find(tree, key)
        if value is not None:
            return Setting(value, f"verl_overrides {key}", True)
    if field_name is not None and field_value is not None:
        return Setting(field_value, field_name, True)
    return Setting(default, f"verl {verl}'s default", False)


def _decode_query_len(tree: Mapping[str, Any], engine: Mapping[str, Any], problems: list[str]) -> int:
    """1 + the speculative tokens each decode step verifies: MTP's (verl's model.mtp, which rollout.mtp
    selects), overridden by engine_kwargs' speculative_config."""
    spec = _mapping(engine.get("speculative_config"), f"verl_overrides {ENGINE}.speculative_config", problems)
    tokens = _int(spec.get("num_speculative_tokens"), "speculative_config.num_speculative_tokens", problems)
    if tokens is None:
        mtp = _find(tree, f"{ROLLOUT}.mtp") or _find(tree, "actor_rollout_ref.model.mtp") or {}
        if isinstance(mtp, Mapping) and _bool(mtp.get("enable")) and _bool(mtp.get("enable_rollout")):
            tokens = _int(mtp.get("num_speculative_tokens", 1), "mtp.num_speculative_tokens", problems)
    return 1 + (tokens or 0)


def _layers(recipe: Recipe) -> int | None:
    try:
        config = json.loads((run_files.model_dir(recipe) / "config.json").read_text(encoding="utf-8"))
        layers = config.get("num_hidden_layers") or config.get("text_config", {}).get("num_hidden_layers")
        return int(layers) if layers else None
    except (OSError, ValueError, TypeError, AttributeError):
        return None


def engine_settings(recipe: Recipe) -> Engine:
    """What the launch of ``recipe`` hands vLLM that decides graph capture (the launcher writes the rollout
    fields, then appends verl_overrides: npu_rl.launcher.overrides.build_overrides)."""
    pins, ro = recipe.pins, recipe.rollout
    verl = str(versions.get("verl.version", pins))
    vllm_ascend = str(versions.get("ascend.vllm_ascend", pins))
    defaults = VERL_DEFAULTS.get(verl, VERL_DEFAULTS[versions.VERL_0_9_0])
    tree = overrides_tree(recipe.verl_overrides)
    problems: list[str] = []
    engine = _find(tree, ENGINE)
    engine = engine if isinstance(engine, Mapping) else {}
    cc = _mapping(engine.get("compilation_config"), f"verl_overrides {COMPILATION}", problems)
    on_0_6 = verl == versions.VERL_0_6_1
    # verl 0.9 puts the engine kwargs over its own arguments; on 0.6.1 a repeated one is a TypeError.
    engine_first = () if on_0_6 else (ENGINE,)

    def keys(name: str) -> tuple[str, ...]:
        return tuple(f"{k}.{name}" for k in (*engine_first, ROLLOUT))

    eager = _setting(tree, keys("enforce_eager"), ro.enforce_eager, "rollout.enforce_eager", False, verl)
    eager = replace(eager, value=_bool(eager.value))
    seqs = _setting(tree, keys("max_num_seqs"), ro.max_num_seqs, "rollout.max_num_seqs", defaults["max_num_seqs"], verl)
    tokens = _setting(
        tree,
        keys("max_num_batched_tokens"),
        ro.max_num_batched_tokens,
        "rollout.max_num_batched_tokens",
        defaults["max_num_batched_tokens"],
        verl,
    )
    seqs = replace(seqs, value=_int(seqs.value, seqs.source, problems) or defaults["max_num_seqs"])
    tokens = replace(tokens, value=_int(tokens.value, tokens.source, problems) or defaults["max_num_batched_tokens"])

    rollout_sizes = _find(tree, f"{ROLLOUT}.cudagraph_capture_sizes")
    if on_0_6 and eager.value:
        rollout_sizes = None  # verl 0.6.1 passes them only with enforce_eager off (vllm_rollout_spmd.py:219-220)
    if on_0_6 and rollout_sizes and "compilation_config" in engine:
        problems.append(
            f"verl 0.6.1 passes {ROLLOUT}.cudagraph_capture_sizes as LLM's compilation_config and "
            f"{COMPILATION} beside it, a TypeError (vllm_rollout_spmd.py:250-252)"
        )
    if rollout_sizes:
        sizes = Setting(
            _sizes(rollout_sizes, "cudagraph_capture_sizes", problems),
            f"verl_overrides {ROLLOUT}.cudagraph_capture_sizes",
            True,
        )
    elif cc.get("cudagraph_capture_sizes"):
        sizes = Setting(
            _sizes(cc["cudagraph_capture_sizes"], "cudagraph_capture_sizes", problems),
            f"verl_overrides {COMPILATION}.cudagraph_capture_sizes",
            True,
        )
    else:
        sizes = Setting(None, "the engine's default sizes", False)
    ceiling = cc.get("max_cudagraph_capture_size")
    max_size = Setting(
        _int(ceiling, "max_cudagraph_capture_size", problems),
        f"verl_overrides {COMPILATION}.max_cudagraph_capture_size",
        ceiling is not None,
    )
    mode = cc.get("cudagraph_mode")
    if on_0_6:
        mode_set = Setting(None, "vLLM 0.9.1 (no cudagraph_mode)", False)
    elif mode is not None:
        mode_set = Setting(str(mode).strip().upper(), f"verl_overrides {COMPILATION}.cudagraph_mode", True)
    else:
        mode_set = Setting(defaults["cudagraph_mode"], f"verl {verl}'s default", False)
    dcp = _int(engine.get("decode_context_parallel_size"), "decode_context_parallel_size", problems) or 1
    if not on_0_6 and dcp > 1 and mode_set.value == "FULL_AND_PIECEWISE":
        mode_set = Setting("PIECEWISE", f"verl {verl} with decode_context_parallel_size {dcp}", False)

    tp = _int(_find(tree, f"{ROLLOUT}.tensor_model_parallel_size"), "tensor_model_parallel_size", problems)
    tp = tp or ro.tensor_model_parallel_size
    extra = _mapping(engine.get("additional_config"), f"verl_overrides {ENGINE}.additional_config", problems)
    flashcomm = extra.get("enable_flashcomm1", recipe.env.get("VLLM_ASCEND_ENABLE_FLASHCOMM1", "0"))
    pass_config = cc["pass_config"] if isinstance(cc.get("pass_config"), Mapping) else {}
    torchair_config = extra.get("torchair_graph_config")
    torchair = ro.graph_mode or (isinstance(torchair_config, Mapping) and _bool(torchair_config.get("enabled")))
    graph_sizes = engine.get("cuda_graph_sizes")
    budget = None
    layers = _layers(recipe) if on_0_6 else None
    if layers:
        dp = (ro.data_parallel_size or 1) if ro.expert_parallel else 1
        # vllm-ascend 0.9.1 platform.py:159-168 sets expert-TP to the whole DP x TP world without EP, EP to it with.
        ep, etp = (dp * tp, 1) if ro.expert_parallel else (1, dp * tp)
        factor = 1 + sum(n > 1 for n in (dp, tp, ep, etp))
        budget = math.floor(1920 / (layers + 1) / factor)
    return Engine(
        vllm_ascend=vllm_ascend,
        verl=verl,
        enforce_eager=eager,
        max_num_seqs=seqs,
        max_num_batched_tokens=tokens,
        cudagraph_mode=mode_set,
        capture_sizes=sizes,
        max_capture_size=max_size,
        decode_query_len=_decode_query_len(tree, engine, problems),
        tensor_parallel_size=tp,
        sequence_parallel=tp > 1 and (_bool(flashcomm) or _bool(pass_config.get("enable_sp"))),
        interactivity=str(engine.get("performance_mode", "")).lower() == "interactivity",
        torchair=bool(torchair),
        full_cuda_graph=_bool(cc.get("full_cuda_graph")),
        cuda_graph_sizes=tuple(_sizes(graph_sizes, "cuda_graph_sizes", problems) or (512,)),
        launch_blocking=str(recipe.env.get("ASCEND_LAUNCH_BLOCKING", "0")).strip() == "1",
        graph_budget=budget,
        problems=tuple(problems),
        dropped=tuple(k for k in ("cudagraph_mode", "max_cudagraph_capture_size") if on_0_6 and k in cc),
    )


# --- the capture sizes of each release ------------------------------------------------------------------


def grid_0_23(ceiling: int, max_tokens: int, interactivity: bool = False) -> list[int]:
    """vLLM 0.23.0's default sizes under ``ceiling`` (vllm/config/vllm.py:1703-1729)."""
    sizes = list(range(1, min(ceiling, 32) + 1)) if interactivity else [i for i in (1, 2, 4) if i <= ceiling]
    if ceiling >= 8:
        sizes += range(8, min(ceiling + 1, 256), 8)
    if ceiling >= 256:
        sizes += range(256, ceiling + 1, 16)
    if max_tokens <= ceiling:
        sizes.append(max_tokens)
    return sorted(set(sizes))


def capture_0_23(e: Engine) -> Capture:
    """vllm-ascend 0.23.0 on vLLM 0.23.0 (module docstring)."""
    seqs, max_tokens = int(e.max_num_seqs.value), int(e.max_num_batched_tokens.value)
    sizes: list[int]
    if e.capture_sizes.value:
        sizes, asked, chosen = sorted({s for s in e.capture_sizes.value if s <= max_tokens}), None, True
    else:
        if e.max_capture_size.value is not None:
            wanted, chosen = int(e.max_capture_size.value), True
        else:
            wanted, chosen = min(seqs * e.decode_query_len, 512), False
        ceiling = min(max_tokens, wanted)
        sizes = grid_0_23(ceiling, max_tokens, e.interactivity)
        asked = ceiling
    if e.sequence_parallel:
        sizes = [s for s in sizes if s % e.tensor_parallel_size == 0]
    if asked is not None and max(sizes, default=0) == asked:
        asked = None
    return Capture(tuple(sizes), asked, chosen)


def capture_0_9_1(e: Engine) -> Capture:
    """vllm-ascend 0.9.1 on vLLM 0.9.1, ACL graphs (module docstring)."""
    seqs, max_tokens = int(e.max_num_seqs.value), int(e.max_num_batched_tokens.value)
    chosen = bool(e.capture_sizes.value)
    sizes: list[int]
    if chosen:
        sizes = sorted(set(e.capture_sizes.value))  # a given list is taken whole (vllm/config.py:4117-4126)
    else:
        top = e.cuda_graph_sizes
        sizes = [1, 2, 4, *range(8, top[0] + 1, 8)] if len(top) == 1 else sorted(top)
        sizes = [s for s in sizes if s <= max_tokens]
    asked = None
    notes: list[str] = []
    if e.full_cuda_graph:
        kept = [s for s in sizes if s <= seqs]
        if not chosen and max(kept, default=0) < min(seqs, max(sizes, default=0)):
            asked = min(seqs, max(sizes, default=0))
        sizes = kept
    elif e.graph_budget is not None and e.graph_budget < len(sizes):
        # Evenly sampled, first and last kept (utils.py:224-232); the largest stays.
        n = max(e.graph_budget, 2)
        step = (len(sizes) - 1) / (n - 1)
        idx = [round(i * step) for i in range(n)]
        idx[0], idx[-1] = 0, len(sizes) - 1
        notes.append(
            f"vllm-ascend 0.9.1's ACL stream budget keeps {n} of {len(sizes)} sizes (at most 1920 graphs, "
            "one per layer and size), so smaller batches pad further"
        )
        sizes = sorted({sizes[i] for i in idx})
    return Capture(tuple(sizes), asked, chosen, tuple(notes))


CAPTURES: dict[str, Callable[[Engine], Capture]] = {"0.23.0": capture_0_23, "0.9.1": capture_0_9_1}


# --- the verdict -----------------------------------------------------------------------------------------


def _covers(e: Engine, capture: Callable[[Engine], Capture]) -> bool:
    return capture(e).largest >= e.need


def nearest_good(e: Engine, capture: Callable[[Engine], Capture]) -> tuple[int | None, int | None]:
    """The nearest max_num_seqs below and above the recipe's whose largest decode batch gets a graph, the
    other settings kept."""
    seqs = int(e.max_num_seqs.value)

    def good(m: int) -> bool:
        return _covers(replace(e, max_num_seqs=replace(e.max_num_seqs, value=m)), capture)

    below = next((m for m in range(seqs - 1, 0, -1) if good(m)), None)
    above = next((m for m in range(seqs + 1, _SEARCH_LIMIT + 1) if good(m)), None)
    return below, above


def _seqs_range(e: Engine, largest: int) -> str:
    first, last = largest // e.decode_query_len + 1, int(e.max_num_seqs.value)
    return f"{first}-{last}" if last > first else str(last)


def _mode_text(e: Engine) -> str:
    if e.cudagraph_mode.value is None:
        return "PIECEWISE ACL graphs" if not e.full_cuda_graph else "full ACL graphs (full_cuda_graph)"
    return f"cudagraph_mode {e.mode}" + (f" ({e.cudagraph_mode.source})" if e.cudagraph_mode.explicit else "")


def _eager_reason(e: Engine) -> str | None:
    if e.enforce_eager.value:
        return f"{e.enforce_eager.source} is true" if e.enforce_eager.explicit else "enforce_eager"
    if e.cudagraph_mode.value == "NONE":
        return f"{e.cudagraph_mode.source} is NONE"
    return None


def _shortfall(e: Engine, cap: Capture, capture: Callable[[Engine], Capture]) -> tuple[str, str]:
    """(what runs eager and why, the fix) of a capture whose largest size is below the largest decode step."""
    largest = cap.largest
    seqs = e.max_num_seqs.says("max_num_seqs")
    where = f"vllm-ascend {e.vllm_ascend}"
    if e.decode_query_len > 1:
        steps = f"decode batches of {_seqs_range(e, largest)} sequences ({e.decode_query_len} tokens each)"
    else:
        steps = f"decode batches of {_seqs_range(e, largest)} sequences"
    if cap.asked is not None:
        grid = "1, 2, 4, multiples of 8" + (", of 16 from 256" if cap.asked > 256 else "")
        if cap.chosen:
            ceiling = f"the capture ceiling {cap.asked} ({e.max_capture_size.source})"
        elif e.full_cuda_graph:
            ceiling = f"full_cuda_graph keeps the capture sizes up to max_num_seqs, {cap.asked}"
        else:
            dql = f" x {e.decode_query_len}" if e.decode_query_len > 1 else ""
            ceiling = f"vllm-ascend sets the capture ceiling to max_num_seqs{dql} = {cap.asked}"
        cut = (
            f"{ceiling}, and the size grid ({grid}) stops at {largest}, with no more than a "
            "'Truncating max_cudagraph_capture_size' warning"
        )
    elif cap.chosen:
        chosen = e.capture_sizes.source if e.capture_sizes.value else e.max_capture_size.source
        cut = f"the largest captured size is {largest} ({chosen})"
    else:
        cut = f"the engine's default capture sizes end at {largest} (its cap)"
    detail = (
        f"{seqs} with {_mode_text(e)} on {where}: {cut}, so {steps} get no ACL graph and run eager "
        "(~7.5x slower decode, vllm-ascend #16049)"
    )
    below, above = nearest_good(e, capture)
    options = " or ".join(str(m) for m in (below, above) if m is not None)
    source = e.max_num_seqs.source if e.max_num_seqs.explicit else "rollout.max_num_seqs"
    fix = f"set {source} to {options}" if options else f"lower {source}"
    if e.capture_sizes.value:
        fix += f", or add {e.need} to {e.capture_sizes.source}"
    elif e.vllm_ascend == "0.23.0":
        fix += (
            f", or capture the largest batch too: verl_overrides {COMPILATION}.max_cudagraph_capture_size "
            f"{_next_grid(e.need)} (more graph memory)"
        )
    else:
        fix += f", or list capture sizes up to {e.need} in verl_overrides {ROLLOUT}.cudagraph_capture_sizes"
    return detail, fix


def _next_grid(n: int) -> int:
    return next(s for s in grid_0_23(max(n, 1) + 16, 10**9) if s >= n)


def check_engine(e: Engine) -> Verdict:
    """The verdict on an engine's settings (:func:`check` reads them from a recipe)."""
    capture = CAPTURES.get(e.vllm_ascend)
    if capture is None:
        return Verdict("ok", f"no graph capture rules known for vllm-ascend {e.vllm_ascend}")
    if e.problems:
        return Verdict("fail", f"the rollout engine refuses: {e.problems[0]}", "correct the setting in the recipe")
    dropped = ""
    if e.dropped:
        what = " and ".join(e.dropped) + (
            " are not vLLM 0.9.1 settings" if len(e.dropped) > 1 else " is no vLLM 0.9.1 setting"
        )
        dropped = f"; compilation_config {what}: vLLM drops it unread (vllm/entrypoints/llm.py:204-207)"
    if e.vllm_ascend == "0.23.0" and e.cudagraph_mode.value not in MODES:
        return Verdict(
            "fail",
            f"{e.cudagraph_mode.source} {e.cudagraph_mode.value!r} is not a vLLM 0.23.0 cudagraph_mode",
            f"use one of {', '.join(MODES)}",
        )
    eager = _eager_reason(e)
    if e.vllm_ascend == "0.9.1" and e.torchair:
        if e.enforce_eager.value:
            return Verdict(
                "fail",
                "rollout.graph_mode (torchair) with enforce_eager: vllm-ascend 0.9.1 refuses the pair at engine "
                "start (ascend_config.py:208-213)",
                "set rollout.enforce_eager false, or rollout.graph_mode false for eager",
            )
        return Verdict(
            "ok",
            f"torchair graphs up to {e.max_num_seqs.says('max_num_seqs')}: vllm-ascend 0.9.1 adds max_num_seqs to "
            "graph_batch_sizes" + dropped,
        )
    if eager is None and e.launch_blocking and e.vllm_ascend == "0.23.0":
        return Verdict(
            "fail",
            "env ASCEND_LAUNCH_BLOCKING=1 with ACL graphs on: vllm-ascend 0.23.0 refuses it at engine start "
            "(platform.py:645-656)",
            "unset ASCEND_LAUNCH_BLOCKING, or set rollout.enforce_eager true to debug in eager mode",
        )
    if e.vllm_ascend == "0.23.0" and e.capture_sizes.value and e.max_capture_size.value is not None:
        largest = capture(e).largest
        if largest != e.max_capture_size.value:
            return Verdict(
                "fail",
                f"{e.max_capture_size.source} {e.max_capture_size.value} and the largest of "
                f"{e.capture_sizes.source} ({largest}) differ: vLLM 0.23.0 refuses them at engine start "
                "(vllm/config/vllm.py:1750-1756)",
                "give one of the two, or make them agree",
            )
    cap = capture(replace(e, enforce_eager=replace(e.enforce_eager, value=False)))
    if not cap.sizes:
        return Verdict(
            "fail",
            f"no capture size fits max_num_batched_tokens {e.max_num_batched_tokens.value} ({e.capture_sizes.source})",
            "give capture sizes within max_num_batched_tokens",
        )
    if e.graph_budget is not None and e.graph_budget < 2 and eager is None and not e.full_cuda_graph:
        return Verdict(
            "fail",
            f"vllm-ascend 0.9.1's ACL stream budget leaves {e.graph_budget} capture size(s) for this model "
            "(1920 graphs / (layers + 1) / parallel factor), which its sampling divides by zero on "
            "(utils.py:219-230)",
            "set rollout.enforce_eager true, or full_cuda_graph in the compilation_config",
        )
    covered = cap.largest >= e.need
    # Refused: a capture ceiling the size grid cuts short, which the engine only logs (the off-stride
    # max_num_seqs of vllm-ascend #16049). Warned: sizes the recipe chose, the engine's own 512 cap.
    truncated = not covered and cap.asked is not None
    if eager is not None:
        if truncated and (e.max_num_seqs.explicit or cap.chosen):
            detail, fix = _shortfall(e, cap, capture)
            return Verdict("warn", f"eager by choice ({eager}); with graphs on, {detail}" + dropped, fix)
        status: Status = "warn" if dropped else "ok"
        return Verdict(status, f"eager ({eager}): no ACL graphs captured" + dropped)
    if covered:
        notes = "".join(f"; {n}" for n in cap.notes)
        return Verdict(
            "warn" if dropped else "ok",
            f"{_mode_text(e)}: {len(cap.sizes)} capture sizes up to {cap.largest} cover decode batches up to "
            f"{e.max_num_seqs.says('max_num_seqs')}" + notes + dropped,
        )
    detail, fix = _shortfall(e, cap, capture)
    return Verdict("fail" if truncated else "warn", detail + dropped, fix)


def check(recipe: Recipe) -> Verdict:
    """Does every decode batch of the recipe's rollout get a captured graph on its stack line's vllm-ascend?"""
    if recipe.resources.platform == "cpu":
        return Verdict("ok", "cpu: the rollout runs eager (no ACL graphs)")
    if recipe.rollout.name != "vllm":
        return Verdict("ok", f"rollout {recipe.rollout.name}: not vLLM")
    return check_engine(engine_settings(recipe))


__all__ = ["NAME", "Capture", "Engine", "Verdict", "check", "check_engine", "engine_settings", "nearest_good"]
