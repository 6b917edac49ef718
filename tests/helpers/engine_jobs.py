"""Jobs for tests of what shares an engine through its EngineService."""

from __future__ import annotations

import threading

from effctx_core.cancel import CancelToken
from effctx_core.engine import SessionEngine
from effctx_core.engine.service import EngineService

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
