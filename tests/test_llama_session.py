"""The session contract on the real llama.cpp backend and the default model."""

from __future__ import annotations

import pytest

from effctx_core.backends.llama import session as llama_session
from effctx_core.backends.llama.backend import LlamaBackend
from effctx_core.backends.llama.settings import LlamaOptions
from effctx_core.contract import DecodeConfig, PrefixCause, SessionSnapshot
from effctx_core.errors import ContextOverflowError, SessionFatalError
from effctx_core.identity import IdentityMismatchError
from effctx_core.profiles import Profile
from effctx_core.residency.config import ResidencyConfig

EXACT = Profile(name="exact-test", n_ctx=2048, backend_options=LlamaOptions(flash_attn=False, swa_full=True))
PROMPT = "The capital of France is Paris. The capital of Italy is Rome. The capital of Spain is"


@pytest.fixture(scope="module")
def backend() -> LlamaBackend:
    return LlamaBackend()


@pytest.fixture
def open_session(backend, default_model):
    opened = []

    def open_(profile: Profile = EXACT):
        session = backend.open(default_model, profile)
        opened.append(session)
        return session

    yield open_
    for session in opened:
        session.close()


def greedy(session, n: int = 8) -> list[int]:
    return [c.token for c in session.decode(DecodeConfig(max_tokens=n)) if c.stop_reason != "eog"]


def prompt_tokens(session, text: str = PROMPT) -> list[int]:
    return session.tokenize(text, add_bos=True)


def filler(session, n_tokens: int) -> list[int]:
    sentence = session.tokenize(" The grass is green. The sky is blue. The sun is yellow.", add_bos=False)
    toks = prompt_tokens(session, "Notes:")
    while len(toks) < n_tokens:
        toks += sentence
    return toks[:n_tokens]


def test_prefill_then_decode_keeps_every_token_on_the_tape_the_last_one_pending(open_session):
    s = open_session()
    toks = prompt_tokens(s)
    status = s.prefill_suffix(toks)
    out = greedy(s, 6)
    report = s.explain()
    assert status.prefilled == len(toks)
    assert len(out) == 6
    # The reply's last token is not evaluated on its own: the next prefill's batch takes it.
    assert (report.resident_tokens, report.pending_tokens, report.decode_calls) == (len(toks) + 5, 1, 5)
    assert s.tokens == tuple(toks + out)


def test_ensure_prefix_reuses_an_extended_tape(open_session):
    s = open_session()
    first = prompt_tokens(s)
    s.ensure_prefix(first)
    more = first + s.tokenize(" Madrid. The capital of Portugal is", add_bos=False)
    status = s.ensure_prefix(more)
    assert (status.reused, status.prefilled, status.dropped) == (len(first), len(more) - len(first), 0)
    assert status.reason == "extends the resident tape"
    assert status.resident == len(more)


def test_ensure_prefix_drops_the_divergent_tail_and_continues_like_a_fresh_session(open_session):
    s = open_session()
    base = prompt_tokens(s)
    s.ensure_prefix(base + s.tokenize(" Madrid. The capital of Germany is", add_bos=False))
    greedy(s, 4)
    edited = base + s.tokenize(" Madrid. The capital of Portugal is", add_bos=False)
    shared = next(i for i, (a, b) in enumerate(zip(s.tokens, edited)) if a != b)
    before = s.explain().resident_tokens  # the cache's tokens: the reply's last one was pending
    status = s.ensure_prefix(edited)
    assert (status.reused, status.prefilled, status.dropped) == (shared, len(edited) - shared, before - shared)
    assert status.reason == f"diverges from the resident tape at token {shared}"
    fresh = open_session()
    fresh.ensure_prefix(edited)
    assert greedy(s) == greedy(fresh)


def test_snapshot_restore_reproduces_the_continuation_exactly(open_session):
    s = open_session()
    s.prefill_suffix(filler(s, 700))
    snap = s.snapshot()
    first = greedy(s, 16)
    greedy(s, 8)  # move on, so the restore has something to undo
    s.restore(snap)
    assert s.tokens == snap.tokens
    assert greedy(s, 16) == first


def test_restore_into_another_kv_type_is_refused_and_the_session_stays_usable(open_session):
    f16 = open_session()
    f16.prefill_suffix(prompt_tokens(f16))
    snap = f16.snapshot()
    q8 = open_session(EXACT.with_changes(name="q8k", kv_cache_type_k="q8_0"))
    own = prompt_tokens(q8, "Once upon a time")
    q8.prefill_suffix(own)
    with pytest.raises(IdentityMismatchError) as err:
        q8.restore(snap)
    assert "kv_cache_type_k 'q8_0' != 'f16'" in str(err.value)
    assert q8.tokens == tuple(own)
    assert len(greedy(q8, 4)) == 4
    assert q8.explain().resident_tokens + q8.explain().pending_tokens == len(own) + 4


