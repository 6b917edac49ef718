"""The colours of the block classes, shared by every widget that draws the tape.

Each widget exposes them as component classes (`<widget>--sink`, `--recent`, …). The
console's themes set them through their own variables (`$residency-sink`, `…-sink-mark`,
`$residency-cursor`, see `theme_variables`), mapped onto the components in effctx.tcss.
The widgets' DEFAULT_CSS keeps fixed hex colours rather than those variables because a
variable unknown to the running App fails the stylesheet, and the widgets must also work
in a plain App (tests, other tools). Themes without the variables (Textual's own) get
these same hues: they reuse one hue for several roles (textual-dark's accent and warning
are the same orange) and five classes need five hues that stay apart. `background` is
the cell, `color` the marks drawn on it.
"""

from __future__ import annotations

from effctx_core.residency.blocks import BlockClass

# (cell background, mark colour): the mark is a darker shade of the same hue so block
# boundaries read as texture, not as a sixth colour.
CLASS_COLOURS: dict[BlockClass, tuple[str, str]] = {
    BlockClass.SINK: ("#a371f7", "#5b2fa8"),
    BlockClass.RECENT: ("#3fb950", "#1a6b2a"),
    BlockClass.HOT: ("#d29922", "#7a5405"),
    BlockClass.COLD: ("#388bfd", "#154a99"),
    BlockClass.EVICTED: ("#5c2a33", "#a8505f"),
}
CURSOR_COLOUR = "#ffffff"


def theme_variables() -> dict[str, str]:
    """Each residency theme variable with its default, for `App.get_theme_variable_defaults`."""
    variables = {}
    for cls, (cell, mark) in CLASS_COLOURS.items():
        variables[f"residency-{cls.label}"] = cell
        variables[f"residency-{cls.label}-mark"] = mark
    variables["residency-cursor"] = CURSOR_COLOUR
    return variables


def component_names(prefix: str) -> dict[BlockClass, str]:
    return {cls: f"{prefix}--{cls.label}" for cls in BlockClass}


def component_css(prefix: str, cursor: bool = True) -> str:
    """Rules for the class components (and the cursor), to nest inside the widget's rule."""
    rules = [
        f".{name} {{ background: {CLASS_COLOURS[cls][0]}; color: {CLASS_COLOURS[cls][1]}; }}"
        for cls, name in component_names(prefix).items()
    ]
    if cursor:
        rules.append(f".{prefix}--cursor {{ color: {CURSOR_COLOUR}; text-style: bold; }}")
    return "\n".join(rules)
