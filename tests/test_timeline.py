"""The timeline, fed hand-made engine events: its series and its explanation of each turn."""

from __future__ import annotations

from effctx_core.contract import PrefixCause, describe_prefix
from effctx_core.engine import TurnResult
from effctx_core.events.explain import (
    CACHE_BEHIND,
    EDIT,
    EXTENDS,
    FIRST_TURN,
    NEW_CONVERSATION,
    RESTORED,
    ROLLBACK_LIMIT,
    TAIL_DROPPED,
)
from effctx_core.events.timeline import (
    ChunkPoint,
    Divergence,
    Timeline,
    TokenPoint,
)
from effctx_core.events.trace import (
    NodeRestored,
    PrefillChunk,
    PrefixCacheLookup,
    PrefixChecked,
    ResidencyChanged,
    TokenDecoded,
    TurnFinished,
    TurnStarted,
)


def result(reused: int, prefilled: int, generated: int, resident: int, *, dropped: int = 0, evicted: int = 0,
           ttft_ms: float = 10.0, reason: str = "") -> TurnResult:
    return TurnResult(
        text="", stop_reason="max_tokens", reused=reused, prefilled=prefilled, generated=generated,
        dropped=dropped, evicted=evicted, prefix_reason=reason, ttft_ms=ttft_ms, prefill_ms=1.0,
        decode_ms=1.0, prefill_tps=1.0, decode_tps=1.0, resident=resident, available=4096 - resident, n_ctx=4096,
    )


def turn(n: int, *, prefix: int, new: int, reused: int, dropped: int = 0, cause: PrefixCause = PrefixCause.EXTENDS,
         diverged_at: int | None = None, floor: int | None = None, generated: int = 2, t0: float = 0.0,
         evicted: int = 0) -> list:
    """The events of one turn: the check, the re-prefilled tape (one chunk), the input (one
    chunk), `generated` tokens 5 ms apart and the result."""
    recomputed = prefix - reused
    reason = describe_prefix(cause, diverged_at, floor)
    events = [TurnStarted(turn=n, input_text=f"turn {n}", prefix_tokens=prefix, suffix_tokens=new, t_ms=t0)]
    if recomputed:  # the engine reports these from position 0
        events.append(PrefillChunk(turn=n, stage="prefix", start=0, tokens=recomputed, done=recomputed,
                                   total=recomputed, ms=recomputed / 10, t_ms=t0 + 1))
    events.append(PrefixChecked(turn=n, reused=reused, prefilled=recomputed, dropped=dropped, resident=prefix,
                                reason=reason, cause=cause.value, diverged_at=diverged_at, rollback_floor=floor,
                                t_ms=t0 + 2))
    events.append(PrefillChunk(turn=n, stage="prefill", start=prefix, tokens=new, done=new, total=new,
                               ms=new / 20, t_ms=t0 + 3))
    for i in range(generated):
        events.append(TokenDecoded(turn=n, index=i, token=i, text="x", ms=0.5, t_ms=t0 + 10 + 5 * i))
    resident = prefix + new + generated
    events.append(TurnFinished(turn=n, result=result(reused, recomputed + new, generated, resident, dropped=dropped,
                                                     evicted=evicted, ttft_ms=8.0 + n, reason=reason),
                               t_ms=t0 + 10 + 5 * generated))
    return events


def fed(*events_lists, **kwargs) -> Timeline:
    timeline = Timeline(**kwargs)
    for events in events_lists:
        for event in events if isinstance(events, list) else [events]:
            timeline.feed(event)
    return timeline


# ---------------------------------------------------------------------- series


def test_prefill_chunks_are_kept_with_their_position_and_speed():
    timeline = fed(turn(1, prefix=0, new=40, reused=0, cause=PrefixCause.EMPTY),
                   turn(2, prefix=42, new=20, reused=10, dropped=32, cause=PrefixCause.DIVERGED, diverged_at=10))
    assert timeline.chunks() == [
        ChunkPoint(1, "prefill", 0, 40, 2.0),
        # re-prefilled from where the reuse ended, not from 0 as the engine reports it
        ChunkPoint(2, "prefix", 10, 32, 3.2),
        ChunkPoint(2, "prefill", 42, 20, 1.0),
    ]
    assert [c.tps for c in timeline.chunks()] == [20_000.0, 10_000.0, 20_000.0]


