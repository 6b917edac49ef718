"""The request series, fed hand-made RequestServed events: each request's hit rate, its
conversation, and the drops with the request that caused them."""

from __future__ import annotations

from effctx_core.events.request_series import HitDrop, RequestPoint, RequestSeries, hit_rate
from effctx_core.events.timeline import Timeline
from effctx_core.events.trace import RequestServed


def served(request: str, conversation: str, prompt: int, reused: int, kind: str = "appended", *, turn: int = 1,
           route: str = "resident", status: str = "done") -> RequestServed:
    return RequestServed(request=request, status=status, conversation=conversation, turn=turn, prompt_tokens=prompt,
                         reused=reused, computed=prompt - reused, route=route, ttft_ms=12.5, queue_ms=3.0,
                         divergence={"kind": kind, "at": reused, "segment": None, "sentence": ""})


def series(*events: RequestServed) -> RequestSeries:
    requests = RequestSeries()
    for event in events:
        requests.add(event)
    return requests


def drops(*events: RequestServed) -> list[tuple[str, float | None, str]]:
    return [(d.point.request, d.before, d.why) for d in series(*events).drops()]


def test_a_point_holds_the_requests_figures_and_its_hit_rate():
    requests = series(served("chatcmpl-00000000000000001a2b3c4d", "c1", 200, 150, route="restored"))
    assert requests.points == [RequestPoint(
        number=1, request="chatcmpl-00000000000000001a2b3c4d", conversation="c1", prompt_tokens=200, reused=150,
        computed=50, ttft_ms=12.5, queue_ms=3.0, kind="appended", route="restored")]
    assert (requests.points[0].hit_rate, requests.points[0].short_id) == (0.75, "1a2b3c4d")


def test_a_request_no_turn_served_is_no_point_and_the_next_takes_the_next_number():
    requests = series(served("r1", "c1", 100, 0, "new_conversation"),
                      RequestServed(request="r2", status="failed", error="context_length_exceeded", queue_ms=4.0),
                      RequestServed(request="r3", status="cancelled"),
                      served("r4", "c1", 120, 100, turn=2))
    assert [(p.number, p.request) for p in requests.points] == [(1, "r1"), (2, "r4")]


def test_an_empty_prompt_has_a_hit_rate_of_0():
    assert series(served("r1", "", 0, 0, "")).points[0].hit_rate == 0.0


def test_conversations_come_in_the_order_they_began_with_completions_together():
    requests = series(served("r1", "c1", 100, 0, "new_conversation"), served("r2", "", 50, 0, ""),
                      served("r3", "c2", 80, 0, "new_conversation"), served("r4", "c1", 120, 100),
                      served("r5", "", 50, 40, ""))
    assert {name: [p.request for p in points] for name, points in requests.conversations().items()} == \
        {"c1": ["r1", "r4"], "": ["r2", "r5"], "c2": ["r3"]}


def test_the_hit_rate_of_several_requests_weighs_them_by_their_prompts():
    points = series(served("r1", "c1", 100, 0, "new_conversation"), served("r2", "c1", 300, 280)).points
    assert hit_rate(points) == 0.7


def test_no_requests_have_a_hit_rate_of_0():
    assert hit_rate([]) == 0.0


def test_a_rate_falling_from_0_8_to_below_half_of_it_is_a_drop():
    assert drops(served("r1", "c1", 100, 0, "new_conversation"), served("r2", "c1", 200, 160),
                 served("r3", "c1", 250, 99, route="cold")) == [("r3", 0.8, "appended, route cold")]


def test_a_rate_falling_to_half_of_the_previous_one_is_no_drop():
    assert drops(served("r1", "c1", 100, 90), served("r2", "c1", 200, 90)) == []


def test_a_rate_falling_from_below_0_8_is_no_drop():
    assert drops(served("r1", "c1", 100, 79), served("r2", "c1", 200, 10)) == []


def test_a_divergence_other_than_appended_is_a_drop_whatever_the_rate():
    assert drops(served("r1", "c1", 100, 90), served("r2", "c1", 110, 100, "retokenized")) == \
        [("r2", 0.9, "retokenized")]


def test_a_conversations_first_request_is_compared_with_nothing():
    assert drops(served("r1", "c1", 100, 0, "new_conversation"), served("r2", "c1", 200, 190),
                 served("r3", "c2", 80, 0, "new_conversation"), served("r4", "c1", 220, 210)) == []


def test_the_first_request_of_a_conversation_that_changed_its_system_prompt_is_a_drop():
    assert drops(served("r1", "c1", 100, 12, "system_changed")) == [("r1", None, "system_changed")]


def test_text_completions_are_no_conversation_their_rates_never_drop():
    assert drops(served("r1", "", 100, 90, ""), served("r2", "", 100, 0, "")) == []


def test_drops_come_in_the_order_the_requests_were_served():
    found = series(served("r1", "c1", 100, 90), served("r2", "c2", 100, 90), served("r3", "c2", 100, 5, "tools_changed"),
                   served("r4", "c1", 100, 5, "history_edited")).drops()
    assert [(d.point.number, d.why) for d in found] == [(3, "tools_changed"), (4, "history_edited")]


def test_the_timeline_keeps_the_requests_it_is_fed():
    timeline = Timeline()
    timeline.feed(served("r1", "c1", 100, 0, "new_conversation"))
    timeline.feed(served("r2", "c1", 200, 20, "date_changed", turn=2))
    assert [(p.request, p.hit_rate) for p in timeline.requests.points] == [("r1", 0.0), ("r2", 0.1)]
    assert timeline.requests.drops() == [HitDrop(timeline.requests.points[1], 0.0)]
