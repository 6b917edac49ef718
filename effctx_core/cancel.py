"""Cancelling long work: the UI sets a token, the worker checks it at safe points.

A safe point is one where stopping leaves nothing half-done behind: between two blocks
of a model file (the temporary file is removed), between two benchmark rounds, between
two prefill chunks of a session that is then thrown away.
"""

from __future__ import annotations

import threading
from contextlib import contextmanager
from typing import Callable, Iterator

from effctx_core.errors import Cancelled


class CancelToken:
    def __init__(self) -> None:
        self._event = threading.Event()
        self._lock = threading.Lock()
        self._hooks: list[Callable[[], None]] = []

    def cancel(self) -> None:
        """Ask the work to stop; work that has its own stop (an engine's prefill) is
        told at once through the hooks it registered."""
        self._event.set()
        with self._lock:
            hooks = list(self._hooks)
        for hook in hooks:
            hook()

    @property
    def cancelled(self) -> bool:
        return self._event.is_set()

    def check(self, what: str) -> None:
        if self._event.is_set():
            raise Cancelled(f"{what} cancelled")

    @contextmanager
    def forwarded_to(self, hook: Callable[[], None]) -> Iterator[None]:
        """While inside, a cancel also calls `hook` (at once if already cancelled)."""
        with self._lock:
            self._hooks.append(hook)
        try:
            if self._event.is_set():
                hook()
            yield
        finally:
            with self._lock:
                self._hooks.remove(hook)