def test_ttft_per_turn_and_decode_gaps_between_tokens_of_a_turn():
    timeline = fed(turn(1, prefix=0, new=4, reused=0, generated=3, cause=PrefixCause.EMPTY),
                   turn(2, prefix=7, new=4, reused=7, generated=2, t0=100.0))
    assert timeline.ttft() == [(1, 9.0), (2, 10.0)]
    # the first token of a turn has no gap: its wait is the TTFT
    assert timeline.token_gaps() == [TokenPoint(1, 1, 5.0), TokenPoint(1, 2, 5.0), TokenPoint(2, 4, 5.0)]


def test_resident_tokens_over_time_follow_chunks_tokens_results_and_residency():
    timeline = fed(turn(1, prefix=0, new=4, reused=0, generated=2, cause=PrefixCause.EMPTY),
                   ResidencyChanged(turn=1, report={"resident_tokens": 3}, t_ms=30.0))
    assert timeline.resident == [(2.0, 0), (3.0, 4), (10.0, 5), (15.0, 6), (20.0, 6), (30.0, 3)]


def test_a_prefill_outside_a_turn_is_a_speed_sample_but_no_turn_cost():
    timeline = fed(PrefillChunk(turn=0, stage="prefill", start=0, tokens=100, done=100, total=100, ms=50.0))
    assert timeline.chunks() == [ChunkPoint(0, "prefill", 0, 100, 50.0)]
    assert timeline.records() == []


# ---------------------------------------------------------------------- explanations


def test_the_first_turn_computes_everything():
    e = fed(turn(1, prefix=0, new=13, reused=0, cause=PrefixCause.EMPTY)).explain(1)
    assert (e.cause, e.reused, e.computed, e.dropped, e.diverged_at) == (FIRST_TURN, 0, 13, 0, None)
    assert e.detail == "nothing was resident: all 13 tokens computed"


def test_a_follow_up_turn_reuses_everything_and_computes_only_its_input():
    e = fed(turn(1, prefix=0, new=13, reused=0, cause=PrefixCause.EMPTY), turn(2, prefix=15, new=9, reused=15)).explain(2)
    assert (e.cause, e.reused, e.computed, e.recomputed) == (EXTENDS, 15, 9, 0)
    assert e.detail == "all 15 resident tokens reused; only the 9 new tokens computed"


def test_one_token_is_singular_and_a_count_has_thousands_separators():
    first = turn(1, prefix=0, new=1, reused=0, generated=0, cause=PrefixCause.EMPTY)
    assert fed(first).explain(1).detail == "nothing was resident: 1 token computed"
    e = fed(turn(1, prefix=0, new=1500, reused=0, cause=PrefixCause.EMPTY), turn(2, prefix=1500, new=1, reused=1500)).explain(2)
    assert e.detail == "all 1,500 resident tokens reused; only the 1 new token computed"
    e = fed(turn(3, prefix=0, new=8, reused=0, dropped=1, cause=PrefixCause.DIVERGED, diverged_at=0)).explain(3)
    assert e.detail == "the 1 resident token was dropped; 8 computed"


def test_an_edit_inside_the_earlier_turns_names_the_token_and_shows_the_text_around_it():
    letters = lambda tokens: "".join(chr(ord("a") + t) for t in tokens)  # noqa: E731
    tape = list(range(12))  # "abcdefghijkl"
    timeline = Timeline(detokenize=letters, tape=lambda: tape)
    for event in turn(1, prefix=0, new=12, reused=0, generated=0, cause=PrefixCause.EMPTY):
        timeline.feed(event)
    tape = [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 25, 25, 25, 25]  # the edit: "...j" then "zzzz"
    for event in turn(2, prefix=12, new=2, reused=10, dropped=2, generated=0,
                      cause=PrefixCause.DIVERGED, diverged_at=10):
        timeline.feed(event)
    e = timeline.explain(2)
    assert (e.cause, e.reused, e.computed, e.recomputed, e.dropped, e.diverged_at) == (EDIT, 10, 4, 2, 2, 10)
    assert e.detail == ("the prompt diverged from the resident tape at token 10: 2 dropped, "
                        "2 earlier tokens re-prefilled and 2 new computed; 10 reused")
    assert e.divergence == Divergence(before="cdefghij", old="kl", new="zzzz")


