"""One request of the endpoint, inspected: its prompt as segments with how much of each
was reused, where and why it left its conversation with the text on both sides, the
diverging segment's two versions side by side, and what it cost against what a stable
prefix would have cost (modeled)."""

from __future__ import annotations

import os

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical, VerticalScroll
from textual.content import Content
from textual.screen import ModalScreen
from textual.widgets import Static

from effctx_core.api.conversations import CAUSES
from effctx_core.events.requests import STABLE_KINDS, RequestLog, RequestRow
from effctx_core.events.trace import RequestServed
from effctx_core.units import format_count, format_counted, format_ms, turn_speeds
from effctx_tui.themes import MUTED
from effctx_tui.widgets.request_cells import clock, route_words, status_cell
from effctx_tui.widgets.two_sides import TwoSides

BAR = 20  # cells of a segment's reuse bar
# The residency classes' colours: reused tokens were resident, computed ones were
# (re)computed, as a cold block is when it is needed again.
REUSED, COMPUTED = "on $residency-recent", "on $residency-cold"


def _word_start(text: str, i: int) -> int:
    while i > 0 and not text[i - 1].isspace():
        i -= 1
    return i


def _word_end(text: str, i: int) -> int:
    while i < len(text) and not text[i].isspace():
        i += 1
    return i


def changed_span(a: str, b: str) -> tuple[int, int, int]:
    """Where `a` and `b` differ, in whole words, between their common start and their
    common end: the start (the same in both) and the end in each."""
    first = len(os.path.commonprefix([a, b]))
    tail = len(os.path.commonprefix([a[first:][::-1], b[first:][::-1]]))
    return _word_start(a, first), _word_end(a, len(a) - tail), _word_end(b, len(b) - tail)


def first_changed_word(a: str, b: str) -> tuple[int, int, int]:
    """The first word where `a` and `b` differ: its start and its end in each. For texts
    cut around a divergence at other token boundaries, whose ends differ anyway."""
    first = len(os.path.commonprefix([a, b]))
    return _word_start(a, first), _word_end(a, first + 1), _word_end(b, first + 1)


def marked(text: str, start: int, end: int, one_line: bool = False) -> Content:
    """`text` with [start, end) in the changed style; `one_line` writes line breaks as ⏎."""
    show = (lambda s: s.replace("\n", "⏎")) if one_line else (lambda s: s)
    return Content.assemble(show(text[:start]), (show(text[start:end]), "bold $warning"), show(text[end:]))


def summary(row: RequestRow, log: RequestLog) -> Content:
    served = row.served
    status, _ = status_cell(row)
    head = served.label if served is not None and served.label else row.request
    facts = " · ".join(([row.request] if head != row.request else []) + [clock(log.wall_time(row))])
    conversation = row.conversation or ("a text completion" if row.endpoint == "completion" else "")
    lines = [Content.assemble((head, "bold"), (f"  {facts}", MUTED)),
             Content(" · ".join(part for part in (conversation, status, f"finish {served.finish}" if served and served.finish
                                                  else "") if part))]
    if served is None:
        return Content("\n").join(lines)
    if served.error:
        lines.append(Content.styled(served.error, "$error"))
    if served.turn:
        lines.append(Content.assemble(
            f"{format_counted(served.prompt_tokens, 'prompt token')}: ",
            (f"reused {format_count(served.reused)}", "bold $success"),
            f" · computed {format_count(served.computed)} · dropped {format_count(served.dropped)}"
            f" · route {route_words(served.route, served.node)}"))
        speeds = [f"{name} {figure}" for name, figure in
                  turn_speeds(served.generated, served.ttft_ms, served.prefill_tps, served.decode_tps)]
        lines.append(Content(" · ".join([*speeds, f"{format_counted(served.generated, 'token')} generated",
                                         f"queued {format_ms(served.queue_ms)}"])))
    return Content("\n").join(lines)


def segment_lines(served: RequestServed) -> Content:
    """The prompt's segments, each with its tokens, how many of them were reused (the
    prompt's first `reused` tokens were) and a bar of the two."""
    if not served.segments:
        return Content.styled("no segments recorded (a text completion is one piece of text)", MUTED)
    width = max(len(str(label)) for label, *_ in served.segments)
    lines = [Content.assemble(("  ", REUSED), " reused (was resident)  ", ("  ", COMPUTED), " computed")]
    for label, _index, _role, start, end in served.segments:
        n = end - start
        reused = min(max(served.reused - start, 0), n)
        cells = round(BAR * reused / n) if n else 0
        cells = min(max(cells, 1 if reused else 0), BAR - 1 if reused < n else BAR)  # a part is never drawn away
        lines.append(Content.assemble(
            f"{label:<{width}}  {format_count(n):>6} tokens  {format_count(reused):>6} reused  ",
            (" " * cells, REUSED), (" " * (BAR - cells), COMPUTED)))
    return Content("\n").join(lines)


