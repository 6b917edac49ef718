"""Every theme's text is readable: each colour pair the console draws text in meets WCAG
AA (a contrast ratio of 4.5:1), in every theme effctx ships.

The colours are the ones the running console resolves (the app's CSS variables under the
theme: effctx's files over Textual's generated ones), with translucent colours blended
over what they are drawn on, as the terminal shows them. The residency classes carry no
text (their cells are marks and a cursor glyph on a colour), so they are not text pairs.
"""

from __future__ import annotations

import pytest
from textual.color import Color

from effctx_tui.console import ConsoleApp
from effctx_tui.themes import builtin_theme_files, load_theme_file
from tests.helpers.theme_fixtures import config_home  # noqa: F401 - fixture

AA = 4.5

# (text, drawn on): where the console draws each kind of text. A background of several
# layers is a translucent one over what it covers.
TEXT_PAIRS: list[tuple[str, str | tuple[str, ...]]] = [
    # transcript, help, panes; the header and status line; Tree, DataTable and OptionList
    ("foreground", "background"), ("foreground", "panel"), ("foreground", "surface"),
    # labels, reasons, tree facts; the header's subtitle; the diff's notes
    ("foreground-muted", "background"), ("foreground-muted", "panel"), ("foreground-muted", "surface"),
    # the user's turns, help titles, marked nodes; errors; the snapshot tree's states
    ("accent", "background"), ("accent", "surface"), ("error", "background"),
    ("success", "surface"), ("warning", "surface"),
    # a cell's standing in the cells table and its detail, a wrong passkey answer, the
    # timings table's reused count, the residency legend's "over budget"
    ("success", "background"), ("warning", "background"), ("error", "surface"), ("error", "panel"),
    # the titles of the panes, drawn in their frame's colour
    ("panel-lighten-2", "background"), ("panel-lighten-2", "surface"),
    ("footer-key-foreground", "footer-background"), ("footer-description-foreground", "footer-background"),
    # an Input's placeholder, which says what to type or why it is disabled (the prompt)
    ("text-disabled", "surface"),
    # the status line's reused, prefilled and dropped counts
    ("text-success", "panel"), ("text-warning", "panel"), ("text-error", "panel"),
    # the cursor row of lists, tables and trees
    ("block-cursor-foreground", "block-cursor-background"),
    # ... and when the list has not the focus
    ("block-cursor-blurred-foreground", ("surface", "block-cursor-blurred-background")),
    ("foreground", ("surface", "block-cursor-blurred-background")),
]


def resolve(variables: dict[str, str], name: str, under: Color) -> Color:
    """The colour of a variable as drawn over `under`: an "auto" colour is Textual's
    contrasting text for it, a translucent one is blended over it."""
    value = variables[name]
    if value.startswith("auto"):
        alpha = value.split()[1].rstrip("%") if " " in value else "100"
        return under + under.get_contrast_text(float(alpha) / 100)
    return under + Color.parse(value)


def contrast(text: Color, background: Color) -> float:
    def luminance(colour: Color) -> float:
        def linear(channel: int) -> float:
            c = channel / 255
            return c / 12.92 if c <= 0.04045 else ((c + 0.055) / 1.055) ** 2.4

        return 0.2126 * linear(colour.r) + 0.7152 * linear(colour.g) + 0.0722 * linear(colour.b)

    light, dark = sorted((luminance(text), luminance(background)), reverse=True)
    return (light + 0.05) / (dark + 0.05)


def test_contrast_is_the_wcag_ratio():
    assert contrast(Color.parse("#ffffff"), Color.parse("#000000")) == pytest.approx(21.0)
    assert contrast(Color.parse("#777777"), Color.parse("#ffffff")) == pytest.approx(4.48, abs=0.01)
    assert contrast(Color.parse("#777777"), Color.parse("#ffffff")) == contrast(Color.parse("#ffffff"), Color.parse("#777777"))


@pytest.mark.parametrize("theme", [load_theme_file(path).name for path in builtin_theme_files()])
def test_every_text_colour_of_the_theme_meets_wcag_aa(config_home, theme):
    variables = ConsoleApp(theme=theme).get_css_variables()
    page = Color.parse(variables["background"])
    failing = []
    for text, on in TEXT_PAIRS:
        layers = (on,) if isinstance(on, str) else on
        background = page
        for layer in layers:
            background += Color.parse(variables[layer])
        ratio = contrast(resolve(variables, text, background), background)
        if ratio < AA:
            failing.append(f"{text} on {' over '.join(reversed(layers))}: {ratio:.2f}:1")
    assert not failing, f"{theme} is below {AA}:1 for " + ", ".join(failing)
