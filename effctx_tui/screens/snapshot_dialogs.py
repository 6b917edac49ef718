"""The two small questions the snapshots screen asks: a new label, and "really delete?"."""

from __future__ import annotations

from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.screen import ModalScreen
from textual.widgets import Button, Input, Label

DIALOG_CSS = """
{name} {
    align: center middle;
    & > Vertical {
        width: 64;
        height: auto;
        padding: 1 2;
        border: round $accent;
        background: $surface;
    }
    Label { width: 1fr; margin-bottom: 1; }
    Horizontal { height: auto; align-horizontal: right; }
    Button { margin-left: 2; }
}
"""


class RenameDialog(ModalScreen[str | None]):
    """Enter gives the new label (stripped); Escape gives None. It asks for a new label for
    a node, or for a new `noun` (a name) for something else (a conversation)."""

    BINDINGS = [Binding("escape", "cancel", "Cancel", tooltip="Keep the label as it is")]
    DEFAULT_CSS = DIALOG_CSS.replace("{name}", "RenameDialog")

    def __init__(self, what: str, label: str, noun: str = "label") -> None:
        super().__init__()
        self._what = what
        self._label = label
        self._noun = noun

    def compose(self) -> ComposeResult:
        with Vertical():
            yield Label(f"New {self._noun} for {self._what} (Enter saves, Escape cancels)")
            yield Input(self._label, id="label")

    @on(Input.Submitted, "#label")
    def _save(self, event: Input.Submitted) -> None:
        self.dismiss(event.value.strip())

    def action_cancel(self) -> None:
        self.dismiss(None)


class ConfirmDialog(ModalScreen[bool]):
    """y or Enter on the button confirms; n or Escape cancels."""

    BINDINGS = [
        Binding("y", "answer(True)", "Yes", tooltip="Go ahead"),
        Binding("n,escape", "answer(False)", "No", tooltip="Leave everything as it is"),
    ]
    DEFAULT_CSS = DIALOG_CSS.replace("{name}", "ConfirmDialog")

    def __init__(self, question: str, yes: str = "Delete") -> None:
        super().__init__()
        self._question = question
        self._yes = yes

    def compose(self) -> ComposeResult:
        with Vertical():
            yield Label(self._question)
            with Horizontal():
                yield Button("Cancel (n)", id="no")
                yield Button(f"{self._yes} (y)", id="yes", variant="error")

    def on_mount(self) -> None:
        # The safe answer has the focus: a stray Enter cancels.
        self.query_one("#no", Button).focus()

    @on(Button.Pressed)
    def _pressed(self, event: Button.Pressed) -> None:
        self.dismiss(event.button.id == "yes")

    def action_answer(self, yes: bool) -> None:
        self.dismiss(yes)
