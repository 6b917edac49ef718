"""The requests screen: every request of the OpenAI-compatible endpoint, the newest first,
with what it reused, its route, where it left its conversation and what it cost; Enter
inspects one.

The screen reads a RequestLog the session screen feeds with every engine event from the
first one on, so the history is there when it opens, live or in a replay. Events come
hundreds of times a second while a reply decodes; the screen takes the log's changes in at
10 Hz instead of per event.
"""

from __future__ import annotations

from textual.app import ComposeResult
from textual.binding import Binding
from textual.content import Content
from textual.screen import Screen
from textual.widgets import Header, Static

from effctx_core.events.requests import RequestLog
from effctx_core.units import format_count, format_counted
from effctx_tui.screens.request_inspector import RequestInspector
from effctx_tui.widgets.footer import EffctxFooter
from effctx_tui.widgets.request_table import RequestFilter, RequestTable

REFRESH_SECONDS = 0.1


def log_summary(log: RequestLog) -> str:
    parts = [format_counted(len(log.rows), "request"), format_counted(len(log.conversations), "conversation"),
             f"{format_count(log.misses)} miss{'es' if log.misses != 1 else ''}"]
    if log.active:
        parts.append(f"{log.active:,} queued or running")
    return " · ".join(parts)


class RequestsScreen(Screen):
    BINDINGS = [
        Binding("enter", "inspect", "Inspect", tooltip="The request under the cursor: its prompt by segment, where "
                "and why it left its conversation, what it cost"),
        Binding("c", "conversation", "Conversation", tooltip="Only one conversation's requests: the next "
                "conversation at each press, then all again"),
        Binding("m", "misses", "Misses only", tooltip="Only the requests that left their conversation or reused "
                "less than it held; again for all"),
        Binding("escape", "back", "Back", tooltip="Back to the session"),
    ]

    DEFAULT_CSS = """
    RequestsScreen {
        #requests-summary {
            height: 1;
            padding: 0 1;
            background: $panel;
        }
        RequestTable { height: 1fr; }
    }
    """

    def __init__(self, log: RequestLog) -> None:
        super().__init__()
        self.request_log = log
        self.title = "Requests"

    @property
    def table(self) -> RequestTable:
        return self.query_one(RequestTable)

    def compose(self) -> ComposeResult:
        yield Header(show_clock=False)
        yield Static(id="requests-summary")
        yield RequestTable(self.request_log)
        yield EffctxFooter()

    def on_mount(self) -> None:
        self.table.sync()
        self.table.focus()
        self._show_summary()
        self.set_interval(REFRESH_SECONDS, self._poll)

    def _poll(self) -> None:
        if self.table.sync():
            self._show_summary()

    def _show_summary(self) -> None:
        table = self.table
        shown = f"showing {table.filter.describe()}"
        if table.filter.narrows:
            shown += f": {table.shown:,} of {len(self.request_log.rows):,}"
        self.query_one("#requests-summary", Static).update(Content(shown))
        self.sub_title = log_summary(self.request_log)
        self.refresh_bindings()  # Inspect comes with the first row, Conversation with the first conversation

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action == "inspect":
            return self.table.cursor_row is not None
        if action == "conversation":
            return bool(self.request_log.conversations)
        if action == "misses":
            return bool(self.request_log.served)
        return True

    def action_inspect(self) -> None:
        row = self.table.cursor_row
        if row is not None:
            self.app.push_screen(RequestInspector(row, self.request_log))

    def action_conversation(self) -> None:
        order = [None, *self.request_log.conversations]
        now = self.table.filter
        following = order[(order.index(now.conversation) + 1) % len(order)] if now.conversation in order else None
        self._filter(RequestFilter(following, now.misses))

    def action_misses(self) -> None:
        now = self.table.filter
        self._filter(RequestFilter(now.conversation, not now.misses))

    def _filter(self, new: RequestFilter) -> None:
        self.table.set_filter(new)
        self._show_summary()

    def action_back(self) -> None:
        self.app.pop_screen()
