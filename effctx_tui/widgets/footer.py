"""The footer of every effctx screen: Textual's, compact, with the keys that work on every
screen (quit, help, theme, the palette) pinned at its right end.

Textual's footer lays the keys out in one row, the app's last, and a narrow terminal cuts
the row wherever it ends: at 100 columns the session screen lost Quit, Help and Theme.
Here the room goes, in this order, to Quit and Help (always shown: help lists everything
else), to the screen's own keys in their order, then to Theme and the palette. Each key is
shown whole or not at all. A key left out is still in the help page (f1) and the palette.
"""

from __future__ import annotations

from textual.app import ComposeResult
from textual.containers import HorizontalGroup
from textual.widget import Widget
from textual.widgets import Footer
from textual.widgets._footer import FooterKey

# The app's keys that always keep their place; Theme and the palette yield theirs to the
# screen's keys, which are the way to the screens a newcomer is looking for.
ALWAYS_SHOWN = frozenset({"quit", "help"})


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
        pinned = list(self.query("#footer-everywhere > *"))
        always = [key for key in pinned if isinstance(key, FooterKey) and key.action in ALWAYS_SHOWN]
        if_room = [key for key in pinned if key not in always]
        screen_keys = [child for child in self.children if child.id != "footer-everywhere"]
        room = self.size.width - sum(self._width(key) for key in always)
        fits = True
        for key in screen_keys + if_room:
            room -= self._width(key)
            fits = fits and room >= 0
            key.display = fits
