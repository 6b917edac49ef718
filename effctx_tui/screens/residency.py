"""The residency screen: the whole tape by class, one block inspected, the evicted ranges.

Live updates come from the engine's events (every prefill chunk, every 16th decoded
token) or through `update_table`, often, so it does no per-block Python work and rebuilds
the evicted list only when the ranges changed.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Callable

from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.content import Content
from textual.screen import Screen
from textual.style import Style
from textual.theme import Theme
from textual.widgets import Header, OptionList, Static
from textual.widgets.option_list import Option

from effctx_core.engine import ConsoleEngine
from effctx_core.errors import EffctxError
from effctx_core.events.subscribers import Unsubscribe
from effctx_core.events.trace import (
    CellSwapped,
    Event,
    NodeRestored,
    PrefillChunk,
    ResidencyChanged,
    TokenDecoded,
    TurnFinished,
)
from effctx_core.residency.blocks import BlockClass, BlockTable
from effctx_core.residency.report import MODELED, UNKNOWN, ResidencyReport
from effctx_tui.messages import EngineEvent, post_events
from effctx_tui.themes import MUTED
from effctx_tui.widgets.block_inspector import BlockInspector, token_span
from effctx_tui.widgets.footer import EffctxFooter
from effctx_tui.widgets.residency_tape import Zoom
from effctx_tui.widgets.residency_view import ResidencyView


def legend_counts(report: ResidencyReport) -> list[tuple[BlockClass, int]]:
    return [
        (BlockClass.SINK, report.sink_tokens),
        (BlockClass.RECENT, report.recent_tokens),
        (BlockClass.HOT, report.hot_tokens),
        (BlockClass.COLD, report.cold_tokens),
        (BlockClass.EVICTED, report.evicted_tokens),
    ]


def legend_summary(report: ResidencyReport) -> Content:
    budget = "" if report.budget is None else f" / budget {report.budget:,}"
    return Content.assemble(
        f"{report.n_tokens:,} tokens · resident {report.resident_tokens:,}{budget}",
        (" (over budget)", "bold $error") if report.budget is not None and report.over_budget else "",
        f" · policy {report.policy} · ",
        # observed vs modeled is the trust level of every number on this screen; a trace
        # recorded before traces kept it cannot say which
        (report.source, "bold") if report.source != UNKNOWN else ("observed or modeled: not recorded", MUTED),
    )


def range_label(start: int, end: int) -> str:
    return f"{token_span(start, end)} ({end - start:,} tokens)"


def changes_residency(event: Event) -> bool:
    """Whether a view of the residency is redrawn after `event`: after every decoded token
    would cost more than it shows, so after every 16th."""
    return isinstance(event, (PrefillChunk, ResidencyChanged, TurnFinished, NodeRestored, CellSwapped)) or (
        isinstance(event, TokenDecoded) and event.index % 16 == 0
    )


@dataclass(frozen=True)
class BudgetSteering:
    """What the screen may do to a live engine whose policy keeps to a budget. The calls
    block (they park or recompute blocks), so the screen makes them on a thread of its own."""

    set_budget: Callable[[int], None]
    recompute_cold: Callable[[], int]
    is_busy: Callable[[], bool]
    n_ctx: int
    step: int  # tokens per key press, a whole number of blocks


class ResidencyScreen(Screen):
    BINDINGS = [
        Binding("escape", "back", "Back", tooltip="Back to the session"),
        Binding("left_square_bracket", "budget(-1)", "Budget −", key_display="[", tooltip="Shrink the residency budget; blocks over it are parked at once"),
        Binding("right_square_bracket", "budget(1)", "Budget +", key_display="]", tooltip="Grow the residency budget"),
        Binding("c", "recompute_cold", "Recompute cold", tooltip="Bring the cold blocks back into the cache by recomputing them"),
    ]

    DEFAULT_CSS = """
    ResidencyScreen {
        #residency-legend {
            height: 2;
            padding: 0 1;
            background: $panel;
        }
        #residency-body { height: 1fr; }
        ResidencyView {
            width: 1fr;
            height: 1fr;
            border: round $panel-lighten-2;
            border-title-color: $foreground;
            &:focus { border: round $accent; }
        }
        #residency-side { width: 38; }
        BlockInspector {
            height: auto;
            padding: 0 1;
            border: round $panel-lighten-2;
        }
        #evicted-ranges {
            height: 1fr;
            border: round $panel-lighten-2;
            &:focus { border: round $accent; }
        }
    }
    """

    def __init__(
        self,
        table: BlockTable,
        policy: str,
        *,
        source: str = MODELED,
        budget: int | None = None,
        zoom: Zoom = Zoom.BLOCK,
        steering: BudgetSteering | None = None,
        engine: ConsoleEngine | None = None,
    ) -> None:
        """`engine`: one whose residency the screen follows, by its events, while it is open."""
        super().__init__()
        self._engine = engine
        self._unfollow: Unsubscribe = lambda: None
        self._steering = steering
        self._asked_budget: int | None = None
        self._steering_thread: ThreadPoolExecutor | None = None
        self._table = table
        self._zoom = zoom
        self._report = ResidencyReport.from_table(table, policy, source, budget)
        self._shown_ranges: tuple[tuple[int, int], ...] | None = None
        self.title = "Residency"
        self.sub_title = f"policy {policy}"

    @classmethod
    def of_engine(cls, engine: ConsoleEngine, steering: BudgetSteering | None) -> ResidencyScreen:
        tracker = engine.residency
        return cls(tracker.table(), engine.policy, source=tracker.source, budget=tracker.budget, steering=steering,
                   engine=engine)

    @property
    def report(self) -> ResidencyReport:
        return self._report

    def compose(self) -> ComposeResult:
        yield Header(show_clock=False)
        yield Static(id="residency-legend")
        with Horizontal(id="residency-body"):
            yield ResidencyView(self._table, zoom=self._zoom, id="residency-view")
            with Vertical(id="residency-side"):
                yield BlockInspector(id="inspector")
                yield OptionList(id="evicted-ranges")
        yield EffctxFooter()

    def on_mount(self) -> None:
        view = self.query_one(ResidencyView)
        if view.table is not self._table:  # updated between compose and mount
            view.set_table(self._table)
        self.query_one(BlockInspector).border_title = "Block"
        self.watch(view, "zoom", self._show_zoom)
        # The signal, not a watch on App.theme: it comes after the stylesheet is reapplied,
        # when the view's component styles already hold the new theme's colours.
        self.app.theme_changed_signal.subscribe(self, self._restyle_legend)
        self._show(self._table, self._report)
        view.focus()
        self._unfollow = post_events(self, self._engine)

    def on_engine_event(self, message: EngineEvent) -> None:
        if changes_residency(message.event):
            self._show_engine()

    def _show_engine(self) -> None:
        if self._engine is not None:
            self.update_table(self._engine.residency.table(), self._engine.residency_report())

    def update_table(self, table: BlockTable, report: ResidencyReport) -> None:
        """A live update: the new table and what the executor (or the model) says of it."""
        self._table = table
        self._report = report
        self.refresh_bindings()  # Recompute cold comes and goes with the cold blocks
        self.sub_title = f"policy {report.policy}"
        if not self.is_mounted:
            return  # an update before the first paint: compose and on_mount use it
        self.query_one(ResidencyView).set_table(table)
        self._show(table, report)

    # ------------------------------------------------------------------ painting

    def _show(self, table: BlockTable, report: ResidencyReport) -> None:
        view = self.query_one(ResidencyView)
        self.query_one("#residency-legend", Static).update(self._legend(view, report))
        self.query_one(BlockInspector).show(view.cursor_block, len(table))
        if report.evicted_ranges != self._shown_ranges:
            self._show_evicted(report)

    def _restyle_legend(self, theme: Theme) -> None:
        # the swatches are the view's styles copied into text, so a new theme needs new copies
        legend = self._legend(self.query_one(ResidencyView), self._report)
        self.query_one("#residency-legend", Static).update(legend)

    def _legend(self, view: ResidencyView, report: ResidencyReport) -> Content:
        # the swatch is the view's own component style, so a restyled theme shows here too
        swatches = [Content.assemble(
            ("  ", Style.from_rich_style(view.get_component_rich_style(f"residency-view--{cls.label}"))),
            f" {cls.label} {tokens:,}",
        ) for cls, tokens in legend_counts(report)]
        return Content.assemble(Content("   ").join(swatches), "\n", legend_summary(report))

    def _show_evicted(self, report: ResidencyReport) -> None:
        ranges = report.evicted_ranges
        self._shown_ranges = ranges
        options = self.query_one("#evicted-ranges", OptionList)
        total = sum(end - start for start, end in ranges)
        options.border_title = f"Evicted ranges · {len(ranges)} ({total:,} tokens)"
        if ranges:
            options.set_options(range_label(start, end) for start, end in ranges)
            options.highlighted = 0  # Tab then Enter jumps to the first range
        else:
            options.set_options([Option("nothing evicted", disabled=True)])

    def _show_zoom(self, zoom: Zoom) -> None:
        self.query_one(ResidencyView).border_title = f"Tape · {zoom.caption}"

    # ------------------------------------------------------------------ events

    @on(ResidencyView.BlockSelected)
    def _inspect(self, event: ResidencyView.BlockSelected) -> None:
        self.query_one(BlockInspector).show(event.block, len(self._table))

    @on(OptionList.OptionSelected, "#evicted-ranges")
    def _jump_to_range(self, event: OptionList.OptionSelected) -> None:
        assert self._shown_ranges is not None  # the list holds options only once they are shown
        start, _ = self._shown_ranges[event.option_index]
        view = self.query_one(ResidencyView)
        view.move_cursor_to_token(start)
        view.focus()

    def action_back(self) -> None:
        self.app.pop_screen()

    # ------------------------------------------------------------------ steering

    @property
    def _steered(self) -> BudgetSteering:
        """The steering, for the budget keys: check_action enables them only when there is one."""
        assert self._steering is not None
        return self._steering

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action in ("budget", "recompute_cold") and self._steering is None:
            return False  # a replay, or a policy without a budget
        if action == "recompute_cold":
            return self._report.cold_tokens > 0
        if action == "budget":  # not past the context size, nor below one step
            direction = parameters[0]
            assert isinstance(direction, int)  # the budget keys' own bindings
            budget, target = self._budget_step(direction)
            return target != budget
        return True

    def _budget_step(self, direction: int) -> tuple[int, int]:
        """The budget now and the one a press in `direction` asks for."""
        steering = self._steered
        # From the last budget asked for: presses come faster than the engine answers.
        budget = self._asked_budget or self._report.budget or steering.n_ctx
        return budget, min(steering.n_ctx, max(steering.step, budget + direction * steering.step))

    def action_budget(self, direction: int) -> None:
        _, target = self._budget_step(direction)
        if self._steer(lambda: self._steered.set_budget(target), f"budget {target:,} tokens"):
            self._asked_budget = target
            self.refresh_bindings()

    def action_recompute_cold(self) -> None:
        self._steer(self._steered.recompute_cold, "cold blocks recomputed")

    def _steer(self, call: Callable[[], object], done: str) -> bool:
        if self._steered.is_busy():
            self.notify("A reply is still running; wait for it or stop it first.", severity="warning")
            return False
        self._run_steering(call, done)
        return True

    def _run_steering(self, call: Callable[[], object], done: str) -> None:
        # One thread for all presses: they are carried out in the order they were made.
        if self._steering_thread is None:
            self._steering_thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="steer")
        self._steering_thread.submit(self._carry_out, call, done)

    def _carry_out(self, call: Callable[[], object], done: str) -> None:
        try:
            call()
        except EffctxError as exc:
            self._asked_budget = None
            self.notify(str(exc), severity="error")  # notify is thread-safe
            return
        # A larger budget plans nothing, so no event says the budget changed.
        self.app.call_from_thread(self._show_engine)
        self.notify(done)

    def on_unmount(self) -> None:
        self._unfollow()
        if self._steering_thread is not None:
            self._steering_thread.shutdown(wait=False)
