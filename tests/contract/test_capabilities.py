"""What a capability report claims is exercised; what it does not claim is refused with
the capability's reason, never faked."""

from __future__ import annotations

import pytest

from effctx_core.backends.registry import quantized_kv_types
from effctx_core.contract import MODELED, OBSERVED, DecodeConfig
from effctx_core.engine import SessionEngine
from effctx_core.errors import UnsupportedFeatureError
from effctx_core.residency.config import ResidencyConfig
from tests.helpers.contract import require, words

STREAMING = ResidencyConfig(policy="streaming", sink_tokens=32, recent_tokens=192, budget=256, block_size=32,
                            slide_tokens=32)
SCORED = ResidencyConfig(policy="scored", sink_tokens=32, recent_tokens=96, budget=256, block_size=32)


def test_every_flag_says_why_it_has_its_value(session):
    caps = session.info.capabilities
    assert set(caps.flags()) == {"position_shift", "state_snapshot", "exact_snapshot", "attention_scores",
                                 "token_scores", "quantized_k", "quantized_v", "constrained_decoding",
                                 "decode_logprobs"}
    assert all(cap.reason.strip() for cap in caps.flags().values())
    assert caps.rollback_reason.strip()


def test_the_residency_map_is_observed_or_modeled_with_the_reason_as_described(cell, session):
    residency_map = session.info.capabilities.residency_map
    assert residency_map.source in (OBSERVED, MODELED) and residency_map.reason.strip()
    # the cells list describes the cell without opening it: it says the same
    assert cell.backend.describe(cell.model_path, cell.profile()).capabilities.residency_map == residency_map
    if cell.backend.runtime_eviction(cell.profile()) is not None:
        assert residency_map.source == MODELED  # which blocks a self-evicting runtime keeps is not observable


def test_an_observed_residency_map_holds_what_the_session_holds(cell, session):
    if session.info.capabilities.residency_map.source != OBSERVED:
        pytest.skip(f"modeled: {session.info.capabilities.residency_map.reason}")
    engine = SessionEngine(cell.model_path, cell.profile())
    try:
        engine.open()
        engine.complete("word " * 40, DecodeConfig(max_tokens=4))
        report = engine.residency_report()
        assert report.source == OBSERVED
        # The session's tape: its resident tokens and the reply's last one, where that is
        # still pending (it enters the cache with the next prefill's batch).
        context = engine.explain()
        assert report.resident_tokens == context.resident_tokens + context.pending_tokens == len(engine.tape)
    finally:
        engine.close()


def test_no_rollback_floor_means_any_cut_is_kept(fresh):
    if fresh.info.capabilities.rollback_floor is not None:
        pytest.skip(f"has a rollback floor: {fresh.info.capabilities.rollback_reason}")
    tape = words(fresh, 40)
    fresh.ensure_prefix(tape)
    assert fresh.ensure_prefix(tape[:1] + words(fresh, 5, seed=9)).reused == 1


def test_a_claimed_position_shift_lets_a_streaming_policy_run_past_n_ctx(cell, session):
    require(session.info.capabilities.position_shift, "position_shift")
    engine = SessionEngine(cell.model_path, cell.profile(residency=STREAMING))
    try:
        engine.open()
        result = engine.complete("word " * (2 * engine.info.n_ctx), DecodeConfig(max_tokens=4))
        report = engine.residency_report()
        assert result.stop_reason in ("max_tokens", "eog") and result.evicted > 0
        context = engine.explain()  # the reply's last token may still be pending
        assert report.resident_tokens <= 256 and context.resident_tokens + context.pending_tokens == report.resident_tokens
    finally:
        engine.close()


def test_an_evicting_policy_without_position_shift_is_refused_with_the_reason(cell, session):
    caps = session.info.capabilities
    if caps.position_shift.supported:
        pytest.skip("claims position_shift: exercised by the streaming test")
    with pytest.raises(UnsupportedFeatureError, match="streaming"):
        SessionEngine(cell.model_path, cell.profile(residency=STREAMING)).open()


def test_the_scored_policy_runs_only_on_attention_scores(cell, session):
    scores = session.info.capabilities.attention_scores
    engine = SessionEngine(cell.model_path, cell.profile(residency=SCORED))
    try:
        if not scores.supported:
            with pytest.raises(UnsupportedFeatureError, match="attention scores"):
                engine.open()
            return
        engine.open()
        assert engine.complete("word " * 400, DecodeConfig(max_tokens=2)).evicted > 0
    finally:
        engine.close()


def test_quantized_caches_run_where_claimed(cell, session):
    caps = session.info.capabilities
    require(caps.quantized_k, "quantized_k")
    kind = quantized_kv_types(cell.backend.name)[0]
    # V quantized too where that is claimed: some caches take only both or neither.
    both = {"kv_cache_type_v": kind} if caps.quantized_v.supported else {}
    quantized = cell.open(kv_cache_type_k=kind, **both)
    try:
        assert quantized.info.identity.setting("kv_cache_type_k") == kind
        assert quantized.info.identity != session.info.identity
        quantized.ensure_prefix(words(quantized, 20))
        assert len(list(quantized.decode(DecodeConfig(max_tokens=2)))) >= 1
    finally:
        quantized.close()


def test_the_trained_and_the_profile_limits_are_stated_in_the_same_words_by_every_backend(cell, session):
    limits = {limit.name: limit for limit in session.info.limits}
    facts = session.info.facts
    trained = limits["trained"]
    assert trained.reason == (f"the model was trained for {trained.tokens:,} tokens "
                              f"(GGUF {facts.architecture}.context_length)")
    assert limits["n_ctx"].reason.startswith(f"profile {cell.profile().name!r} ")
    assert f"{limits['n_ctx'].tokens:,} tokens" in limits["n_ctx"].reason
