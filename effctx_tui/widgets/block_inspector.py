"""Everything the block table knows about one block, and why it has its class."""

from __future__ import annotations

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text
from textual.widget import Widget

from effctx_core.residency.blocks import Block, BlockFlag


def token_span(start: int, end: int) -> str:
    """An [start, end) range as people read positions: both ends included."""
    return f"{start:,}–{end - 1:,}"


def describe_flags(flags: BlockFlag) -> str:
    names = [flag.name.lower() for flag in BlockFlag if flag and flag.name and flag in flags]
    return ", ".join(names) if names else "none"


def describe_position(block: Block) -> str:
    if block.position < 0:
        return "not resident"
    text = token_span(block.position, block.position + block.tokens)
    shift = block.position - block.start
    # a shift is what a position-shift eviction did to the block: worth saying
    return f"{text} (shifted {shift:+,})" if shift else text


def block_rows(block: Block) -> list[tuple[str, str]]:
    return [
        ("tokens", f"{token_span(block.start, block.end)} ({block.tokens:,})"),
        ("position", describe_position(block)),
        ("segment", block.segment.label),
        ("class", block.cls.label),
        ("flags", describe_flags(block.flags)),
        ("last use", str(block.last_use)),
        ("score", "none" if block.score is None else f"{block.score:.3f}"),
        ("why", block.reason.text),
    ]


class BlockInspector(Widget):
    COMPONENT_CLASSES = {"block-inspector--label"}

    # the labels are secondary text (themes.MUTED); a component class because a Rich grid
    # takes a Rich style, not a theme variable
    DEFAULT_CSS = """
    BlockInspector {
        height: auto;
        & > .block-inspector--label { color: $foreground-muted; }
    }
    """

    def __init__(self, *, name: str | None = None, id: str | None = None, classes: str | None = None) -> None:
        super().__init__(name=name, id=id, classes=classes)
        self._block: Block | None = None
        self._n_blocks = 0

    def show(self, block: Block | None, n_blocks: int) -> None:
        self._block, self._n_blocks = block, n_blocks
        self.refresh(layout=True)

    def render(self) -> RenderableType:
        # built at each paint, so the labels take the colour of the theme switched to
        block = self._block
        if block is None:
            return Text("The tape is empty.", style="italic")
        # a grid, not plain text, so a long reason wraps under its own column
        grid = Table.grid(padding=(0, 1))
        grid.add_column(style=self.get_component_rich_style("block-inspector--label"), no_wrap=True)
        grid.add_column(overflow="fold")
        for label, value in block_rows(block):
            grid.add_row(label, value)
        title = Text(f"Block #{block.index:,} of {self._n_blocks:,}", style="bold")
        return Group(title, grid)
