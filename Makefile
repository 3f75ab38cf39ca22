# npu-rl: `make demo` runs the CPU pipeline end to end, `make test` runs the suite.
# Both create .venv and install the pinned CPU environment (configs/versions.yaml) first.
SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
DEMO_DIR ?= workspace/demo
EVAL_VENV ?= .venv-eval
EVAL_STAMP := $(EVAL_VENV)/.installed
PYTEST_ARGS ?=

.PHONY: all venv demo test test-fast lint render clean help eval-venv

help:
	@echo "make demo   - tiny Qwen2 GRPO on CPU: model, data, train (Ray), merge, eval, report"
	@echo "make test   - full test suite (includes the CPU end-to-end run)"
	@echo "make render - re-render compose/ and k8s/ from the recipes"
	@echo "make venv   - only create $(VENV) with the pinned CPU environment"
	@echo "make eval-venv - OpenCompass 0.5.4 in its own environment ($(EVAL_VENV)) for npu-rl eval --backend opencompass"

venv: $(STAMP)

$(STAMP): pyproject.toml configs/versions.yaml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q pyyaml
	$(BIN)/python -m npu_rl.versions constraints > $(VENV)/constraints.txt
	$(BIN)/python -m pip install --progress-bar on -c $(VENV)/constraints.txt -e '.[train,ops,dev]'
	touch $@

demo: $(STAMP)
	$(BIN)/python -m npu_rl.demo --workdir $(DEMO_DIR)

test: $(STAMP)
	$(BIN)/python -m pytest $(PYTEST_ARGS)

test-fast: $(STAMP)
	$(BIN)/python -m pytest -m "not e2e" $(PYTEST_ARGS)

render: $(STAMP)
	$(BIN)/npu-rl render all

clean:
	rm -rf $(VENV) $(EVAL_VENV) workspace .pytest_cache

# OpenCompass (`npu-rl eval --backend opencompass` and its test) in its own environment:
# opencompass 0.5.4 needs datasets<4 (training's .venv has datasets 5). npu-rl finds
# .venv-eval/bin/opencompass by itself.


eval-venv: $(EVAL_STAMP)

$(EVAL_STAMP): configs/eval/requirements.txt
	$(PYTHON) -m venv $(EVAL_VENV)
	$(EVAL_VENV)/bin/python -m pip install -q --upgrade pip
	$(EVAL_VENV)/bin/python -m pip install -q --progress-bar off -r configs/eval/requirements.txt
	touch $@
