"""Jobs for tests of what shares an engine through its EngineService, and a hold inside
an engine's turn."""

from __future__ import annotations

import threading
from contextlib import contextmanager
from typing import Callable, Iterator

from effctx_core.cancel import CancelToken
from effctx_core.engine import EventSource, SessionEngine
from effctx_core.engine.service import EngineService
from effctx_core.events.trace import Event

WAIT = 60.0  # seconds: a bound on every wait, never an expectation of speed


class Blocker:
    """A job that holds the worker until released or cancelled, so that what is
    submitted meanwhile is queued behind it."""

    def __init__(self, service: EngineService):
        self.started = threading.Event()
        self.release = threading.Event()
        self.job = service.submit(self._run)
        assert self.started.wait(WAIT)

    def _run(self, engine: SessionEngine, token: CancelToken) -> bool:
        self.started.set()
        with token.forwarded_to(self.release.set):
            assert self.release.wait(WAIT)
        return token.cancelled


@contextmanager
def held_at(engine: EventSource, *kinds: str) -> Iterator[Callable[[], None]]:
    """Hold the engine's thread in the first event of each of `kinds` (event.kind), until
    the call given lets it go on to the next; leaving lets it go on for good. A front end
    that subscribed before has the event already, so a test sees it mid-turn, as it was
    at that event. One gate per kind, so a release cannot come before its hold."""
    gates = {kind: threading.Event() for kind in kinds}
    ahead = list(gates.values())

    def hold(event: Event) -> None:
        gate = gates.pop(event.kind, None)  # popped: a later event of the kind goes by
        if gate is not None:
            assert gate.wait(WAIT)

    unsubscribe = engine.subscribe(hold)
    try:
        yield lambda: ahead.pop(0).set()
    finally:
        unsubscribe()
        for gate in ahead:
            gate.set()
