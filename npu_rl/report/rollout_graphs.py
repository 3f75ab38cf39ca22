"""Whether a run's rollout decoded from captured ACL graphs or eager, as its own logs tell.

verl's rollout workers (verl 0.6.1's in-process vLLM, verl 0.9's vLLM servers) are Ray actors whose output Ray
forwards to the driver, which npu-rl keeps in the run's ``console.log`` (``console.<n>.log`` for earlier
attempts; npu_rl.run_files). The lines read, at the releases the stack lines pin:

- the engine's configuration, "Initializing a V1 LLM engine (v...) with config: ... enforce_eager=...,
  ... compilation_config=..." (vLLM 0.9.1 vllm/v1/engine/core.py:70-71, a JSON dump with "level" and
  "cudagraph_capture_sizes"; vLLM 0.23.0 core.py:114 with vllm/config/vllm.py:1967-1978, a dict with
  'cudagraph_mode', 'cudagraph_capture_sizes' and 'max_cudagraph_capture_size');
- eager: "Cudagraph is disabled under eager mode" (vLLM 0.23.0 vllm/config/vllm.py:1273), "Compilation
  disabled, using eager mode by default" (vllm-ascend v0.9.1 platform.py:209, v0.23.0 platform.py:528),
  "Skipping NPU graph capture for eager mode" (v0.9.1 worker/model_runner_v1.py:2188), "Skipping CUDA graph
  capture" (vLLM 0.23.0 vllm/v1/worker/gpu_model_runner.py:6528), "...is not compatible with ACL Graph mode"
  (v0.9.1 platform.py:230-232);
- graphs: "Graph capturing finished in" (v0.9.1 model_runner_v1.py:2205; vLLM 0.23.0 gpu_model_runner.py:6586),
  "Capturing CUDA graphs (decode, FULL)" (gpu_model_runner.py:6647), "Capturing torchair graph" (v0.9.1
  model_runner_v1.py:2168), "using only ACL Graph mode" (v0.9.1 platform.py:235-237), "Replaying aclgraph"
  (v0.23.0 compilation/acl_graph.py:243);
- the largest decode batches without a graph: "Truncating max_cudagraph_capture_size to N" (vLLM 0.23.0
  vllm/config/vllm.py:1759), vllm-ascend's "Truncating max_cudagraph_capture_size. original_size=A,
  truncated_size=B" (v0.23.0 utils.py:661) and "The max_cudagraph_capture_size (A) is smaller than the
  potential max tokens required for decode (B)" (v0.23.0 utils.py:1197).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from .. import run_files

ROW = "rollout graphs"

_ENGINE = re.compile(r"Initializing a V1 LLM engine \(v(?P<version>[^)]+)\) with config: (?P<config>.*)")
_EAGER_FLAG = re.compile(r"\benforce_eager=(True|False)\b")
_MODE = re.compile(r"['\"]cudagraph_mode['\"]:\s*<?(?:CUDAGraphMode\.)?['\"]?(?P<mode>[A-Z_]+)")
_SIZES = re.compile(r"['\"]cudagraph_capture_sizes['\"]:\s*\[(?P<sizes>[\d,\s]*)\]")
_MAX = re.compile(r"['\"](?:max_cudagraph_capture_size|max_capture_size)['\"]:\s*(?P<n>\d+)")
_TRUNCATED = re.compile(
    r"Truncating max_cudagraph_capture_size(?: to (?P<to>\d+)|\. original_size=(?P<was>\d+), "
    r"truncated_size=(?P<cut>\d+))"
)
_POTENTIAL = re.compile(
    r"The max_cudagraph_capture_size \((?P<max>\d+)\) is smaller than the potential max tokens required for "
    r"decode \((?P<need>\d+)\)"
)
_EAGER = (
    "Cudagraph is disabled under eager mode",
    "Compilation disabled, using eager mode by default",
    "Skipping NPU graph capture for eager mode",
    "Skipping CUDA graph capture",
    "is not compatible with ACL Graph mode",
)
_GRAPHS = (
    "Graph capturing finished in",
    "Capturing CUDA graphs (",
    "Capturing torchair graph",
    "using only ACL Graph mode",
    "Replaying aclgraph",
)
_TORCHAIR = ("Capturing torchair graph", "Torchair compilation enabled on NPU")


@dataclass
class RolloutGraphs:
    """What the logs say of the rollout's graph capture."""

    eager: int = 0  # lines saying eager
    graphs: int = 0  # lines saying graphs were captured or replayed
    torchair: bool = False
    vllm: str | None = None
    mode: str | None = None  # cudagraph_mode, or PIECEWISE for a vLLM 0.9.1 engine at level 3
    largest: int | None = None  # the largest captured size (tokens)
    truncated: bool = False  # vLLM or vllm-ascend cut the capture ceiling to its size grid
    truncated_from: int | None = None  # the ceiling asked for before the cut, where the line says
    need: int | None = None  # vllm-ascend's largest decode step, where it warned
    files: list[str] = field(default_factory=list)

    @property
    def kind(self) -> str | None:
        """graph, eager or both (attempts or engines that differ); None when the logs do not say."""
        if self.graphs and self.eager:
            return "graph and eager"
        return "graph" if self.graphs else "eager" if self.eager else None

    def text(self) -> str:
        kind = self.kind
        if kind is None:
            return "not in the run's logs"
        if kind == "eager":
            return "eager (no ACL graphs captured)"
        what = "torchair graphs" if self.torchair else "ACL graphs" + (f" ({self.mode})" if self.mode else "")
        upto = f", captured up to {self.largest} tokens" if self.largest else ""
        return f"{kind}: {what}{upto}"

    def notes(self, max_num_seqs: int | None = None, decode_query_len: int = 1) -> list[str]:
        """What the logs say ran without a graph; ``max_num_seqs``: the recipe's, to name the batches."""
        out = []
        if self.kind == "graph and eager":
            out.append(f"the rollout's logs ({', '.join(self.files)}) show graph capture and eager runs both")
        cut = self.largest
        if cut is None or not (self.truncated or self.need is not None):
            return out
        if self.need is not None:
            said = f"vllm-ascend warned that its capture ceiling {cut} is below the {self.need}-token decode step"
        elif self.truncated_from is not None:
            said = f"vLLM cut max_cudagraph_capture_size from {self.truncated_from} to {cut}"
        else:
            said = f"vLLM truncated max_cudagraph_capture_size to {cut}"
        if max_num_seqs is not None:
            if cut // decode_query_len >= max_num_seqs:
                return out  # the cut ceiling still covers every decode batch
            ran = f"decode batches of {cut // decode_query_len + 1}-{max_num_seqs} sequences ran eager"
        else:
            ran = f"decode steps of more than {cut} tokens, if any, ran eager"
        out.append(f"{said}: {ran} (`npu-rl doctor`'s rollout graphs check says why)")
        return out


