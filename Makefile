# Two commands do everything on a fresh machine: `make run` and `make test`.
# Each step leaves a stamp or a file behind, so a step that is already done is skipped.

PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.effctx-installed
# LLAVA is the multimodal helper library; effctx never uses it and it halves the
# llama.cpp compile (measured 4m42s instead of 9m38s on 2 cores). pip caches the
# built wheel, so a second set-up reinstalls it in seconds.
# AMX: -march=native turns on the AMX tile instructions wherever the CPU lists them, but
# under some hypervisors they fault (ldtilecfg raises a general protection fault at the
# first matrix multiply: every prefill segfaults). An explicit -mno-amx-* wins over
# -march=native whatever the order; AVX-512 stays on. Models of effctx's size gain
# nothing measurable from AMX.
export CMAKE_ARGS ?= -DLLAVA_BUILD=OFF -DCMAKE_C_FLAGS='-mno-amx-tile -mno-amx-int8 -mno-amx-bf16' -DCMAKE_CXX_FLAGS='-mno-amx-tile -mno-amx-int8 -mno-amx-bf16'

.PHONY: run test lint setup model llama-cpp clean

run: model
	$(BIN)/effctx

test: lint model llama-cpp
	$(BIN)/python -m pytest -q

# The layers (import-linter contracts), lint (ruff) and types (mypy on effctx_core);
# their settings are in pyproject.toml.
lint: $(STAMP)
	$(BIN)/lint-imports
	$(BIN)/ruff check effctx_core effctx_tui tests tools
	$(BIN)/mypy

setup: $(STAMP)

model: $(STAMP)
	$(BIN)/effctx model prepare

# effctx's own build of the llama.cpp tree that llama-cpp-python vendors, with ggml's RPC
# backend and llama-server: RPC workers (`effctx worker`), llama cells with rpc_workers and
# the llama-server cell need it. Built once into effctx's cache folder (about 5-7 minutes
# on 2 cores, said when done); later runs find it and return at once.
llama-cpp: $(STAMP)
	$(BIN)/effctx runtime build

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

$(STAMP): pyproject.toml | $(BIN)/python
	@echo "Installing effctx and its dependencies (the first time compiles llama.cpp: about 5 minutes on 2 cores)"
	$(BIN)/python -m pip install --progress-bar off -e '.[dev]'
	touch $(STAMP)

clean:
	rm -rf $(VENV) build *.egg-info
