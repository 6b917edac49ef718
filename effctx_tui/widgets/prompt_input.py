"""The session's prompt: one line that takes a paste or a file whole, line breaks and all."""

from __future__ import annotations

import re

from textual import events
from textual.widgets import Input

from effctx_core.units import format_bytes

# The most characters a one-line paste shows as itself: two widths of a 100-column prompt,
# which can still be read and edited by moving along the line. A longer paste, or one of
# several lines, is shown as a marker saying what it holds: the line would only show a
# window of it, and none of its line breaks.
INLINE_MAX = 200


def as_pasted(text: str) -> str:
    """A pasted text as the prompt keeps it: the terminal's line ends made "\\n", without
    the line break a copied last line brings along."""
    return text.replace("\r\n", "\n").replace("\r", "\n").rstrip("\n")


def paste_marker(number: int, text: str) -> str:
    """What the prompt shows for a long paste; numbered, so that two pastes of one size
    are two markers."""
    lines = text.count("\n") + 1
    return f"[paste {number}: {format_bytes(len(text.encode()))}, {lines:,} line{'' if lines == 1 else 's'}]"


class PromptInput(Input):
    """Input keeps only a paste's first line; the prompt takes all of it in one change, so
    a long document arrives at once and an Enter right after submits all of it. A long
    paste shows as a marker (paste_marker) that edits as one character: backspace removes
    it whole, typing goes around it. Submitted carries the text with the pastes in."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self._pastes: dict[str, str] = {}  # marker -> the text it stands for
        self._numbered = 0  # markers handed out since the prompt was last empty

    @property
    def full_value(self) -> str:
        """What Enter sends: the value with every marker replaced by its paste."""
        spans = self._marker_pattern()
        if spans is None:
            return self.value
        return spans.sub(lambda hit: self._pastes[hit.group()], self.value)

    def put(self, text: str) -> None:
        """Put `text` (a paste, a file) in at the cursor, over the selection if there is one."""
        text = as_pasted(text)
        if not text.strip():
            return
        if "\n" in text or len(text) > INLINE_MAX:
            self._numbered += 1
            marker = paste_marker(self._numbered, text)
            self._pastes[marker] = text
            text = marker
        if self.selection.is_empty:
            self.insert_text_at_cursor(text)
        else:
            self.replace(text, *self.selection)

    def replace(self, text: str, start: int, end: int) -> None:
        """Every edit comes here (typing, deleting, cutting, pasting): one that takes part of
        a marker takes all of it, and text typed inside a marker goes after it."""
        spans = self._marker_pattern()
        if spans is not None:
            start, end = sorted((max(0, start), min(len(self.value), end)))
            for hit in spans.finditer(self.value):
                if start == end and hit.start() < start < hit.end():
                    start = end = hit.end()
                elif start < hit.end() and end > hit.start():
                    start, end = min(start, hit.start()), max(end, hit.end())
        super().replace(text, start, end)

    def watch_value(self, value: str) -> None:
        # A marker gone from the value (deleted, or the prompt cleared) lets go of its paste.
        self._pastes = {marker: text for marker, text in self._pastes.items() if marker in value}
        if not value:
            self._numbered = 0

    def _marker_pattern(self) -> re.Pattern[str] | None:
        if not self._pastes:
            return None
        return re.compile("|".join(re.escape(marker) for marker in self._pastes))

    def _on_paste(self, event: events.Paste) -> None:
        event.prevent_default()  # Input's own handler would insert the first line again
        event.stop()
        self.put(event.text)

    async def action_submit(self) -> None:
        self.post_message(self.Submitted(self, self.full_value))