def _ints(text: str) -> list[int]:
    return [int(t) for t in re.findall(r"\d+", text)]


def read_lines(lines: Iterable[str], found: RolloutGraphs | None = None) -> RolloutGraphs:
    """Fold log lines into ``found`` (a new one by default)."""
    g = found or RolloutGraphs()
    for line in lines:
        if "V1 LLM engine" in line and (m := _ENGINE.search(line)):
            g.vllm = m["version"]
            config = m["config"]
            if (flag := _EAGER_FLAG.search(config)) and flag.group(1) == "True":
                g.eager += 1
            if mode := _MODE.search(config):
                g.mode = mode["mode"]
            elif re.search(r"\"level\":\s*3", config):
                g.mode = "PIECEWISE"
            if sizes := _SIZES.search(config):
                g.largest = max(_ints(sizes["sizes"]), default=None) or g.largest
            if ceiling := _MAX.search(config):
                g.largest = int(ceiling["n"]) or g.largest
            continue
        if "Truncating max_cudagraph_capture_size" in line and (m := _TRUNCATED.search(line)):
            g.truncated = True
            if m["to"] is not None:
                g.largest = int(m["to"])
            else:
                g.truncated_from, g.largest = int(m["was"]), int(m["cut"])
            continue
        if "potential max tokens" in line and (m := _POTENTIAL.search(line)):
            g.largest, g.need = int(m["max"]), int(m["need"])
            continue
        if any(s in line for s in _EAGER):
            g.eager += 1
        elif any(s in line for s in _GRAPHS):
            g.graphs += 1
        if any(s in line for s in _TORCHAIR):
            g.torchair = True
    return g


def console_logs(run_dir: Path) -> list[Path]:
    """The run's console logs, earlier attempts first (``console.<n>.log``, then ``console.log``)."""
    stem = Path(run_files.CONSOLE_LOG).stem

    def attempt(p: Path) -> int:
        n = p.name[len(stem) + 1 : -len(".log")]
        return int(n) if n.isdigit() else 1 << 30

    return sorted(
        (p for p in run_dir.glob(f"{stem}*.log") if p.is_file()),
        key=attempt,
    )


def rollout_graphs(run_dir: Path) -> RolloutGraphs | None:
    """What the run's console logs say of its rollout's graphs; None where it kept none."""
    files = console_logs(run_dir)
    if not files:
        return None
    g = RolloutGraphs(files=[p.name for p in files])
    for path in files:
        with open(path, encoding="utf-8", errors="replace") as f:
            read_lines(f, g)
    return g
