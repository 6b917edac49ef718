"""The endpoint's requests as the engine's events tell them: one row per request, from
its queueing to its end, for the console's requests screen, live or from a trace.

Fed every engine event in order (`feed`), it keeps the rows in arrival order. A row
changes while its request runs (queued, prefilling, decoding) and is final once the
request is served. A reader polls `version` and reads only what changed since it last
looked: `rows[seen:]` are new, `served[seen:]` the rows that ended since (a request's
conversation and divergence are known only then). Nothing here is ever re-sorted or
rebuilt, so ten thousand requests cost what ten do.
"""

from __future__ import annotations

from dataclasses import dataclass

from effctx_core.events.trace import (
    Event,
    PrefillChunk,
    RequestQueued,
    RequestRouted,
    RequestServed,
    SessionOpened,
    TokenDecoded,
    TurnFinished,
)

QUEUED, PREFILLING, DECODING = "queued", "prefilling", "decoding"
# Divergences that cost nothing a stable client could have saved.
STABLE_KINDS = frozenset({"appended", "new_conversation"})


@dataclass(eq=False, slots=True)
class RequestRow:
    index: int  # arrival order, from 0
    request: str
    endpoint: str
    t_ms: float  # when it joined the queue (or was first heard of)
    status: str = QUEUED  # then prefilling, decoding; once served, the RequestServed status
    prompt_tokens: int = 0  # known once routed
    route: str = ""
    node: str = ""
    prefilled: int = 0  # the running prefill's done / total
    prefill_total: int = 0
    served: RequestServed | None = None

    @property
    def conversation(self) -> str | None:
        """None until the request is served: the endpoint names it then."""
        return self.served.conversation if self.served is not None else None

    @property
    def miss(self) -> bool:
        """The prompt left its conversation (a divergence other than appending), or it
        reused less than the conversation's earlier state held (that state was gone)."""
        served = self.served
        if served is None or served.divergence is None:
            return False
        if served.divergence.get("kind") not in STABLE_KINDS:
            return True
        # stable_computed is what the prompt adds to the earlier state: the rest was held.
        return served.stable_computed is not None and served.reused < served.prompt_tokens - served.stable_computed


class RequestLog:
    def __init__(self) -> None:
        self.started = 0.0  # wall clock at t_ms 0 (SessionOpened)
        self.rows: list[RequestRow] = []
        self.served: list[int] = []  # row indices, in the order their requests ended
        self._conversations: dict[str, None] = {}  # a dict: ordered, and found in O(1)
        self.misses = 0
        self.version = 0  # grows with every change a view would show
        self._by_id: dict[str, RequestRow] = {}
        self._running: dict[int, RequestRow] = {}  # engine turn -> the request it serves

    @property
    def conversations(self) -> list[str]:
        """The conversations' ids, in the order they first appeared."""
        return list(self._conversations)

    @property
    def active(self) -> int:
        """Requests queued or running."""
        return len(self.rows) - len(self.served)

    def wall_time(self, row: RequestRow) -> float:
        """Seconds since the epoch when the request arrived."""
        return self.started + row.t_ms / 1000

    def feed(self, event: Event) -> None:
        if isinstance(event, SessionOpened):
            self.started = event.started
        elif isinstance(event, RequestQueued):
            self._row(event.request, event.endpoint, event.t_ms)
        elif isinstance(event, RequestRouted):
            self._routed(event)
        elif isinstance(event, PrefillChunk):
            self._progress(event.turn, PREFILLING, event.done, event.total)
        elif isinstance(event, TokenDecoded):
            self._progress(event.turn, DECODING)
        elif isinstance(event, TurnFinished):
            self._running.pop(event.turn, None)
        elif isinstance(event, RequestServed):
            self._served(event)

    def _row(self, request: str, endpoint: str, t_ms: float) -> RequestRow:
        row = self._by_id.get(request)
        if row is None:
            row = RequestRow(len(self.rows), request, endpoint, t_ms)
            self.rows.append(row)
            self._by_id[request] = row
            self.version += 1
        return row

    def _routed(self, event: RequestRouted) -> None:
        if not event.request:  # a turn of the engine's own callers (the console's prompt)
            return
        row = self._row(event.request, "chat", event.t_ms)
        row.status, row.prompt_tokens, row.route, row.node = PREFILLING, event.prompt_tokens, event.route, event.node
        self._running[event.turn] = row
        self.version += 1

    def _progress(self, turn: int, status: str, done: int = 0, total: int = 0) -> None:
        row = self._running.get(turn)
        if row is None:
            return
        if status == DECODING and row.status == DECODING:
            return  # a token changes nothing a view shows once decoding is said
        row.status = status
        if status == PREFILLING:
            row.prefilled, row.prefill_total = done, total
        self.version += 1

    def _served(self, event: RequestServed) -> None:
        row = self._row(event.request, event.endpoint, event.t_ms)
        if row.served is not None:
            return  # said once; a second word on it would be a bug upstream, not a new row
        # By the row, not the event's turn: a request that failed says no turn.
        for turn in [turn for turn, running in self._running.items() if running is row]:
            del self._running[turn]
        row.served, row.status = event, event.status
        row.prompt_tokens, row.route, row.node = event.prompt_tokens, event.route, event.node
        self.served.append(row.index)
        if event.conversation:
            self._conversations.setdefault(event.conversation)
        self.misses += row.miss
        self.version += 1
