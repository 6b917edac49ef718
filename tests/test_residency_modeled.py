"""The residency map of a runtime that evicts by itself, modeled from its settings: the
sinks and the recent window it keeps, the oldest middle blocks counted as evicted, and
every report saying "modeled"."""

from __future__ import annotations

from pathlib import Path

import pytest

from effctx_core.backends.openvino.settings import OpenVINOOptions
from effctx_core.contract import DecodeConfig, RuntimeEviction
from effctx_core.engine import SessionEngine
from effctx_core.profiles import Profile
from effctx_core.residency import MODELED, BlockClass
from effctx_core.residency.blocks import BlockTable, Segment
from effctx_core.residency.modeled import modeled_table
from tests.helpers.tiny_gguf import write_tiny_llama_gguf

EVICTION = RuntimeEviction("test eviction", start_tokens=32, recent_tokens=64, max_tokens=160, block_tokens=32)


def classes(table: BlockTable) -> list[str]:
    return [BlockClass(int(c)).label for c in table.cls]


def test_a_tape_within_the_limit_keeps_every_block():
    table = modeled_table(BlockTable.from_segments([(Segment.OTHER, 160)], 32), EVICTION)
    assert classes(table) == ["sink", "hot", "hot", "recent", "recent"]


def test_past_the_limit_the_oldest_middle_blocks_count_as_evicted():
    table = modeled_table(BlockTable.from_segments([(Segment.OTHER, 256)], 32), EVICTION)
    assert classes(table) == ["sink", "evicted", "evicted", "evicted", "hot", "hot", "recent", "recent"]
    assert table.tokens_in(BlockClass.SINK, BlockClass.RECENT, BlockClass.HOT) == 160


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> Path:
    return write_tiny_llama_gguf(tmp_path_factory.mktemp("tiny") / "tiny.gguf")


def test_an_evicting_openvino_session_reports_its_map_as_modeled(tiny):
    options = OpenVINOOptions(max_cache_size=256, pipeline="paged", recent_size=128, start_size=32)
    engine = SessionEngine(tiny, Profile(name="evict", backend="openvino", n_ctx=1024, n_batch=1024,
                                         backend_options=options))
    try:
        engine.open()
        result = engine.complete("word " * 500, DecodeConfig(max_tokens=2))
        report = engine.residency_report()
        assert (report.source, report.policy, report.budget) == (MODELED, "openvino-genai eviction", 256)
        # whole tracker blocks are counted out, so up to one block less than the limit stays
        assert report.sink_tokens == 32 and 256 - 32 < report.resident_tokens <= 256
        assert report.evicted_tokens + report.resident_tokens == len(engine.tape)
        assert result.evicted == report.evicted_tokens  # the turn counts the modeled eviction
    finally:
        engine.close()