def test_a_rollback_limit_refusal_reads_the_divergence_and_the_limit_from_the_check():
    e = fed(turn(4, prefix=600, new=10, reused=0, dropped=700, cause=PrefixCause.ROLLBACK_LIMIT, diverged_at=300,
                 floor=512)).explain(4)
    assert (e.cause, e.reused, e.computed, e.recomputed, e.dropped, e.diverged_at) == (ROLLBACK_LIMIT, 0, 610, 600, 700, 300)
    assert e.detail == ("diverged at token 300, before the cache can be cut back "
                        "(the earliest cut is token 512): 700 dropped and the whole tape re-prefilled; 0 reused, 610 computed")


def test_a_restart_from_a_state_the_backend_kept_reads_where_it_restarted_from_the_check():
    e = fed(turn(4, prefix=600, new=10, reused=512, dropped=188, cause=PrefixCause.RESTORED, diverged_at=550,
                 floor=1536)).explain(4)
    assert (e.cause, e.reused, e.computed, e.recomputed, e.dropped, e.diverged_at) == (ROLLBACK_LIMIT, 512, 98, 88, 188, 550)
    assert e.detail == ("diverged at token 550, before the cache can be cut back (the earliest cut is token 1,536): "
                        "restarted from the state the backend kept at token 512, 188 dropped and 88 re-prefilled; "
                        "512 reused, 98 computed")


def test_a_new_conversation_drops_what_was_resident():
    e = fed(turn(3, prefix=0, new=8, reused=0, dropped=30, cause=PrefixCause.DIVERGED, diverged_at=0)).explain(3)
    assert (e.cause, e.diverged_at) == (NEW_CONVERSATION, 0)
    assert e.detail == "the 30 resident tokens were dropped; 8 computed"


def test_a_stop_text_left_past_the_tape_is_dropped_without_recomputing():
    e = fed(turn(2, prefix=20, new=5, reused=20, dropped=3, cause=PrefixCause.DIVERGED, diverged_at=20)).explain(2)
    assert (e.cause, e.reused, e.computed, e.diverged_at) == (TAIL_DROPPED, 20, 5, 20)
    assert e.detail == ("the cache held 3 tokens past the tape (a stop text or the end of a stopped reply), "
                        "dropped; 20 reused, 5 computed")


def test_a_turn_after_a_restore_names_the_restored_node_with_its_cost():
    restore = NodeRestored(node="n3", mode="recompute", tokens=20, recomputed=20, ms=12.25,
                           reason="the node has no saved state")
    e = fed(turn(1, prefix=0, new=30, reused=0, cause=PrefixCause.EMPTY), restore, turn(2, prefix=20, new=5, reused=20)).explain(2)
    assert e.cause == RESTORED
    assert e.detail == ("node n3 was restored before this turn (recompute, 20 of 20 tokens recomputed in 12 ms: "
                        "the node has no saved state); then 20 reused, 5 computed")


def test_the_first_turn_after_a_prefix_cache_lookup_names_the_hit():
    lookup = PrefixCacheLookup(result="hit", tokens=100, ms=3.25, key="k", message="")
    e = fed(lookup, turn(1, prefix=100, new=7, reused=100)).explain(1)
    assert e.cause == "prefix cache hit"
    assert e.detail == "the stable prefix of 100 tokens was restored from the prefix cache in 3.2 ms; then 100 reused, 7 computed"
    # the lookup explains only the turn that followed it
    assert fed(lookup, turn(1, prefix=100, new=7, reused=100), turn(2, prefix=109, new=3, reused=109)).explain(2).cause == EXTENDS


def test_a_cache_that_holds_less_than_the_tape_re_prefills_the_rest():
    e = fed(turn(2, prefix=20, new=5, reused=12, cause=PrefixCause.EXTENDS)).explain(2)
    assert (e.cause, e.recomputed, e.computed) == (CACHE_BEHIND, 8, 13)
    assert e.detail == "the cache held 12 of the 20 tape tokens: 8 re-prefilled and 5 new computed"


def test_a_turn_is_explained_once_its_prefix_is_checked():
    timeline = fed(TurnStarted(turn=1, input_text="hi", prefix_tokens=0, suffix_tokens=3))
    assert timeline.explain(1) is None
    timeline.feed(PrefixChecked(turn=1, reused=0, prefilled=0, dropped=0, resident=0, reason="empty cache",
                                cause=PrefixCause.EMPTY.value))
    assert timeline.explain(1).computed == 0  # nothing measured yet
    assert timeline.explain(7) is None
