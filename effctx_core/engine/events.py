"""The engine's event bus: every event goes to the subscribers and, when asked, to a trace."""

from __future__ import annotations

import threading
import time
from dataclasses import replace
from pathlib import Path
from typing import Callable, ParamSpec

from effctx_core.events.subscribers import Subscriber, Subscribers, Unsubscribe
from effctx_core.events.trace import ErrorRaised, Event, TraceWriter
from effctx_core.units import ms_since

Fields = ParamSpec("Fields")


class EventBus:
    def __init__(self, trace_path: str | Path | None = None):
        self._subscribers = Subscribers()
        self._trace = TraceWriter(Path(trace_path)) if trace_path else None
        self._trace_error: str | None = None
        self._t0 = time.perf_counter_ns()
        self.started_wall = time.time()
        # The engine's thread emits most events; a front end notes its own (a request
        # queued) from another: one at a time, so the trace's lines stay whole and in order.
        self._lock = threading.Lock()

    def subscribe(self, subscriber: Subscriber) -> Unsubscribe:
        return self._subscribers.subscribe(subscriber)

    def elapsed_ms(self) -> float:
        return round(ms_since(self._t0), 3)

    def emit(self, event_type: Callable[Fields, Event], /, *args: Fields.args, **fields: Fields.kwargs) -> None:
        """The record `event_type(*args, **fields)`, stamped with the time since the bus
        started. The record's own signature types the fields, so mypy checks every call."""
        with self._lock:
            event = replace(event_type(*args, **fields), t_ms=self.elapsed_ms())
            if self._trace is not None:
                self._trace(event)
                self._check_trace()
            self._subscribers.deliver(event)

    def _check_trace(self) -> None:
        """A trace that stopped being written is said once, to the subscribers (the
        console shows it); the work goes on, and `trace_error` keeps the reason."""
        if self._trace is not None and self._trace.error and self._trace_error is None:
            self._trace_error = self._trace.error
            self._subscribers.deliver(ErrorRaised(error="TraceWriteError", message=self._trace_error, t_ms=self.elapsed_ms()))

    @property
    def trace_error(self) -> str | None:
        return self._trace_error

    def close(self) -> None:
        if self._trace is not None:
            self._trace.close()
            self._check_trace()
            self._trace = None
