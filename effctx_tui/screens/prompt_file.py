"""Ctrl+F on the session screen: a text file put into the prompt, as a paste would be."""

from __future__ import annotations

from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import Input, Label

from effctx_core.cli.options import PROMPT_FILE_LIMIT, read_prompt_file
from effctx_core.errors import EffctxError
from effctx_core.units import format_bytes
from effctx_tui.screens.snapshot_dialogs import DIALOG_CSS


class PromptFileDialog(ModalScreen[str | None]):
    """Asks for a path; Enter reads the file and gives its text, or says in one line why
    it cannot (the dialog stays, for another path); Escape gives None."""

    BINDINGS = [Binding("escape", "cancel", "Cancel", tooltip="Close without putting a file into the prompt")]
    DEFAULT_CSS = DIALOG_CSS.replace("{name}", "PromptFileDialog") + """
    PromptFileDialog #file-error { color: $text-error; margin: 1 0 0 0; }
    """

    def compose(self) -> ComposeResult:
        with Vertical():
            yield Label(f"A UTF-8 text file for the prompt, up to {format_bytes(PROMPT_FILE_LIMIT)} "
                        "(Enter reads it, Escape cancels)")
            yield Input(placeholder="path, e.g. ~/notes.md", id="file-path")
            yield Label("", id="file-error", markup=False)  # a path may hold [brackets]

    @on(Input.Submitted, "#file-path")
    def _read(self, event: Input.Submitted) -> None:
        path = event.value.strip()
        if path:
            self._say("reading…")
            self._read_file(path)

    @work(thread=True, exclusive=True, exit_on_error=False)
    def _read_file(self, path: str) -> None:
        # A file on a slow disk or a network mount must not freeze the console.
        try:
            text = read_prompt_file(path)
        except EffctxError as exc:
            self.app.call_from_thread(self._say, str(exc))
            return
        if not text.strip():
            self.app.call_from_thread(self._say, f"prompt file holds no text: {path}")
            return
        self.app.call_from_thread(self.dismiss, text)

    def _say(self, message: str) -> None:
        self.query_one("#file-error", Label).update(message)

    def action_cancel(self) -> None:
        self.dismiss(None)
