"""Themes from TOML files: the built-in ones shipped in `effctx_tui/builtin_themes/`
(the top-level `themes/` of the repository is a link to that folder) and the user's in
`<platformdirs user config dir>/effctx/themes/*.toml`.

A file is one Textual theme:

    name = "effctx-dark"
    dark = true
    primary = "#2f81f7"          # also: secondary accent foreground background surface
                                 # panel boost warning error success
    text_alpha = 1.0             # optional, as luminosity_spread
    [variables]
    residency-sink = "#a371f7"   # effctx's own (see residency_palette) and Textual's

Everything is checked when the file is read, so a bad file is skipped with a one-line
reason instead of failing later, when the stylesheet is rebuilt with its colours.
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Literal, TypedDict, get_args

import platformdirs
from rich.style import Style as RichStyle
from textual.color import Color, ColorParseError
from textual.css.constants import VALID_STYLE_FLAGS
from textual.theme import Theme
from textual.widget import Widget

ColourKey = Literal[
    "primary", "secondary", "accent", "foreground", "background", "surface", "panel",
    "boost", "warning", "error", "success",
]
FloatKey = Literal["luminosity_spread", "text_alpha"]
COLOUR_KEYS: tuple[ColourKey, ...] = get_args(ColourKey)
FLOAT_KEYS: tuple[FloatKey, ...] = get_args(FloatKey)


class ThemeArgs(TypedDict, total=False):
    """The arguments of Theme that a theme file sets by key: its colours and numbers."""

    primary: str
    secondary: str
    accent: str
    foreground: str
    background: str
    surface: str
    panel: str
    boost: str
    warning: str
    error: str
    success: str
    luminosity_spread: float
    text_alpha: float
KNOWN_KEYS = {"name", "dark", "variables", *COLOUR_KEYS, *FLOAT_KEYS}

# The style of secondary text (labels, ids, reasons, notes, the header's subtitle) rather
# than "dim", which no theme can undo: effctx-high-contrast sets it full white. Not
# $text-muted: an "auto" colour, which a Content style does not blend (it comes out at
# full strength in every theme).
MUTED = "$foreground-muted"


def rich_style(widget: Widget, style: str) -> RichStyle:
    """`style`, a Content style that may name the theme's variables ("$success bold",
    MUTED), as a Rich style, for what takes no Content (a DataTable's cells, a Rich Table's).
    Its colour is blended over the widget's background as a Content's would be (MUTED is
    translucent in some themes); it sets no background, so a row keeps its own. It holds
    the theme of the call: whoever draws with it draws again on App.theme_changed_signal."""
    parsed = widget.app.stylesheet.parse_style(style)
    blended = (widget.get_visual_style() + parsed).rich_style
    return parsed.rich_style + RichStyle(color=blended.color)


class ThemeFileError(ValueError):
    """A theme file that cannot be used; the message is one line, for a notification."""


@dataclass
class LoadedThemes:
    themes: list[Theme] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)


def builtin_theme_files() -> list[Path]:
    # resources.files gives a real folder both in the editable install (the source tree)
    # and in an installed wheel (package data), so no second lookup path is needed.
    root = resources.files("effctx_tui") / "builtin_themes"
    return sorted(Path(str(entry)) for entry in root.iterdir() if entry.name.endswith(".toml"))


def user_themes_dir() -> Path:
    return Path(platformdirs.user_config_dir("effctx", appauthor=False)) / "themes"


def user_theme_files() -> list[Path]:
    folder = user_themes_dir()
    return sorted(folder.glob("*.toml")) if folder.is_dir() else []


def _colour(value: object, where: str) -> str:
    if not isinstance(value, str):
        raise ThemeFileError(f"{where} must be a colour string")
    # Textual's variables may carry an alpha percentage: "#81a1c1 35%"
    colour, _, alpha = value.strip().partition(" ")
    try:
        Color.parse(colour)
    except ColorParseError:
        raise ThemeFileError(f"{where} = {value!r} is not a colour") from None
    if alpha and not (alpha.endswith("%") and alpha[:-1].replace(".", "", 1).isdigit()):
        raise ThemeFileError(f"{where} = {value!r} is not a colour")
    return value


def _variable(name: object, value: object) -> tuple[str, str]:
    if not isinstance(name, str) or not isinstance(value, str):
        raise ThemeFileError(f"variables.{name} must be a string")
    if name.endswith("-text-style"):
        if not set(value.split()) <= VALID_STYLE_FLAGS:
            raise ThemeFileError(f"variables.{name} = {value!r} is not a text style")
        return name, value
    return name, _colour(value, f"variables.{name}")


def theme_from_dict(data: dict) -> Theme:
    unknown = sorted(set(data) - KNOWN_KEYS)
    if unknown:
        raise ThemeFileError(f"unknown key {unknown[0]!r}")
    name = data.get("name")
    if not isinstance(name, str) or not name.strip():
        raise ThemeFileError("'name' is missing")
    if "primary" not in data:
        raise ThemeFileError("'primary' is missing")
    dark = data.get("dark", True)
    if not isinstance(dark, bool):
        raise ThemeFileError("'dark' must be true or false")
    args: ThemeArgs = {}
    for colour_key in COLOUR_KEYS:
        if colour_key in data:
            args[colour_key] = _colour(data[colour_key], colour_key)
    for key in FLOAT_KEYS:
        if key in data:
            if not isinstance(data[key], (int, float)) or isinstance(data[key], bool):
                raise ThemeFileError(f"'{key}' must be a number")
            args[key] = float(data[key])
    variables = data.get("variables", {})
    if not isinstance(variables, dict):
        raise ThemeFileError("'variables' must be a table")
    theme = Theme(name=name.strip(), dark=dark, variables=dict(_variable(k, v) for k, v in variables.items()),
                  **args)
    try:
        theme.to_color_system().generate()  # what Textual does on every switch to it
    except Exception as exc:  # noqa: BLE001 - any failure here means the file is unusable
        raise ThemeFileError(f"Textual rejects it: {exc}") from None
    return theme


def load_theme_file(path: Path) -> Theme:
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as exc:
        raise ThemeFileError(f"cannot be read: {exc}") from None
    except tomllib.TOMLDecodeError as exc:
        raise ThemeFileError(f"is not TOML: {exc}") from None
    return theme_from_dict(data)


def load_themes(paths: list[Path] | None = None) -> LoadedThemes:
    """Built-in then user themes; a user theme replaces a built-in one of the same name."""
    loaded = LoadedThemes()
    by_name: dict[str, Theme] = {}
    for path in paths if paths is not None else [*builtin_theme_files(), *user_theme_files()]:
        try:
            theme = load_theme_file(path)
        except ThemeFileError as exc:
            loaded.warnings.append(f"Theme file {path} skipped: {exc}")
            continue
        by_name[theme.name] = theme
    loaded.themes = list(by_name.values())
    return loaded
