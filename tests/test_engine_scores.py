"""SessionEngine.score on the default model: the mean next-token NLL of a reference text
under a profile's cache types and residency policy, the quality gate's measure."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from effctx_core.backends.profile_loader import load_profile
from effctx_core.contract import DecodeConfig
from effctx_core.engine import ScoreResult, SessionEngine
from effctx_core.events.trace import PrefillChunk

# Plain English prose that every Debian-based system ships (base-files).
REFERENCE = Path("/usr/share/common-licenses/GPL-3")


@pytest.fixture(scope="module")
def reference() -> str:
    if not REFERENCE.is_file():
        pytest.skip(f"the reference text {REFERENCE} is not on this machine (Debian's base-files ships it)")
    return REFERENCE.read_text(encoding="utf-8")


def _score(model: Path, profile: str, reference: str, n_tokens: int) -> ScoreResult:
    """The first n_tokens of the reference (BOS added by score) under a built-in profile."""
    engine = SessionEngine(model, load_profile(profile))
    try:
        engine.open()
        text = engine.detokenize(engine.session.tokenize(reference, add_bos=False)[:n_tokens])
        return engine.score(text)
    finally:
        engine.close()


@pytest.fixture(scope="module")
def exact(default_model, reference) -> ScoreResult:
    return _score(default_model, "exact", reference, 300)


def test_the_reference_text_scores_as_the_model_is_known_to(exact):
    # 2.59 measured teacher-forced with llama-cpp-python's logits_all on the same tokens.
    assert (exact.policy, exact.tokens, exact.scored, exact.evicted) == ("none", 301, 300, 0)
    assert 1.5 < exact.mean_nll < 4.0
    assert exact.logprobs.shape == (301,) and math.isnan(exact.logprobs[0])
    assert exact.mean_nll == pytest.approx(-exact.logprobs[1:].mean(), rel=1e-12)


def test_a_q8_cache_costs_less_than_five_percent_of_nll(default_model, reference, exact):
    q8 = _score(default_model, "q8", reference, 300)
    assert q8.tokens == exact.tokens
    assert abs(q8.mean_nll - exact.mean_nll) < 0.05 * exact.mean_nll


def test_an_evicting_policy_scores_through_its_evictions(default_model, reference):
    # The streaming profile keeps 1024 tokens: the last prefill chunk makes room first.
    streamed = _score(default_model, "streaming", reference, 1200)
    assert (streamed.policy, streamed.tokens, streamed.scored) == ("streaming", 1201, 1200)
    assert streamed.evicted > 0
    assert np.isfinite(streamed.logprobs[1:]).all() and math.isfinite(streamed.mean_nll)


def test_a_score_is_a_new_conversation_reported_as_a_prefill_and_goes_on_like_one(default_model):
    engine = SessionEngine(default_model, load_profile("exact").with_changes(n_ctx=512))
    try:
        engine.open()
        engine.complete("Something earlier", DecodeConfig(max_tokens=2))
        chunks: list[PrefillChunk] = []
        engine.subscribe(lambda event: chunks.append(event) if isinstance(event, PrefillChunk) else None)
        scored = engine.score("The capital of France is")
        assert [(c.turn, c.stage, c.start, c.done, c.total) for c in chunks] == [
            (0, "prefill", 0, scored.tokens, scored.tokens)]
        assert engine.tape == tuple(engine.session.tokens) and len(engine.tape) == scored.tokens
        turn = engine.complete(" Paris", DecodeConfig(max_tokens=2))
        assert (turn.reused, turn.dropped) == (scored.tokens, 0)
    finally:
        engine.close()
