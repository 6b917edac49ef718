"""The conversation so far, with the assistant's reply growing token by token."""

from __future__ import annotations

from rich.text import Text
from textual.containers import VerticalScroll
from textual.content import Content
from textual.widgets import Static

from effctx_core.snapshots.tree import TurnText
from effctx_tui.themes import MUTED


class Transcript(VerticalScroll):
    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self._reply: Static | None = None
        self._reply_text = ""
        self.streamed_pieces = 0  # pieces appended to the current reply, one per token

    def add_user(self, text: str) -> None:
        self.mount(Static(Text(text), classes="user-turn"))
        self._reply_text = ""
        self.streamed_pieces = 0
        self._reply = Static("", classes="assistant-turn")
        self.mount(self._reply)
        self.scroll_end(animate=False)

    def show_history(self, turns: list[TurnText]) -> None:
        """Replace the conversation with these turns, e.g. after a restore."""
        self.remove_children()
        self._reply = None  # a reply still streaming would land in a removed widget
        self._reply_text = ""
        self.streamed_pieces = 0
        widgets = []
        for turn in turns:
            widgets.append(Static(Text(turn.input), classes="user-turn"))
            widgets.append(Static(Text(turn.reply.lstrip()), classes="assistant-turn"))
        if widgets:
            self.mount_all(widgets)
        self.scroll_end(animate=False)

    def append_reply(self, piece: str) -> None:
        if self._reply is None:
            return
        self._reply_text += piece
        self.streamed_pieces += 1
        self._reply.update(Text(self._reply_text.lstrip()))
        self.scroll_end(animate=False)

    def finish_reply(self, final_text: str, note: str | None) -> None:
        """The reply as the engine kept it (stop text trimmed), with an optional note."""
        if self._reply is None:
            return
        text = Content(final_text.lstrip())
        if note:
            # Content, not Rich Text, can take a theme variable
            text = text.append_text(f"  [{note}]", f"{MUTED} italic")
        self._reply.update(text)
        self._reply = None

    def add_note(self, message: str, details: str | None = None) -> None:
        """A line about the conversation that is not a turn (a loaded prefix, a swap), with
        `details` for who asks: the line's tooltip."""
        note = Static(Content.styled(message, f"{MUTED} italic"), classes="note-line")
        note.tooltip = details or None
        self.mount(note)
        self.scroll_end(animate=False)

    def add_error(self, message: str) -> None:
        self.mount(Static(Text(message), classes="error-line"))
        self.scroll_end(animate=False)
