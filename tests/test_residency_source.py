"""One truth of whether a residency map is observed or modeled: the cells list and the
running engine's report say the same, from the backend's own description."""

from __future__ import annotations

from pathlib import Path

import pytest

from effctx_core.backends.profile_loader import load_profile
from effctx_core.backends.registry import get_backend
from effctx_core.cells import residency_source
from effctx_core.engine import SessionEngine
from effctx_core.residency import MODELED, OBSERVED
from tests.helpers.tiny_gguf import write_tiny_llama_gguf


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> Path:
    # trained for 8192 tokens: the built-in profiles hold 4096
    return write_tiny_llama_gguf(tmp_path_factory.mktemp("tiny") / "tiny.gguf", n_ctx_train=8192)


@pytest.mark.parametrize(("profile", "source"), [
    ("exact", OBSERVED),  # effctx's executor edits llama.cpp's cache itself
    ("ov-exact", OBSERVED),  # the stateful cache holds exactly the tape effctx set
    ("ov-prefix-cache", MODELED),  # openvino-genai's scheduler owns the paged cache
])
def test_the_running_engine_reports_the_map_as_the_cell_describes_it(tiny, profile, source):
    record = load_profile(profile)
    backend = get_backend(record.backend)
    assert residency_source(backend.describe(tiny, record)) == source
    engine = SessionEngine(tiny, record)
    try:
        engine.open()
        assert engine.residency_report().source == source
    finally:
        engine.close()