def test_overflow_is_a_typed_error_with_numbers_and_the_session_stays_usable(open_session):
    s = open_session(EXACT.with_changes(n_ctx=256))
    toks = filler(s, 200)
    s.prefill_suffix(toks)
    with pytest.raises(ContextOverflowError) as err:
        s.prefill_suffix(filler(s, 100)[1:])
    e = err.value
    assert (e.stage, e.resident, e.additional, e.n_ctx) == ("prefill", 200, 99, 256)
    assert s.explain().resident_tokens == 200
    assert len(greedy(s, 4)) == 4


def test_a_prefix_longer_than_the_context_is_refused_before_touching_the_cache(open_session):
    s = open_session(EXACT.with_changes(n_ctx=256))
    toks = prompt_tokens(s)
    s.prefill_suffix(toks)
    with pytest.raises(ContextOverflowError) as err:
        s.ensure_prefix(filler(s, 300))
    assert (err.value.stage, err.value.additional, err.value.n_ctx) == ("prefix", 300, 256)
    assert s.tokens == tuple(toks)


def test_decode_stops_with_n_ctx_when_the_cache_is_full(open_session):
    s = open_session(EXACT.with_changes(n_ctx=256))
    s.prefill_suffix(filler(s, 250))
    chunks = list(s.decode(DecodeConfig(max_tokens=20)))
    assert [c.stop_reason for c in chunks] == [None] * 5 + ["n_ctx"]
    # The last one is pending in the context's last slot, for the next prefill to evaluate.
    assert (s.explain().resident_tokens, s.explain().pending_tokens) == (255, 1)


def test_rollback_below_the_sliding_window_reprefills_and_says_why(open_session):
    s = open_session(EXACT.with_changes(name="swa-small", swa_full=False))
    long = filler(s, 1400)
    s.ensure_prefix(long)
    limit = s.rollback_limit()
    assert 512 <= limit < 1400
    near = s.ensure_prefix(long[:1390])
    assert (near.reused, near.prefilled, near.dropped) == (1390, 0, 10)
    edited = long[:100] + s.tokenize(" Something else entirely.", add_bos=False)
    far = s.ensure_prefix(edited)
    assert (far.reused, far.prefilled) == (0, len(edited))
    assert (far.cause, far.diverged_at, far.rollback_floor) == (PrefixCause.ROLLBACK_LIMIT, 100, limit)
    fresh = open_session(EXACT.with_changes(name="swa-small", swa_full=False))
    fresh.ensure_prefix(edited)
    assert greedy(s) == greedy(fresh)


def test_a_restored_state_cannot_be_cut_back_inside_its_window(open_session):
    s = open_session()
    toks = filler(s, 800)
    s.prefill_suffix(toks)
    snap = s.snapshot()
    other = open_session()
    other.restore(snap)
    assert other.rollback_limit() == 800
    status = other.ensure_prefix(toks[:700])
    assert (status.reused, status.prefilled) == (0, 700)
    assert (status.cause, status.diverged_at, status.rollback_floor) == (PrefixCause.ROLLBACK_LIMIT, 700, 800)


def test_a_chunk_of_input_starts_from_the_windowed_layers_cut_to_their_window_once_they_hold_half_more(open_session):
    s = open_session()
    toks = filler(s, 769)
    s.prefill_suffix(toks[:767])
    s.prefill_suffix(toks[767:768])
    assert s.rollback_limit() == 0  # swa_full holds every position while they are under 768
    s.prefill_suffix(toks[768:])
    # The chunk began from the state loaded back: the windowed layers hold the last 512
    # positions before it, so the cut back to it is the earliest exact one.
    assert s.rollback_limit() == 768


def test_a_decoded_reply_keeps_every_windowed_position_so_the_turn_stays_cuttable(open_session):
    s = open_session()
    toks = filler(s, 1020)
    s.prefill_suffix(toks)
    greedy(s, 12)
    assert s.rollback_limit() == 0
    assert s.ensure_prefix(toks[:1000]).reused == 1000


def test_a_prefill_whose_windows_were_cut_continues_exactly_as_a_session_restored_where_they_were(open_session):
    s = open_session()
    toks = filler(s, 1100)
    s.prefill_suffix(toks[:1024])
    restored = open_session()
    restored.restore(s.snapshot())
    s.prefill_suffix(toks[1024:])
    restored.prefill_suffix(toks[1024:])
    assert s.snapshot().logits == restored.snapshot().logits


