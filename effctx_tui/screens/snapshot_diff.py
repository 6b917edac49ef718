"""Where two snapshot nodes part: the text they share up to there, then each one's own
text after it; `t` shows the same places as token ids. A replayed tree holds no token ids
(a trace records how many, not which): there the two part where the tree branches, and
each side is the text of its turns as recorded."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.content import Content
from textual.screen import ModalScreen
from textual.widgets import Static

from effctx_core.snapshots.tree import SnapshotTree, TreeDiff
from effctx_core.units import format_counted
from effctx_tui.themes import MUTED
from effctx_tui.widgets.two_sides import TwoSides

Detokenize = Callable[[Sequence[int]], str]

# How much of the shared tape is shown before the divergence: enough to recognise where
# in the conversation the two part, short enough that the two sides stay in view.
SHARED_CONTEXT = 24


@dataclass(frozen=True)
class DiffReport:
    diff: TreeDiff
    label_a: str
    label_b: str
    shared_tail: tuple[int, ...]  # the last tokens of the common prefix
    shared_text: str  # shared_tail detokenized
    text_a: str  # tail_a detokenized (or the turns' text, when not by_tokens)
    text_b: str
    by_tokens: bool = True  # False: the tapes were placeholders, the texts are the turns'

    def summary(self) -> str:
        d = self.diff
        if d.identical:
            return f"{d.a} and {d.b} hold the same tape of {d.common_prefix:,} tokens"
        if not d.tail_a or not d.tail_b:
            short, long_, tail = (d.a, d.b, d.tail_b) if not d.tail_a else (d.b, d.a, d.tail_a)
            if not d.common_prefix:
                return f"{long_} holds {format_counted(len(tail), 'token')}, {short} none"
            return f"{long_} goes on where {short} ends: {short}'s {d.common_prefix:,} tokens, then {len(tail):,} more"
        return (f"{d.a} and {d.b} share {d.common_prefix:,} tokens, then part: "
                f"{d.a} has {len(d.tail_a):,} more, {d.b} {len(d.tail_b):,} more")


def describe_diff(tree: SnapshotTree, a: str, b: str, detokenize: Detokenize, tokens_known: bool = True) -> DiffReport:
    """Tapes and detokenizing: call it on a worker thread. `tokens_known`:
    ConsoleEngine.tokens_known."""
    diff = tree.diff(a, b, by_tokens=tokens_known)
    label = lambda nid: tree.node(nid).label or nid  # noqa: E731
    if not tokens_known:
        said = lambda nid: "\n\n".join(f"{turn.input}\n{turn.reply.strip()}" for turn in tree.turns(nid, after=diff.ancestor))  # noqa: E731
        return DiffReport(diff, label(a), label(b), (), "", said(a), said(b), by_tokens=False)
    shared = tuple(tree.tape(a)[max(0, diff.common_prefix - SHARED_CONTEXT):diff.common_prefix])
    return DiffReport(diff, label(a), label(b), shared, detokenize(shared),
                      detokenize(diff.tail_a), detokenize(diff.tail_b))


def token_ids(tokens: Sequence[int]) -> str:
    return " ".join(str(t) for t in tokens)


class DiffScreen(ModalScreen[None]):
    BINDINGS = [
        Binding("t", "toggle_ids", "Text / token ids", tooltip="Show both tails as text or as token ids"),
        Binding("escape,q", "close", "Close", tooltip="Back to the snapshot tree"),
    ]

    DEFAULT_CSS = """
    DiffScreen {
        align: center middle;
        #diff-box {
            width: 90%;
            max-width: 140;
            height: auto;
            max-height: 100%;
            border: round $accent;
            border-title-color: $foreground;
            border-subtitle-color: $foreground-muted;
            background: $surface;
            padding: 0 1;
        }
        #diff-summary { height: auto; }
        #diff-shared {
            height: auto;
            max-height: 4;
            margin-bottom: 1;
            color: $foreground-muted;
        }
    }
    """

    def __init__(self, report: DiffReport) -> None:
        super().__init__()
        self.report = report
        self.show_ids = False

    def compose(self) -> ComposeResult:
        r, d = self.report, self.report.diff
        with Vertical(id="diff-box"):
            yield Static(Text(r.summary(), style="bold"), id="diff-summary")
            yield Static(id="diff-shared")
            # the count first: a long label is cut at the border's end
            yield TwoSides("diff", (f"{d.a} · {len(d.tail_a):,} tokens after · {r.label_a}",
                                    f"{d.b} · {len(d.tail_b):,} tokens after · {r.label_b}"), id="diff-tails")

    def on_mount(self) -> None:
        d = self.report.diff
        box = self.query_one("#diff-box")
        box.border_title = f"Where {d.a} and {d.b} part"
        box.border_subtitle = "t text / token ids · Esc closes" if self.report.by_tokens else "Esc closes"
        self._show()

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        return action != "toggle_ids" or self.report.by_tokens  # a replay has no token ids to show

    def _show(self) -> None:
        r, d = self.report, self.report.diff
        shown = lambda tokens, text: token_ids(tokens) if self.show_ids else text  # noqa: E731
        cut = "…" if len(r.shared_tail) < d.common_prefix else ""
        if not r.by_tokens:
            what = f"the {d.common_prefix:,} tokens up to {d.ancestor}" if d.common_prefix else "nothing"
            shared = Text(f"shared: {what}; a recording keeps what each turn said, not its tokens")
        elif r.shared_tail:
            shared = Text(f"the shared tape ends: {cut}{shown(r.shared_tail, r.shared_text)}")
        else:
            shared = Text("nothing shared")
        self.query_one("#diff-shared", Static).update(shared)
        self.query_one(TwoSides).show(*(
            Text(shown(tail, text)) if tail else Content.styled("(nothing: the tape ends here)", MUTED)
            for tail, text in ((d.tail_a, r.text_a), (d.tail_b, r.text_b))))

    def action_toggle_ids(self) -> None:
        self.show_ids = not self.show_ids
        self._show()

    def action_close(self) -> None:
        self.dismiss(None)
