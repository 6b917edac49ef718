"""Request series: what an endpoint's requests did with the cache, request by request.

Fed RequestServed events in order (`add`), it keeps one point per request an engine turn
served: its cache hit rate (reused / prompt tokens), what it computed and how long its
first token took, how long it waited in the queue. It groups them by conversation and
finds the drops: the requests that threw away much of what their conversation had built,
and the one thing that says why (the divergence kind). Pure data, no UI: the timings
screen draws it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

from effctx_core.events.trace import RequestServed

# The divergence kinds of a conversation going on as it should: only new messages, or a
# first request. Any other kind (system_changed, tools_changed…) is a drop whatever the
# rate, since the client changed what the cache held.
EXPECTED_KINDS = frozenset({"appended", "new_conversation"})
# A rate this high means the conversation was being reused well…
HIGH_RATE = 0.8
# …and falling below this share of it is no longer noise: most of it was recomputed.
DROP_SHARE = 0.5


@dataclass(frozen=True)
class RequestPoint:
    number: int  # 1, 2, … in the order the requests were served: the charts' x
    request: str  # the endpoint's id
    conversation: str  # "" for a text completion
    prompt_tokens: int
    reused: int
    computed: int
    ttft_ms: float | None  # None when no token arrived
    queue_ms: float
    kind: str  # the divergence kind, "" when none was reported (a text completion)
    route: str  # where it started: resident, restored, prefix_cache, cold

    @property
    def hit_rate(self) -> float:
        """Reused over prompt tokens; 0 for an empty prompt, which reused nothing."""
        return self.reused / self.prompt_tokens if self.prompt_tokens else 0.0

    @property
    def short_id(self) -> str:
        # the id's tail, as the endpoint's log line names the request
        return self.request[-8:]


@dataclass(frozen=True)
class HitDrop:
    point: RequestPoint
    before: float | None  # the conversation's previous hit rate (None: its first request)

    @property
    def why(self) -> str:
        """The divergence kind; for a kind that explains no drop (only appended messages,
        yet most was recomputed) the route says where the request had to start from."""
        if self.point.kind in EXPECTED_KINDS:
            return f"{self.point.kind}, route {self.point.route}"
        return self.point.kind


def hit_rate(points: Sequence[RequestPoint]) -> float:
    """Reused over prompt tokens of all `points` together; 0 when they had no prompt."""
    prompt = sum(p.prompt_tokens for p in points)
    return sum(p.reused for p in points) / prompt if prompt else 0.0


@dataclass
class RequestSeries:
    points: list[RequestPoint] = field(default_factory=list)

    def add(self, event: RequestServed) -> None:
        # Turn 0: no turn ran (failed, or cancelled while it waited), so nothing was reused
        # or computed to show.
        if event.turn == 0:
            return
        self.points.append(RequestPoint(
            number=len(self.points) + 1, request=event.request, conversation=event.conversation,
            prompt_tokens=event.prompt_tokens, reused=event.reused, computed=event.computed,
            ttft_ms=event.ttft_ms, queue_ms=event.queue_ms,
            kind=(event.divergence or {}).get("kind", ""), route=event.route,
        ))

    def conversations(self) -> dict[str, list[RequestPoint]]:
        """Each conversation's requests in order, conversations in the order they began;
        text completions together under ""."""
        grouped: dict[str, list[RequestPoint]] = {}
        for p in self.points:
            grouped.setdefault(p.conversation, []).append(p)
        return grouped

    def drops(self) -> list[HitDrop]:
        """The requests whose hit rate fell from HIGH_RATE or more to below DROP_SHARE of
        their conversation's previous request, or that left their conversation's path by a
        kind other than EXPECTED_KINDS; in the order served."""
        found: list[HitDrop] = []
        for name, points in self.conversations().items():
            before: float | None = None
            for p in points:
                # Text completions form no conversation: a rate against the previous one's says nothing.
                fell = bool(name) and before is not None and before >= HIGH_RATE and p.hit_rate < before * DROP_SHARE
                if fell or p.kind not in EXPECTED_KINDS | {""}:
                    found.append(HitDrop(p, before))
                before = p.hit_rate
        return sorted(found, key=lambda d: d.point.number)
