"""RequestLog: the endpoint's requests as the events tell them, one row each, in arrival order."""

from __future__ import annotations

from effctx_core.events.requests import RequestLog
from effctx_core.events.trace import PrefillChunk, RequestQueued, RequestRouted, RequestServed, SessionOpened


def served(request: str, **fields) -> RequestServed:
    values = {"status": "done", "conversation": "c1", "turn": 1, "prompt_tokens": 100, "reused": 90, "computed": 10,
              "divergence": {"kind": "appended"}, "stable_computed": 10, **fields}
    return RequestServed(request=request, **values)


def fed(*events) -> RequestLog:
    log = RequestLog()
    for event in events:
        log.feed(event)
    return log


def test_the_wall_time_of_a_request_is_the_session_start_plus_its_arrival():
    log = fed(SessionOpened(backend="llama", model="m", n_ctx=1, identity="x", started=1000.0),
              RequestQueued(request="r1", endpoint="chat", ahead=0, t_ms=2500.0))
    assert log.wall_time(log.rows[0]) == 1002.5


def test_a_prompt_that_left_its_conversation_is_a_miss():
    log = fed(served("r1", divergence={"kind": "system_changed", "at": 3}, stable_computed=10))
    assert (log.rows[0].miss, log.misses) == (True, 1)


def test_an_appended_prompt_that_reused_all_its_conversation_held_is_no_miss():
    assert not fed(served("r1", reused=90, stable_computed=10)).rows[0].miss


def test_an_appended_prompt_that_reused_less_than_its_conversation_held_is_a_miss():
    # the conversation's state was gone: 90 tokens held, only 20 reused
    assert fed(served("r1", reused=20, computed=80, stable_computed=10)).rows[0].miss


def test_a_new_conversation_is_no_miss():
    assert not fed(served("r1", reused=0, computed=100, divergence={"kind": "new_conversation"},
                          stable_computed=None)).rows[0].miss


def test_the_engine_s_own_turns_are_no_requests():
    log = fed(RequestRouted(turn=1, route="resident", shared=0, prompt_tokens=10, request=""),
              PrefillChunk(turn=1, stage="prefill", start=0, tokens=10, done=10, total=10, ms=1.0))
    assert log.rows == []


def test_a_request_that_failed_in_its_turn_is_not_changed_by_the_next_turn_of_that_number():
    log = fed(RequestRouted(turn=4, route="cold", shared=0, prompt_tokens=10, request="r1"),
              RequestServed(request="r1", status="failed", error="the session is poisoned"),
              PrefillChunk(turn=4, stage="prefill", start=0, tokens=10, done=10, total=10, ms=1.0))
    assert (log.rows[0].status, log.rows[0].prefilled) == ("failed", 0)


def test_conversations_are_listed_in_the_order_they_first_appeared():
    log = fed(served("r1", conversation="c2"), served("r2", conversation="c1"), served("r3", conversation="c2"))
    assert log.conversations == ["c2", "c1"]