def divergence_lines(served: RequestServed) -> Content:
    d = served.divergence
    if d is None:
        return Content.styled("no conversation to diverge from (a text completion, or a request that failed)", MUTED)
    kind = d["kind"]
    words = CAUSES.get(kind, kind.replace("_", " "))
    lines = [Content.styled(words, "bold $success" if kind in STABLE_KINDS else "bold $warning")]
    segment = d.get("segment")
    if d.get("at") is not None:
        where = f"first differing token {format_count(d['at'])}"
        if segment is not None:
            where += f" · in {segment['label']}, {format_counted(segment['offset'], 'token')} in"
        lines.append(Content(where + (f" · against {d['against']}" if d.get("against") else "")))
    if d.get("detail"):
        lines.append(Content(d["detail"]))
    sides = d.get("sides") or {}
    stored, prompt = sides.get("stored", ""), sides.get("prompt", "")
    if stored or prompt:
        start, end_a, end_b = first_changed_word(stored, prompt)
        lines.append(Content.assemble(("was  ", MUTED), marked(stored, start, end_a, one_line=True)))
        lines.append(Content.assemble(("now  ", MUTED), marked(prompt, start, end_b, one_line=True)))
    return Content("\n").join(lines)


def cost_lines(served: RequestServed) -> Content:
    """What the request computed, measured, and what a stable prefix would have left to
    compute: a model (the request's own prefill rate applied to those tokens)."""
    lines = [Content(f"computed {format_counted(served.computed, 'token')} in {format_ms(served.prefill_ms)} "
                     "(measured)")]
    stable = served.stable_computed
    if stable is None:
        lines.append(Content.styled("no earlier request of its conversation to compare with", MUTED))
        return Content("\n").join(lines)
    ms = f", about {format_ms(stable * 1000 / served.prefill_tps)} at this request's prefill rate" \
        if served.prefill_tps > 0 else ""
    lines.append(Content.assemble(f"with a stable prefix: {format_counted(stable, 'token')}{ms} ", ("(modeled)", "bold")))
    if served.computed > stable:
        lines.append(Content.styled(
            f"{format_counted(served.computed - stable, 'token')} computed again that the conversation held", "$warning"))
    return Content("\n").join(lines)


def version_texts(versions: dict) -> tuple[Content, Content]:
    """The diverging segment as the conversation's last request had it and as this request
    has it, the words that differ marked."""
    stored, prompt = versions["stored"], versions["prompt"]
    if stored is None:
        return Content.styled("(not in the conversation's last request)", MUTED), Content(prompt)
    start, end_a, end_b = changed_span(stored, prompt)
    return marked(stored, start, end_a), marked(prompt, start, end_b)


class RequestInspector(ModalScreen[None]):
    BINDINGS = [Binding("escape,q", "close", "Close", tooltip="Back to the requests")]

    DEFAULT_CSS = """
    RequestInspector {
        align: center middle;
        #inspector-box {
            width: 90%;
            max-width: 150;
            height: auto;
            max-height: 100%;
            border: round $accent;
            border-title-color: $foreground;
            border-subtitle-color: $foreground-muted;
            background: $surface;
            padding: 0 1;
        }
        #inspector-body { height: auto; max-height: 100%; }
        .inspector-title { color: $accent; text-style: bold; margin-top: 1; }
    }
    """

    def __init__(self, row: RequestRow, log: RequestLog) -> None:
        super().__init__()
        self.row = row
        self.request_log = log

    def compose(self) -> ComposeResult:
        served = self.row.served
        with Vertical(id="inspector-box"):
            with VerticalScroll(id="inspector-body"):
                yield Static(summary(self.row, self.request_log), id="inspector-summary")
                if served is None:
                    yield Static(Content.styled("not served yet: open it again once it is done to see what it "
                                                "reused and why", MUTED))
                    return
                if not served.turn:
                    return  # refused, or left the queue: it computed nothing, and its summary says why
                yield Static("Divergence", classes="inspector-title")
                yield Static(divergence_lines(served), id="inspector-divergence")
                if served.versions is not None:
                    label = served.versions["label"]
                    yield TwoSides("version", (f"{label} · as the conversation had it", f"{label} · in this request"),
                                   version_texts(served.versions), id="inspector-versions")
                yield Static("Cost", classes="inspector-title")
                yield Static(cost_lines(served), id="inspector-cost")
                # last: a long conversation is a long list
                yield Static("Prompt, by segment", classes="inspector-title")
                yield Static(segment_lines(served), id="inspector-segments")

    def on_mount(self) -> None:
        box = self.query_one("#inspector-box")
        box.border_title = f"Request {self.row.index + 1:,} of {len(self.request_log.rows):,}"
        box.border_subtitle = "Esc closes"

    def action_close(self) -> None:
        self.dismiss(None)
