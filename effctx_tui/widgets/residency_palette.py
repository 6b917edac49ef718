"""The colours of the block classes, shared by every widget that draws the tape.

Each widget exposes them as component classes (`<widget>--sink`, `--recent`, …) so a
theme or the app stylesheet can restyle them; these are only the defaults. The hues are
fixed rather than theme variables because the built-in themes reuse one hue for several
roles (textual-dark's accent and warning are the same orange) and five classes need five
hues that stay apart. `background` is the cell, `color` the marks drawn on it.
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
