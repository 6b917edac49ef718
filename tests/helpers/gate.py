"""Holding a worker thread at a chosen point while a test looks at what runs meanwhile."""

from __future__ import annotations

import threading
from typing import Callable, ParamSpec, TypeVar

from effctx_core.events.trace import Event
from tests.helpers.engine_jobs import WAIT

P = ParamSpec("P")
R = TypeVar("R")


class Gate:
    """Holds the threads that reach it until the test releases it: what a test checks
    "while X runs" is then checked while X runs, however fast X would have finished."""

    def __init__(self) -> None:
        self.reached = threading.Event()
        self._released = threading.Event()

    def hold(self) -> None:
        """On the worker: say that it got here, and wait for the release."""
        self.reached.set()
        assert self._released.wait(WAIT)

    def release(self) -> None:
        self._released.set()

    def at_event(self, kind: str) -> Callable[[Event], None]:
        """An engine subscriber that holds the engine's thread at its events of `kind`
        (the event is delivered to the subscribers that came before it first)."""
        def hold_at(event: Event) -> None:
            if event.kind == kind:
                self.hold()
        return hold_at

    def before(self, call: Callable[P, R]) -> Callable[P, R]:
        """`call`, held at its start."""
        def held(*args: P.args, **kwargs: P.kwargs) -> R:
            self.hold()
            return call(*args, **kwargs)
        return held
