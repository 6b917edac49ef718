"""The session's prompt: one line that takes a paste whole."""

from __future__ import annotations

from textual import events
from textual.widgets import Input


def one_line(text: str) -> str:
    """A pasted text as one prompt line: its lines joined by spaces. A turn's input is one
    line (the snapshot tree keeps a turn as "input\\nreply")."""
    return " ".join(line.strip() for line in text.splitlines() if line.strip())


class PromptInput(Input):
    """Input keeps only a paste's first line; the prompt takes all of it in one change,
    so a long document arrives at once and an Enter right after submits all of it."""

    def _on_paste(self, event: events.Paste) -> None:
        event.prevent_default()  # Input's own handler would insert the first line again
        event.stop()
        text = one_line(event.text)
        if not text:
            return
        if self.selection.is_empty:
            self.insert_text_at_cursor(text)
        else:
            self.replace(text, *self.selection)
