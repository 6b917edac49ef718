from __future__ import annotations

import time
from pathlib import Path
from typing import Iterator

import pytest

from effctx_core.backends.llama_cpp_build import BuildMissingError
from effctx_core.models import prepare_default_model
from tests.helpers.gate import Gate


def pytest_configure(config) -> None:
    """Before any test module imports llama_cpp: the tests run on effctx's llama.cpp build,
    as effctx does, and without it say how to get it in one line (make test builds it)."""
    try:
        import effctx_core.backends.gguf.binding  # noqa: F401
    except BuildMissingError as exc:
        pytest.exit(str(exc), returncode=2)


# The fixtures that hand a test a model to load, by name: the default model (default_model,
# here; model in test_llama_server and test_rpc_workers), a generated tiny GGUF
# (tiny_model in tests/contract and test_measuring; tiny in the OpenVINO, residency,
# certify and RPC worker tests; model_path and llm in test_tiny_gguf; two_turns in
# test_chat_template)
# and the conformance suite's cells (cell). A test that uses one, directly or through
# another fixture, is marked `model`; a test that loads a model some other way (a tiny GGUF
# written in the test) carries @pytest.mark.model itself. `make test-fast` runs the rest:
# pytest -m "not model".
MODEL_FIXTURES = frozenset({"default_model", "model", "tiny_model", "tiny", "model_path", "llm", "two_turns", "cell"})


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if MODEL_FIXTURES.intersection(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.model)


@pytest.fixture(scope="session")
def default_model() -> Path:
    """The embedded Gemma 3 270M, assembled once (make test prepares it beforehand)."""
    return prepare_default_model()


@pytest.fixture
def gate() -> Iterator[Gate]:
    """A Gate, released when the test ends: a test that fails while it holds a worker
    leaves no thread waiting."""
    held = Gate()
    yield held
    held.release()


@pytest.fixture
def utc(monkeypatch):
    """Local time is UTC: screens that show creation times in local time render the same anywhere."""
    monkeypatch.setenv("TZ", "UTC")
    time.tzset()
    yield
    monkeypatch.undo()
    time.tzset()


@pytest.fixture(autouse=True)
def own_config_dir(tmp_path_factory, monkeypatch):
    """No test reads or writes the user's real config folder (user profiles, remembered
    settings): every test gets an empty one of its own."""
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path_factory.mktemp("config")))


@pytest.fixture(autouse=True)
def own_certificates(tmp_path_factory, monkeypatch):
    """No test reads the user's certificates or leaves one behind: every test starts
    with an empty certificate store (converted models stay shared in the data dir)."""
    monkeypatch.setenv("EFFCTX_CERTIFICATES", str(tmp_path_factory.mktemp("certificates")))


@pytest.fixture(scope="session", autouse=True)
def own_measurements(tmp_path_factory):
    """The session's effctx measurements (certify, bench) register in a folder of its own:
    a test never sees another process's measurement on this machine as overlapping its
    timed stages, and never writes into the user's cache folder. Session-wide, so that
    module fixtures that certify see it too."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("EFFCTX_MEASURING", str(tmp_path_factory.mktemp("measuring")))
        yield
