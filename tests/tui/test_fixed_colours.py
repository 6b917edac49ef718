"""No text of the console is drawn in a colour that no theme controls: a style is a
theme variable ("$success", themes.MUTED), never a named colour ("red", "dim") that
test_theme_contrast cannot check and a theme cannot change.

A source scan of effctx_tui: every string literal that is a style (words such as bold,
italic, on, and a colour), or a markup tag, must name no colour and not "dim". Hex
colours are left to the residency palette, the defaults of its theme variables.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest
from rich.color import ANSI_COLOR_NAMES
from textual.color import Color, ColorParseError

import effctx_tui

# Rich's style attributes and their short forms, and the "on" before a background
ATTRIBUTES = {"bold", "b", "italic", "i", "underline", "u", "underline2", "uu", "strike", "s", "reverse", "r",
              "blink", "blink2", "conceal", "c", "frame", "encircle", "overline", "o", "not", "on", "link"}
TAG = re.compile(r"\[([^\[\]=]+)\]")


def named_colour(word: str) -> bool:
    """A colour by name, Rich's ("bright_red", "grey50") or Textual's CSS ones ("orange")."""
    if word in ANSI_COLOR_NAMES:
        return True
    if not word.isidentifier():  # "#ff0000", "$success", "rgb(…)"
        return False
    try:
        Color.parse(word)
    except ColorParseError:
        return False
    return True


def fixed_colour(style: str) -> bool:
    """Whether `style`, if it is a style at all, names a colour or "dim"."""
    words = style.split()
    if not words or not all(w in ATTRIBUTES or w == "dim" or named_colour(w) for w in words):
        return False  # not a style: text, a key, an id, a theme variable
    return any(w == "dim" or named_colour(w) for w in words)


def fixed_colours(source: str) -> list[tuple[int, str]]:
    """(line, literal) of each style or markup tag in `source` with a fixed colour."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            if fixed_colour(node.value) or any(fixed_colour(tag) for tag in TAG.findall(node.value)):
                found.append((node.lineno, node.value))
    return found


@pytest.mark.parametrize(("source", "found"), [
    ('Text(x, style="bold red")', [(1, "bold red")]),
    ('text.append(note, style="dim")', [(1, "dim")]),
    ('COLOURS = "orange", "cyan"', [(1, "orange"), (1, "cyan")]),
    ('Text.from_markup("[bold yellow]warn[/]")', [(1, "[bold yellow]warn[/]")]),
    ('Text(x, style="white on blue")', [(1, "white on blue")]),
    # what is no fixed colour: theme variables, attributes alone, keys, prose, hex defaults
    ('Content.styled(x, "$error bold"); Binding("d", "diff"); Text(x, style="bold")', []),
    ('Content.from_markup("[$success]ok[/]"); note = "the red line"; DEFAULT = "#a371f7"', []),
])
def test_the_scan_finds_named_colours_in_styles_and_markup_only(source, found):
    assert fixed_colours(source) == found


def test_no_module_of_the_console_styles_text_with_a_fixed_colour():
    root = Path(effctx_tui.__file__).parent
    found = [f"{path.relative_to(root)}:{line} {literal!r}"
             for path in sorted(root.rglob("*.py")) for line, literal in fixed_colours(path.read_text(encoding="utf-8"))]
    assert found == []
