"""SessionEngine turns on the real default model: reuse, accounting, events, trace."""

from __future__ import annotations

import json

import pytest

from effctx_core.contract import DecodeConfig
from effctx_core.engine import SessionEngine
from effctx_core.errors import ContextOverflowError, EffctxError
from effctx_core.events.reader import read_trace
from effctx_core.events.timeline import Timeline
from effctx_core.events.trace import TurnFinished
from effctx_core.profiles import Profile

PROFILE = Profile(name="engine-test", n_ctx=1024)


@pytest.fixture
def engine(default_model, tmp_path):
    eng = SessionEngine(default_model, PROFILE, trace_path=tmp_path / "trace.jsonl")
    eng.open()
    yield eng
    eng.close()


def test_a_second_turn_reuses_the_whole_first_turn(engine):
    first = engine.complete("The capital of France is", DecodeConfig(max_tokens=6))
    tape_after_first = len(engine.tape)
    second_text = " The capital of Italy is"
    new_tokens = len(engine.session.tokenize(second_text, add_bos=False))
    second = engine.complete(second_text, DecodeConfig(max_tokens=6))
    assert first.generated == 6
    assert tape_after_first == first.prefilled + first.generated
    assert (second.reused, second.prefilled, second.dropped) == (tape_after_first, new_tokens, 0)
    # The reply's last token is on the tape, not yet in the cache (see the test below).
    assert second.resident + 1 == tape_after_first + new_tokens + second.generated == len(engine.tape)


def test_a_reply_cut_at_max_tokens_leaves_its_last_token_for_the_next_turns_batch(engine):
    # As llama-cpp-python's own completion does: a token no one may continue is not
    # evaluated on its own; the next turn's input batch takes it at almost no cost.
    first = engine.complete("The capital of France is", DecodeConfig(max_tokens=6))
    after_first = engine.explain()
    engine.complete(" The capital of Italy is", DecodeConfig(max_tokens=6))
    after_second = engine.explain()
    assert first.stop_reason == "max_tokens"
    assert (after_first.decode_calls, after_first.decode_tokens, after_first.pending_tokens) == (5, 5, 1)
    # One prefill call for the pending token and the new input, the token counted as the
    # decode step it is; then the second reply's own 5 steps.
    assert after_second.prefill_calls - after_first.prefill_calls == 1
    assert after_second.decode_tokens - after_first.decode_tokens == 1 + 5


def test_a_reply_that_opens_the_next_turn_keeps_the_opening_and_the_next_turn_goes_on_from_it(engine):
    first = engine.chat("What is the capital of France?", DecodeConfig(max_tokens=24))
    kept = engine.tape
    cached = list(engine.session.tokens)
    second = engine.chat("And of Italy?", DecodeConfig(max_tokens=8))
    assert cached == list(kept)  # the opening is on the session's tape, its last token pending
    assert first.stop_reason == "stop" and "\nUser:" not in first.text
    assert engine.detokenize(kept).endswith(first.text + "\nUser:")
    assert (second.reused, second.dropped) == (len(kept), 0)
    assert engine.detokenize(engine.tape).startswith(
        f"User: What is the capital of France?\nAssistant:{first.text}\nUser: And of Italy?\nAssistant:")


def test_a_reply_that_goes_on_into_a_made_up_assistant_turn_stops_at_its_label(engine):
    # Greedy, the base model answers this by playing both sides: its reply repeats the
    # request, invents a "Student:" line and then writes "Assistant:" again.
    result = engine.chat("I need help with my homework.", DecodeConfig(max_tokens=60))
    assert (result.stop_reason, result.text) == (
        "stop", " I need help with my homework.\nStudent: I need help with my homework.")
    assert engine.detokenize(engine.tape).endswith("\nAssistant:" + result.text)


def test_a_stop_text_that_is_not_the_turn_opening_is_dropped_from_the_tape(engine):
    first = engine.complete("Count: one, two,", DecodeConfig(max_tokens=16, stop=(", four",)))
    kept = len(engine.tape)
    second = engine.complete(" and so on", DecodeConfig(max_tokens=2))
    assert (first.stop_reason, first.text) == ("stop", " three")
    assert engine.detokenize(engine.tape[:kept]) == "Count: one, two, three"
    # "," was evaluated before " four" was sampled: the cache held it past the tape
    assert (second.reused, second.dropped) == (kept, 1)


def test_turn_figures_are_consistent(engine):
    result = engine.complete("Once upon a time", DecodeConfig(max_tokens=8))
    assert result.ttft_ms >= result.prefill_ms > 0
    assert result.prefill_tps == pytest.approx(result.prefilled / (result.prefill_ms / 1000))
    assert result.decode_tps == pytest.approx(result.generated / (result.decode_ms / 1000))
    assert result.available == result.n_ctx - result.resident


def test_a_prompt_longer_than_the_context_is_refused_and_the_engine_goes_on(engine):
    with pytest.raises(ContextOverflowError) as err:
        engine.complete("word " * 1100, DecodeConfig(max_tokens=4))
    assert err.value.n_ctx == 1024 and err.value.resident == 0
    assert engine.complete("Hello", DecodeConfig(max_tokens=2)).generated == 2


def test_every_step_is_an_event_in_the_trace(engine, tmp_path):
    seen = []
    engine.subscribe(seen.append)
    result = engine.complete("The sky is", DecodeConfig(max_tokens=3))
    engine.close()
    kinds = [e.kind for e in seen]
    assert kinds == ["turn_started", "prefix_checked", "prefill_chunk", "token", "token", "token", "turn_finished", "node"]
    lines = [json.loads(line) for line in (tmp_path / "trace.jsonl").read_text().splitlines()]
    assert [line["kind"] for line in lines] == ["session_opened"] + kinds
    assert lines[-2]["result"]["text"] == result.text
    assert "".join(line["text"] for line in lines if line["kind"] == "token") == result.text


