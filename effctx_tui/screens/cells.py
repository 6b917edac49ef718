"""The cells screen: the certification matrix (what this machine can run, each cell's
standing, capabilities, limits and keep/drop verdict) and a live swap of the running
conversation to another cell."""

from __future__ import annotations

from typing import Callable

from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.content import Content
from textual.coordinate import Coordinate
from textual.message import Message
from textual.screen import Screen
from textual.theme import Theme
from textual.widgets import DataTable, Header, ProgressBar, Static

from effctx_core.backends.registry import spec
from effctx_core.cells import Cell
from effctx_core.certify.effective import effective_sentence
from effctx_core.certify.matrix import CERTIFIED, FAILED, UNCERTIFIED, Matrix, MatrixRow
from effctx_core.certify.verdict import Verdict, verdicts
from effctx_core.engine import EventSource, SwapResult
from effctx_core.errors import Cancelled, EffctxError
from effctx_core.events.explain import swap_sentence
from effctx_core.events.subscribers import Unsubscribe
from effctx_core.events.trace import PrefillChunk
from effctx_core.units import format_count
from effctx_tui.messages import EngineEvent, post_events
from effctx_tui.themes import MUTED, rich_style
from effctx_tui.widgets.footer import EffctxFooter
from effctx_tui.widgets.lists import ListTable

# The standing and the verdict come right after the name: a narrow terminal shows them
# and scrolls the settings sideways (the detail below repeats every one of them).
COLUMNS = ("profile", "backend", "certification", "verdict", "n_ctx", "K/V", "FA", "swa_full", "policy", "shift",
           "exact replay")
_STANDING_STYLE = {CERTIFIED: "$success", UNCERTIFIED: "$warning", FAILED: "$error"}


def standing_style(row: MatrixRow) -> str:
    """The Content style of a cell's standing; an unsupported cell's is secondary text."""
    return _STANDING_STYLE.get(row.status, MUTED)


def _yes_no(flag: bool) -> str:
    return "yes" if flag else "no"


def cell_settings(cell: Cell) -> dict[str, str]:
    """The profile's settings of the table's columns, by column ("-" where a backend has none)."""
    p = cell.profile_record
    options = spec(p.backend).options_of(p) if p else None
    return {
        "K/V": f"{p.kv_cache_type_k}/{p.kv_cache_type_v}" if p else "-",
        "FA": ("on" if options.flash_attn else "off") if options is not None and hasattr(options, "flash_attn") else "-",
        "swa_full": _yes_no(options.swa_full) if options is not None and hasattr(options, "swa_full") else "-",
        "policy": p.residency.policy if p else "-",
    }


def cell_row(row: MatrixRow, current: str | None, verdict: Verdict | None, standing: Text) -> list[Text | str]:
    """`standing`: the certification cell, drawn by the table in its theme (CellsScreen._standing)."""
    cell = row.cell
    caps = cell.info.capabilities if cell.info else None
    name = Text(("● " if cell.profile == current else "  ") + cell.profile, style="bold" if cell.profile == current else "")
    settings = cell_settings(cell)
    return [
        name,
        cell.backend,
        standing,
        verdict.verdict if verdict is not None else "-",
        format_count(cell.info.n_ctx) if cell.info else "-",
        settings["K/V"],
        settings["FA"],
        settings["swa_full"],
        settings["policy"],
        _yes_no(caps.position_shift.supported) if caps else "-",
        _yes_no(caps.exact_snapshot.supported) if caps else "-",
    ]


