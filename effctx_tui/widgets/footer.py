"""The footer of every effctx screen: Textual's, compact, with the keys that work on every
screen (help, theme, quit, the palette) pinned at its right end.

Textual's footer lays the keys out in one row, the app's last, and a narrow terminal cuts
the row wherever it ends: at 100 columns the session screen lost Quit, Help and Theme.
Here the app's keys always show; the screen's own keys fill the room left, in their
order, each whole or not at all. A key left out is still in the help page (f1) and the
palette.
"""

from __future__ import annotations

from textual.app import ComposeResult
from textual.containers import HorizontalGroup
from textual.widget import Widget
from textual.widgets import Footer
from textual.widgets._footer import FooterKey


class EffctxFooter(Footer):
    DEFAULT_CSS = """
    EffctxFooter #footer-everywhere {
        dock: right;
        width: auto;
        FooterKey.-command-palette { dock: none; }
    }
    """

    def __init__(self) -> None:
        super().__init__(compact=True)

    def compose(self) -> ComposeResult:
        bindings = self.screen.active_bindings
        pinned: list[Widget] = []
        for widget in super().compose():
            app_key = isinstance(widget, FooterKey) and widget.key in bindings and bindings[widget.key].node is self.app
            if app_key or "-command-palette" in widget.classes:
                pinned.append(widget)
            else:
                yield widget
        if pinned:
            yield HorizontalGroup(*pinned, id="footer-everywhere")

    async def recompose(self) -> None:
        await super().recompose()
        self.call_after_refresh(self._fit)

    def on_resize(self) -> None:
        self._fit()

    def _width(self, widget: Widget) -> int:
        content = widget.get_content_width(self.size, self.app.size)
        return content + widget.styles.gutter.width + widget.styles.margin.width

    def _fit(self) -> None:
        pinned = self.query("#footer-everywhere > *")
        room = self.size.width - sum(self._width(child) for child in pinned)
        fits = True
        for child in self.children:
            if child.id == "footer-everywhere":
                continue
            room -= self._width(child)
            fits = fits and room >= 0
            child.display = fits
