# Two commands do everything on a fresh machine: `make run` and `make test`.
# Each step leaves a stamp or a file behind, so a step that is already done is skipped.

PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.effctx-installed
# llama.cpp is compiled once, by effctx (`make llama-cpp`, below), not by pip: llama-cpp-python
# is installed without a library of its own (LLAMA_BUILD=OFF: its wheel is pure Python,
# built in seconds) and loads effctx's build of the same llama.cpp tree through
# LLAMA_CPP_LIB_PATH. The pinned version is read from pyproject.toml. --no-cache-dir:
# pip's wheel cache keys a wheel by the sdist's address and ignores CMAKE_ARGS, so a
# library-less wheel kept there would come back where a compiled one is expected (and an
# old compiled one would be used here instead, carrying 24 MB of unused libraries).
LLAMA_CPP_PYTHON := $(shell sed -n 's/^ *"\(llama-cpp-python==[^"]*\)".*/\1/p' pyproject.toml)

.PHONY: run test lint setup model llama-cpp llama-cpp-libs clean

# The console needs only the build's libraries (about a quarter of its compile).
run: model llama-cpp-libs
	$(BIN)/effctx

test: lint model llama-cpp
	$(BIN)/python -m pytest -q

# The suite less the tests that load a model (marked `model`: tests/conftest.py says which),
# for a quick check between edits; `make test` still runs everything.
.PHONY: test-fast
test-fast: llama-cpp-libs
	$(BIN)/python -m pytest -q -m "not model"

# The layers (import-linter contracts), lint (ruff) and types (mypy on effctx_core and effctx_tui);
# their settings are in pyproject.toml.
lint: $(STAMP)
	$(BIN)/lint-imports --no-cache
	$(BIN)/ruff check effctx_core effctx_tui tests tools
	$(BIN)/mypy

setup: $(STAMP)

model: $(STAMP)
	$(BIN)/effctx model prepare

# effctx's own build of the llama.cpp tree that llama-cpp-python vendors, with ggml's RPC
# backend and llama-server: the libraries every llama.cpp cell loads, RPC workers (`effctx
# worker`), llama cells with rpc_workers and the llama-server cell. Built once into
# effctx's cache folder (about 5 minutes on 2 cores, with progress); later runs find it and
# return at once. llama-cpp-libs stops after the libraries; llama-cpp goes on from there.
llama-cpp: $(STAMP)
	$(BIN)/effctx runtime build

llama-cpp-libs: $(STAMP)
	$(BIN)/effctx runtime build --libraries

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

$(STAMP): pyproject.toml | $(BIN)/python
	@echo "Installing $(LLAMA_CPP_PYTHON) without a llama.cpp library of its own (effctx builds one: make llama-cpp)"
	CMAKE_ARGS=-DLLAMA_BUILD=OFF $(BIN)/python -m pip install --progress-bar off --no-cache-dir --no-deps '$(LLAMA_CPP_PYTHON)'
	@echo "Installing effctx and its dependencies"
	$(BIN)/python -m pip install --progress-bar off -e '.[dev,bench]'
	touch $(STAMP)

clean:
	rm -rf $(VENV) build *.egg-info
