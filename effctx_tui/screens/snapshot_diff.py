"""Where two snapshot nodes part: the tokens they share, and each one's tail as text."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Static

from effctx_core.snapshots.tree import SnapshotTree, TreeDiff

Detokenize = Callable[[Sequence[int]], str]


@dataclass(frozen=True)
class DiffReport:
    diff: TreeDiff
    label_a: str
    label_b: str
    text_a: str  # tail_a detokenized
    text_b: str

    def summary(self) -> str:
        d = self.diff
        if d.identical:
            return f"the tapes are identical ({d.common_prefix:,} tokens)"
        token = lambda t: "end of tape" if t is None else f"id {t}"  # noqa: E731
        return (f"common prefix {d.common_prefix:,} tokens · first divergent token {d.divergence:,}"
                f" ({d.a}: {token(d.token_a)}, {d.b}: {token(d.token_b)})")


def describe_diff(tree: SnapshotTree, a: str, b: str, detokenize: Detokenize) -> DiffReport:
    """Tapes and detokenizing: call it on a worker thread."""
    diff = tree.diff(a, b)
    label = lambda nid: tree.node(nid).label or nid  # noqa: E731
    return DiffReport(diff, label(a), label(b), detokenize(diff.tail_a), detokenize(diff.tail_b))


class DiffScreen(ModalScreen[None]):
    BINDINGS = [Binding("escape,q", "close", "Close")]

    DEFAULT_CSS = """
    DiffScreen {
        align: center middle;
        #diff-box {
            width: 90%;
            height: 80%;
            border: round $accent;
            border-title-color: $foreground;
            background: $surface;
            padding: 0 1;
        }
        #diff-summary { height: auto; margin-bottom: 1; }
        #diff-tails { height: 1fr; }
        .diff-tail {
            width: 1fr;
            border: round $panel-lighten-2;
            border-title-color: $foreground;
            padding: 0 1;
        }
    }
    """

    def __init__(self, report: DiffReport) -> None:
        super().__init__()
        self.report = report

    def compose(self) -> ComposeResult:
        r, d = self.report, self.report.diff
        with Vertical(id="diff-box"):
            yield Static(Text(r.summary(), style="bold"), id="diff-summary")
            with Horizontal(id="diff-tails"):
                for side, nid, label, tail, text in (
                    ("a", d.a, r.label_a, d.tail_a, r.text_a),
                    ("b", d.b, r.label_b, d.tail_b, r.text_b),
                ):
                    scroll = VerticalScroll(classes="diff-tail", id=f"diff-tail-{side}")
                    scroll.border_title = f"{nid} · {label} · {len(tail):,} tokens after"
                    with scroll:
                        yield Static(Text(text) if text else Text("(nothing: the tape ends here)", style="dim"),
                                     id=f"diff-text-{side}")

    def on_mount(self) -> None:
        self.query_one("#diff-box").border_title = f"Diff {self.report.diff.a} ↔ {self.report.diff.b} · Esc closes"

    def action_close(self) -> None:
        self.dismiss(None)
