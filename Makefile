# Two commands do everything on a fresh machine: `make run` and `make test`.
# Each step leaves a stamp or a file behind, so a step that is already done is skipped.

PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.effctx-installed
# LLAVA is the multimodal helper library; effctx never uses it and it halves the
# llama.cpp compile (measured 4m42s instead of 9m38s on 2 cores). pip caches the
# built wheel, so a second set-up reinstalls it in seconds.
export CMAKE_ARGS ?= -DLLAVA_BUILD=OFF

.PHONY: run test setup model clean

run: model
	$(BIN)/effctx

test: model
	$(BIN)/python -m pytest -q

setup: $(STAMP)

model: $(STAMP)
	$(BIN)/effctx model prepare

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

$(STAMP): pyproject.toml | $(BIN)/python
	@echo "Installing effctx and its dependencies (the first time compiles llama.cpp: about 5 minutes on 2 cores)"
	$(BIN)/python -m pip install --progress-bar off -e '.[dev]'
	touch $(STAMP)

clean:
	rm -rf $(VENV) build *.egg-info