def test_a_cut_below_the_rollback_floor_restarts_from_the_state_kept_at_a_chunk_start(open_session):
    s = open_session()
    toks = filler(s, 1600)
    s.prefill_suffix(toks)  # its chunks start at 0, 512, 1,024 and 1,536; the last two cut the windows
    assert (s.rollback_limit(), s.explain().restart_points) == (1536, (512, 1024))
    status = s.ensure_prefix(toks[:700])
    assert (status.reused, status.prefilled, status.dropped) == (512, 188, 1088)
    assert (status.cause, status.diverged_at, status.rollback_floor) == (PrefixCause.RESTORED, 700, 1536)
    assert status.reason == ("rollback limit: the cache can be cut back to 1536 tokens at the earliest, the prefix "
                             "diverges at 700; restarted from a state the backend kept")
    fresh = open_session()
    fresh.ensure_prefix(toks[:700])
    assert greedy(s, 8) == greedy(fresh, 8)


def test_a_cut_below_the_first_kept_state_reprefills_from_the_start_and_says_why(open_session):
    s = open_session()
    toks = filler(s, 1100)
    s.prefill_suffix(toks)
    status = s.ensure_prefix(toks[:300])
    assert (status.reused, status.prefilled, status.dropped) == (0, 300, 1100)
    assert (status.cause, status.diverged_at, status.rollback_floor) == (PrefixCause.ROLLBACK_LIMIT, 300, 1024)


def test_the_kept_states_stay_within_their_memory_budget(open_session, monkeypatch):
    monkeypatch.setattr(llama_session, "ANCHOR_BYTES", 30 << 20)  # the states at 512 to 2,560 take 60 MiB
    s = open_session(EXACT.with_changes(n_ctx=3072))
    toks = filler(s, 2600)
    s.prefill_suffix(toks)
    # Over the budget the state whose loss leaves the shortest span without one goes.
    assert (s.rollback_limit(), s.explain().restart_points) == (2560, (1024,))
    assert s.ensure_prefix(toks[:2100]).reused == 1024


def test_a_failed_state_load_poisons_the_session_until_reopened(open_session):
    s = open_session()
    s.prefill_suffix(prompt_tokens(s))
    good = s.snapshot()
    bad = SessionSnapshot(good.identity, good.tokens, good.state[: len(good.state) // 2])
    with pytest.raises(SessionFatalError):
        s.restore(bad)
    assert s.explain().poisoned
    with pytest.raises(SessionFatalError, match="poisoned"):
        s.prefill_suffix(prompt_tokens(s))
    reopened = open_session()
    reopened.restore(good)
    assert len(greedy(reopened, 4)) == 4


def test_sampling_with_a_seed_is_repeatable(open_session):
    s = open_session()
    s.prefill_suffix(prompt_tokens(s))
    snap = s.snapshot()
    cfg = DecodeConfig(max_tokens=8, temperature=0.9, top_p=0.95, seed=7)
    a = [c.token for c in s.decode(cfg)]
    s.restore(snap)
    b = [c.token for c in s.decode(cfg)]
    assert a == b


def test_capabilities_report_what_the_context_can_do(open_session):
    full = open_session().info.capabilities
    windowed = open_session(EXACT.with_changes(name="w", swa_full=False, flash_attn=True)).info.capabilities
    def flags(caps):
        return (caps.position_shift.supported, caps.quantized_v.supported, caps.exact_snapshot.supported,
                caps.rollback_floor)

    assert flags(full) == (True, False, True, 512)
    assert full.rollback_reason == (
        "swa_full holds every windowed position until there are 768; the next chunk of input then reloads the "
        "session's state, which keeps the last 512; a cut further back restarts from a state kept at a chunk start "
        "(256 MiB of them at most)")
    assert flags(windowed) == (False, True, False, 512)
    assert not full.attention_scores.supported and full.state_snapshot.supported


UNTRIMMED = {
    # An evicting policy shifts positions, which needs every windowed position.
    "a shifting policy": {"residency": ResidencyConfig(policy="streaming", sink_tokens=4, recent_tokens=1020,
                                                       budget=1024, block_size=4)},
    "trim_windows off": {"trim_windows": False},
    # ggml's flash-attention kernel skips masked cells itself: a trim would buy nothing.
    "flash attention": {"flash_attn": True},
}


@pytest.mark.parametrize("changes", UNTRIMMED.values(), ids=UNTRIMMED.keys())
def test_swa_full_keeps_every_windowed_position_with(open_session, changes):
    s = open_session(EXACT.with_changes(name="untrimmed", **changes))
    assert (s.info.capabilities.rollback_floor, s.info.capabilities.rollback_reason) == (
        None, "swa_full keeps every sliding-window position")
    s.prefill_suffix(filler(s, 1100))
    s.prefill_suffix(s.tokenize(" What colour is the sky?", add_bos=False))
    assert s.rollback_limit() == 0


def test_a_snapshot_without_logits_recomputes_the_last_position(open_session):
    s = open_session()
    s.prefill_suffix(filler(s, 300))
    snap = s.snapshot()
    expected = greedy(s, 8)
    bare = SessionSnapshot(snap.identity, snap.tokens, snap.state, logits=None)
    other = open_session()
    other.restore(bare)
    assert other.explain().resident_tokens == 300
    assert greedy(other, 8) == expected