def test_restore_brings_back_the_tape(engine):
    engine.complete("The capital of France is", DecodeConfig(max_tokens=4))
    snap = engine.snapshot()
    first = engine.complete(" Then", DecodeConfig(max_tokens=8)).text
    engine.restore(snap)
    assert (engine.tape, snap.tape, len(snap.pending)) == (snap.tokens + snap.pending, engine.tape, 1)
    assert engine.complete(" Then", DecodeConfig(max_tokens=8)).text == first


def test_a_new_conversation_drops_the_old_one_at_its_first_turn_but_the_bos_they_share(engine):
    engine.complete("The capital of France is", DecodeConfig(max_tokens=4))
    old = engine.explain().resident_tokens
    engine.reset()
    result = engine.complete("Once upon a time", DecodeConfig(max_tokens=2))
    assert (result.reused, result.dropped) == (1, old - 1)
    assert engine.detokenize(engine.tape).startswith("Once upon a time")


def test_a_new_conversation_keeps_the_start_it_shares_with_the_old_one(engine):
    engine.reset()
    engine.complete("The capital of France is Paris. The capital of Italy is", DecodeConfig(max_tokens=4))
    old = engine.explain().resident_tokens
    engine.reset()
    shared = engine.session.tokenize("The capital of France is Paris.", add_bos=True)
    result = engine.complete("The capital of France is Paris. The capital of Spain is", DecodeConfig(max_tokens=2))
    assert result.reused >= len(shared) and result.reused + result.prefilled == len(
        engine.session.tokenize("The capital of France is Paris. The capital of Spain is", add_bos=True))
    assert result.dropped == old - result.reused and result.prefix_cause == "diverged"


def test_cancel_stops_a_prefill_between_chunks_and_the_next_turn_drops_the_part_done(engine):
    unsubscribe = engine.subscribe(lambda e: engine.cancel() if e.kind == "prefill_chunk" else None)
    result = engine.complete("The grass is green. " * 150, DecodeConfig(max_tokens=4))
    assert (result.stop_reason, result.generated, result.prefilled) == ("cancelled", 0, 512)
    assert engine.tape == () and engine.explain().resident_tokens == 512
    unsubscribe()
    after = engine.complete("Hello", DecodeConfig(max_tokens=2))
    assert (after.reused, after.dropped) == (0, 512)


def test_a_turn_cancelled_in_its_prefill_has_no_ttft_in_its_result_trace_or_timeline(engine, tmp_path):
    engine.subscribe(lambda e: engine.cancel() if e.kind == "prefill_chunk" else None)
    result = engine.complete("The grass is green. " * 150, DecodeConfig(max_tokens=4))
    assert (result.stop_reason, result.generated, result.ttft_ms) == ("cancelled", 0, None)
    assert result.prefill_ms > 0  # the time it took is the prefill's, not a time to a token
    events = read_trace(tmp_path / "trace.jsonl").events
    assert [e.result.ttft_ms for e in events if isinstance(e, TurnFinished)] == [None]
    timeline = Timeline()
    for event in events:
        timeline.feed(event)
    assert (timeline.turns[1].ttft_ms, timeline.ttft()) == (None, [])


def test_a_turn_asked_for_no_token_has_no_ttft_and_neither_has_its_node(engine):
    result = engine.complete("The capital of France is", DecodeConfig(max_tokens=0))
    assert (result.stop_reason, result.generated, result.ttft_ms) == ("max_tokens", 0, None)
    node = engine.tree.node(engine.tree.current)
    assert (node.kind, node.metrics["generated"], node.metrics["ttft_ms"]) == ("turn", 0, None)


def test_a_stop_text_inside_a_token_keeps_the_reply_text_before_it(engine):
    result = engine.complete("Count: one, two,", DecodeConfig(max_tokens=16, stop=("ree,",)))
    assert (result.stop_reason, result.text) == ("stop", " th")
    assert engine.detokenize(engine.tape) == "Count: one, two,"  # " three" straddles the stop: not kept


def test_an_error_before_the_turn_starts_is_an_event_too(default_model):
    engine = SessionEngine(default_model)  # never opened
    seen = []
    engine.subscribe(seen.append)
    with pytest.raises(EffctxError, match="no open session"):
        engine.chat("Hello")
    assert [(e.kind, e.error) for e in seen] == [("error", "EffctxError")]


def test_a_cold_reset_empties_the_session_at_once_and_the_next_turn_reuses_nothing(engine):
    engine.complete("The capital of France is", DecodeConfig(max_tokens=4))
    engine.reset(keep_shared=False)
    assert engine.session.tokens == ()
    again = engine.complete("The capital of France is", DecodeConfig(max_tokens=4))
    assert (again.reused, again.dropped) == (0, 0) and again.prefilled == len(engine.tape) - again.generated


def test_a_reset_that_keeps_what_is_shared_leaves_the_session_until_the_next_turn(engine):
    first = engine.complete("The capital of France is", DecodeConfig(max_tokens=4))
    engine.reset()
    assert len(engine.session.tokens) == first.prefilled + first.generated
    again = engine.complete("The capital of France is", DecodeConfig(max_tokens=4))
    assert again.reused == first.prefilled - 1  # all but the last prompt token, whose logits start the reply
