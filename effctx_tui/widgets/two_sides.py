"""Two texts side by side, each in a frame titled with what it is and scrolling on its own:
where two snapshot nodes part (the diff), a request's diverging segment as its
conversation had it and as the request has it (the request inspector)."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.containers import Horizontal, VerticalScroll
from textual.visual import VisualType
from textual.widgets import Static


class TwoSides(Horizontal):
    DEFAULT_CSS = """
    TwoSides {
        height: auto;
        & > .side {
            width: 1fr;
            height: auto;
            max-height: 60vh;
            border: round $panel-lighten-2;
            border-title-color: $foreground;
            padding: 0 1;
        }
    }
    """

    def __init__(self, prefix: str, titles: tuple[str, str], texts: tuple[VisualType, VisualType] = ("", ""), *,
                 id: str | None = None) -> None:
        """The frames are `{prefix}-tail-a` and `-b`, their texts `{prefix}-text-a` and `-b`."""
        super().__init__(id=id)
        self._prefix = prefix
        self._titles = titles
        self._texts = texts

    def compose(self) -> ComposeResult:
        for side, title, text in zip("ab", self._titles, self._texts):
            frame = VerticalScroll(classes="side", id=f"{self._prefix}-tail-{side}")
            frame.border_title = title
            with frame:
                yield Static(text, id=f"{self._prefix}-text-{side}")

    def show(self, a: VisualType, b: VisualType) -> None:
        for side, text in zip("ab", (a, b)):
            self.query_one(f"#{self._prefix}-text-{side}", Static).update(text)