class CellsScreen(Screen):
    """Lists cells (loaded by `load`, in a worker), the cursor on the running one; Enter
    asks before a swap and a second Enter swaps to the selected cell with `swap`; Esc
    during a swap's recompute calls `cancel`; `events` show the recompute's progress."""

    BINDINGS = [
        Binding("enter", "swap", "Swap to cell", tooltip="Swap the conversation to the selected cell (asks first)"),
        Binding("escape", "back", "Back / cancel swap", tooltip="Cancel the swap under way, or back to the session"),
    ]
    # The table takes the rows it has (up to half the screen) and the detail the rest,
    # scrolling; the standing and the verdict open the detail, so a short terminal shows
    # them without scrolling.
    DEFAULT_CSS = """
    CellsScreen {
        #cells-note { height: auto; padding: 0 1; background: $panel; }
        #swap-progress { display: none; padding: 0 1; }
        #swap-progress.-running { display: block; }
        #cells-table { height: auto; max-height: 50%; }
        #cells-detail-box { height: 1fr; border: round $panel-lighten-2; &:focus { border: round $accent; } }
        #cells-detail { height: auto; padding: 0 1; }
    }
    """

    class Swapped(Message):
        def __init__(self, result: SwapResult | None, error: str | None, cancelled: bool = False) -> None:
            super().__init__()
            self.result = result
            self.error = error
            self.cancelled = cancelled

    class Loaded(Message):
        def __init__(self, matrix: Matrix) -> None:
            super().__init__()
            self.matrix = matrix

    def __init__(self, load: Callable[[], Matrix], swap: Callable[[Cell], SwapResult] | None,
                 current: Callable[[], str | None], is_busy: Callable[[], bool] = lambda: False,
                 cancel: Callable[[], None] = lambda: None,
                 prepare: Callable[[Cell, Callable[[str, int, int], None]], None] | None = None,
                 events: EventSource | None = None) -> None:
        super().__init__()
        self._load, self._swap, self._current, self._is_busy, self._cancel = load, swap, current, is_busy, cancel
        self._prepare = prepare
        self._events = events
        self._unfollow: Unsubscribe = lambda: None
        # The cell the user was asked about (what a swap to it does and costs): the
        # next Enter on it goes ahead. Moving the cursor forgets it.
        self._asked: str | None = None
        self.cells: list[Cell] = []
        self.rows: list[MatrixRow] = []
        self.verdicts: dict[str, Verdict] = {}
        self.verdict_note = ""
        self.swapping = False
        self.title = "Cells"

    def compose(self) -> ComposeResult:
        yield Header(show_clock=False)
        yield Static("Describing every cell (each opens a context briefly)…", id="cells-note")
        yield ProgressBar(id="swap-progress", show_eta=False)
        yield ListTable(id="cells-table", cursor_type="row", zebra_stripes=True)
        with VerticalScroll(id="cells-detail-box"):
            yield Static("", id="cells-detail")
        yield EffctxFooter()

    def on_mount(self) -> None:
        self.query_one(DataTable).add_columns(*COLUMNS)
        self._describe()
        self._unfollow = post_events(self, self._events)
        # The signal, not a watch on App.theme: it comes once the new theme's colours apply.
        self.app.theme_changed_signal.subscribe(self, self._restyle)

    def on_unmount(self) -> None:
        self._unfollow()

    def on_engine_event(self, message: EngineEvent) -> None:
        if isinstance(message.event, PrefillChunk):
            self._swap_progress(message.event.done, message.event.total)

    @work(thread=True, exit_on_error=False)
    def _describe(self) -> None:
        self.post_message(self.Loaded(self._load()))

    def on_cells_screen_loaded(self, message: Loaded) -> None:
        self.rows = list(message.matrix.rows)
        self.cells = [row.cell for row in self.rows]
        try:
            self.verdicts = {v.profile: v for v in verdicts(message.matrix)}
            self.verdict_note = ""
        except EffctxError as exc:
            self.verdicts, self.verdict_note = {}, f"no keep/drop verdicts: {exc}"
        self._fill()
        runnable = sum(c.runnable for c in self.cells)
        certified = len(message.matrix.certified())
        damaged = f" · {len(message.matrix.damaged)} damaged certificate(s) left in place" if message.matrix.damaged else ""
        self.query_one("#cells-note", Static).update(
            f"{len(self.cells)} cells, {runnable} runnable here, {certified} certified{damaged} · ● running · "
            "Enter asks to swap, Enter again swaps")

    def _fill(self) -> None:
        """The rows, the cursor on the running cell."""
        table = self.query_one(DataTable)
        table.clear()
        current = self._current()
        for row in self.rows:
            table.add_row(*cell_row(row, current, self.verdicts.get(row.cell.profile), self._standing(table, row)))
        profiles = [c.profile for c in self.cells]
        table.move_cursor(row=profiles.index(current) if current in profiles else 0)
        table.focus()

    def _restyle(self, _theme: Theme) -> None:
        # the table's cells hold the colours of the theme they were drawn in
        table = self.query_one(DataTable)
        column = COLUMNS.index("certification")
        for index, row in enumerate(self.rows):
            table.update_cell_at(Coordinate(index, column), self._standing(table, row))

    @staticmethod
    def _standing(table: DataTable, row: MatrixRow) -> Text:
        """The certification cell, in the theme's colour of its standing as the table draws it."""
        return Text(row.advertised, style=rich_style(table, standing_style(row)))

    @on(DataTable.RowHighlighted)
    def _detail(self, event: DataTable.RowHighlighted) -> None:
        if not 0 <= event.cursor_row < len(self.cells):
            return
        row = self.rows[event.cursor_row]
        if self._asked != row.cell.profile:
            self._asked = None
        self.query_one("#cells-detail", Static).update(self._describe_row(row))

    def _describe_row(self, row: MatrixRow) -> Content:
        """What the cell is, standing and verdict first (a short terminal shows them
        without scrolling), then what runs it, its settings, limits and capabilities."""
        # Content, not Rich Text: its styles name the theme's variables, read at each paint
        cell = row.cell
        lines: list[tuple[str, str]] = [
            (f"{cell.backend} · {cell.profile} · {cell.device} · {cell.model}", "bold"),
            (f"{row.advertised}: {row.note}", standing_style(row)),
        ]
        if row.effective is not None:
            lines.append((effective_sentence(row.effective), "bold"))
        verdict = self.verdicts.get(cell.profile)
        if verdict is not None:
            lines.append((f"verdict: {verdict.verdict}", "bold"))
            lines += [(f"  {line}", MUTED) for line in verdict.evidence]
        elif self.verdict_note:
            lines.append((self.verdict_note, MUTED))
        lines.append((("runs: " if cell.runnable else "unsupported: ") + cell.reason, ""))
        if cell.preparation:
            lines.append((f"first use: {cell.preparation}", "$warning"))
        if cell.info is not None:
            residency = cell.info.capabilities.residency_map
            lines.append((f"residency map: {residency.source} ({residency.reason})", ""))
        settings = cell_settings(cell)
        lines.append((" · ".join(f"{name} {value}" for name, value in settings.items()), ""))
        if cell.info is not None:
            lines += [(f"limit {lim.name}: {format_count(lim.tokens)} tokens — {lim.reason}", "")
                      for lim in cell.info.limits]
            caps = cell.info.capabilities
            lines += [(f"{key}: {'yes' if cap.supported else 'no'} — {cap.reason}", MUTED)
                      for key, cap in caps.flags().items()]
            lines.append((f"rollback: {caps.safe_rollback}", MUTED))
            lines += [(f"{key}: {note}", MUTED) for key, note in caps.notes.items()]
        return Content("\n").join(Content.styled(text, style) for text, style in lines)

    @on(DataTable.RowSelected)
    def _selected(self, event: DataTable.RowSelected) -> None:
        # The table takes Enter for itself (select the row); selecting a row is the swap.
        self.action_swap()

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        """Swap is hidden while a swap runs: one at a time."""
        return not (self.swapping and action == "swap")

    def action_swap(self) -> None:
        table = self.query_one(DataTable)
        if self._swap is None or not self.cells:
            return
        cell = self.cells[table.cursor_row]
        if not cell.runnable:
            self.notify(f"{cell.profile} cannot run here: {cell.reason}", severity="warning")
            return
        if cell.profile == self._current():
            self.notify("That is the running cell.")
            return
        if self._is_busy() or self.swapping:
            self.notify("A reply or a swap is still running; Esc stops it.", severity="warning")
            return
        if self._asked != cell.profile:
            # A swap replaces the session the conversation runs on: a reflexive Enter
            # only asks.
            self._asked = cell.profile
            cost = f" (the first use {cell.preparation})" if cell.preparation else ""
            self.query_one("#cells-note", Static).update(
                f"Swap the conversation to {cell.profile}{cost}? Enter again to go ahead, or pick another cell.")
            return
        self._asked = None
        self.swapping = True
        self.refresh_bindings()
        self.query_one("#cells-note", Static).update(f"swapping to {cell.profile}… (Esc cancels a recompute)")
        self._run_swap(cell)

    def action_back(self) -> None:
        if self.swapping:
            self._cancel()
            self.query_one("#cells-note", Static).update("cancelling the swap…")
        else:
            self.app.pop_screen()

    def _swap_progress(self, done: int, total: int) -> None:
        """A chunk of the running swap's recompute."""
        if self.swapping:
            bar = self.query_one("#swap-progress", ProgressBar)
            bar.add_class("-running")
            bar.update(total=total, progress=done)

    def _preparing(self, stage: str, done: int, total: int) -> None:
        """Progress of a cell's preparation, from the swap worker's thread."""
        def show() -> None:
            self.query_one("#cells-note", Static).update(f"preparing: {stage}… (this runs once)")
            bar = self.query_one("#swap-progress", ProgressBar)
            bar.add_class("-running")
            bar.update(total=max(total, 1), progress=done)
        self.app.call_from_thread(show)

    @work(thread=True, exclusive=True, exit_on_error=False)
    def _run_swap(self, cell: Cell) -> None:
        assert self._swap is not None  # action_swap runs this only with a swap
        try:
            if cell.preparation and self._prepare is not None:
                self._prepare(cell, self._preparing)
            self.post_message(self.Swapped(self._swap(cell), None))
        except Cancelled as exc:
            self.post_message(self.Swapped(None, str(exc), cancelled=True))
        except EffctxError as exc:
            self.post_message(self.Swapped(None, str(exc)))

    def on_cells_screen_swapped(self, message: Swapped) -> None:
        self.swapping = False
        self.refresh_bindings()
        self.query_one("#swap-progress", ProgressBar).remove_class("-running")
        note = self.query_one("#cells-note", Static)
        if message.cancelled:
            assert message.error is not None  # a cancelled swap says what was cancelled
            note.update(message.error)
            return
        if message.error:
            note.update(f"swap failed: {message.error}")
            self.notify(message.error, severity="error")
            return
        r = message.result
        assert r is not None  # a swap without an error has its result
        note.update(swap_sentence(r))
        self._fill()
