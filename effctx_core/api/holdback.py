"""Streaming text that must not show a marker: a stop string, or the start of a tool call.

A client that sees "<tool_" as content cannot take it back when it turns out to be
"<tool_call>", so the tail that could still become a marker is held until the next piece
settles it. Each piece costs work in proportion to the piece and the longest marker, never
to the text streamed so far.
"""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["TextHoldback"]


class TextHoldback:
    """Releases streamed text up to the first complete marker, holding back any tail that
    could be a marker's beginning.

    It keeps nothing after the marker: the caller, which has every piece, parses the whole
    reply (the calls, or the text before a stop string) when the stream ends."""

    def __init__(self, markers: Sequence[str]):
        # An empty stop string would match before every piece: it marks nothing.
        self._markers = tuple(dict.fromkeys(m for m in markers if m))
        self._prefixes = {m[:k] for m in self._markers for k in range(1, len(m))}
        self._longest_prefix = max((len(m) - 1 for m in self._markers), default=0)
        self._held = ""
        self._marker_seen: str | None = None

    @property
    def marker_seen(self) -> str | None:
        """The marker that ended the released text, once one has appeared."""
        return self._marker_seen

    def feed(self, piece: str) -> str:
        """The text that can be sent now: "" from the first complete marker on."""
        if self._marker_seen is not None:
            return ""
        # The held tail holds no complete marker, so one that completes now starts in it or
        # in the piece: searching both is enough.
        window = self._held + piece
        found = [(at, -len(m), m) for m in self._markers if (at := window.find(m)) >= 0]
        if found:
            at, _, marker = min(found)
            self._marker_seen = marker
            self._held = ""
            return window[:at]
        keep = self._partial_tail(window)
        self._held = window[len(window) - keep:]
        return window[: len(window) - keep]

    def flush(self) -> str:
        """What is still held when the stream ends (nothing after a marker)."""
        held, self._held = self._held, ""
        return held

    def _partial_tail(self, window: str) -> int:
        """The length of the longest tail of `window` that begins some marker."""
        for k in range(min(len(window), self._longest_prefix), 0, -1):
            if window[-k:] in self._prefixes:
                return k
        return 0
