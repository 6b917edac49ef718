"""`effctx bench ttft`'s figures beside the times: the prefill rate by position, and the
cold run's peak memory beside the capacity model's K/V bytes (the tiny model, one run)."""

from __future__ import annotations

import pytest

from effctx_core.bench.ttft import PrefillSpan, prefill_spans, run_ttft, ttft_table
from effctx_core.events.trace import PrefillChunk
from effctx_core.profiles import Profile
from tests.helpers.tiny_gguf import write_tiny_llama_gguf

PROFILE = Profile(name="ttft-test", n_ctx=1024, n_batch=64)


def chunk(start: int, tokens: int, ms: float) -> PrefillChunk:
    return PrefillChunk(turn=1, stage="prompt", start=start, tokens=tokens, done=start + tokens, total=400, ms=ms)


def test_the_chunks_are_cut_into_four_runs_each_with_its_own_rate():
    chunks = [chunk(0, 100, 100.0), chunk(100, 100, 200.0), chunk(200, 100, 400.0), chunk(300, 100, 500.0)]
    assert prefill_spans(chunks) == (PrefillSpan(0, 100, 1000.0), PrefillSpan(100, 200, 500.0),
                                     PrefillSpan(200, 300, 250.0), PrefillSpan(300, 400, 200.0))


def test_runs_of_several_chunks_are_as_equal_as_the_chunks_divide():
    chunks = [chunk(start, 50, 50.0) for start in range(0, 300, 50)]
    assert [(s.start, s.end) for s in prefill_spans(chunks)] == [(0, 50), (50, 150), (150, 200), (200, 300)]


def test_fewer_chunks_than_runs_give_a_run_each_and_untimed_chunks_none():
    assert prefill_spans([chunk(0, 150, 300.0), chunk(150, 150, 600.0)]) == (PrefillSpan(0, 150, 500.0),
                                                                             PrefillSpan(150, 300, 250.0))
    # A pipeline that prefills the whole prompt in one call reports one chunk at 0 ms.
    assert prefill_spans([chunk(0, 400, 0.0)]) == ()


@pytest.fixture(scope="module")
def rows(tmp_path_factory):
    model = write_tiny_llama_gguf(tmp_path_factory.mktemp("tiny") / "tiny.gguf")
    return run_ttft(model, [PROFILE], [512])


@pytest.mark.model
def test_the_cold_prefill_is_timed_from_its_first_position_to_its_last(rows):
    (row,) = rows
    spans = row.prefill_by_position
    # About 480 tokens in 64-token chunks: eight chunks, four runs of two.
    assert 448 < row.prompt_tokens <= 512
    assert [(s.start, s.end) for s in spans] == [(0, 128), (128, 256), (256, 384), (384, row.prompt_tokens)]
    assert all(s.tokens_per_s > 0 for s in spans)


@pytest.mark.model
def test_the_peak_memory_stands_beside_the_capacity_models_kv_bytes(rows):
    (row,) = rows
    memory = row.memory
    assert memory is not None and row.memory_note == ""
    assert memory.peak_rss > memory.rss_before_open > 0
    # llama.cpp allocates its cache for the whole context when it makes the context:
    # 2 layers x 2 K/V heads x 32 dims x (K and V) x 2 bytes (f16) x 1,024 positions.
    assert memory.kv_modeled == 2 * 2 * 32 * 2 * 2 * 1024
    assert row.to_dict()["memory"]["rest"] == memory.peak_rss - memory.rss_before_open - memory.model_file - memory.kv_modeled


@pytest.mark.model
def test_the_table_gives_the_rate_by_position_and_the_memory_in_one_line_each(rows):
    text = ttft_table(rows)
    (row,) = rows
    assert "prefill tok/s by position (cold run):" in text
    assert f"peak RSS {row.memory.peak_rss / 2**20:,.1f} MiB = " in text
    assert " + 0.5 MiB K/V + " in text
