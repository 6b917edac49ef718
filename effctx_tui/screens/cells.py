"""The cells screen: the certification matrix (what this machine can run, each cell's
standing, capabilities, limits and keep/drop verdict) and a live swap of the running
conversation to another cell."""

from __future__ import annotations

from typing import Callable

from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.message import Message
from textual.screen import Screen
from textual.widgets import DataTable, Footer, Header, ProgressBar, Static

from effctx_core.backends.registry import spec
from effctx_core.cells import Cell
from effctx_core.certify.matrix import CERTIFIED, FAILED, UNCERTIFIED, Matrix, MatrixRow
from effctx_core.certify.verdict import Verdict, verdicts
from effctx_core.engine import EventSource, SwapResult
from effctx_core.errors import Cancelled, EffctxError
from effctx_core.events.subscribers import Unsubscribe
from effctx_core.events.trace import PrefillChunk
from effctx_tui.messages import EngineEvent, post_events

COLUMNS = ("backend", "profile", "n_ctx", "K/V", "FA", "swa_full", "policy", "shift", "exact replay",
           "certification", "verdict")
_STANDING_STYLE = {CERTIFIED: "green", UNCERTIFIED: "yellow", FAILED: "red"}


def cell_row(row: MatrixRow, current: str | None, verdict: Verdict | None) -> list[Text | str]:
    cell = row.cell
    p, info = cell.profile_record, cell.info
    caps = info.capabilities if info else None
    options = spec(p.backend).options_of(p) if p else None
    yes_no = lambda flag: "yes" if flag else "no"  # noqa: E731
    name = Text(("● " if cell.profile == current else "  ") + cell.profile, style="bold" if cell.profile == current else "")
    standing = Text(row.advertised, style=_STANDING_STYLE.get(row.status, "dim"))
    return [
        cell.backend,
        name,
        str(info.n_ctx) if info else "-",
        f"{p.kv_cache_type_k}/{p.kv_cache_type_v}" if p else "-",
        ("on" if options.flash_attn else "off") if options is not None and hasattr(options, "flash_attn") else "-",
        yes_no(options.swa_full) if options is not None and hasattr(options, "swa_full") else "-",
        p.residency.policy if p else "-",
        yes_no(caps.position_shift.supported) if caps else "-",
        yes_no(caps.exact_snapshot.supported) if caps else "-",
        standing,
        verdict.verdict if verdict is not None else "-",
    ]


class CellsScreen(Screen):
    """Lists cells (loaded by `load`, in a worker); Enter swaps to the selected one with
    `swap`, Esc during a swap's recompute calls `cancel`; `events` show the recompute's progress."""

    BINDINGS = [
        Binding("enter", "swap", "Swap to cell"),
        Binding("escape", "back", "Back / cancel swap"),
    ]
    DEFAULT_CSS = """
    CellsScreen {
        #cells-note { height: auto; padding: 0 1; background: $panel; }
        #swap-progress { display: none; padding: 0 1; }
        #swap-progress.-running { display: block; }
        #cells-detail { height: auto; padding: 0 1; border: round $panel-lighten-2; }
        DataTable { height: 1fr; }
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
        # The cell whose preparation (a conversion) the user was told the cost of: a
        # second Enter on it goes ahead.
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
        yield DataTable(id="cells-table", cursor_type="row", zebra_stripes=True)
        yield Static("", id="cells-detail")
        yield Footer()

    def on_mount(self) -> None:
        self.query_one(DataTable).add_columns(*COLUMNS)
        self._describe()
        self._unfollow = post_events(self, self._events)

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
            f"{len(self.cells)} cells, {runnable} runnable here, {certified} certified{damaged} · ● the running cell · "
            "Enter swaps the conversation to the selected cell")

    def _fill(self) -> None:
        table = self.query_one(DataTable)
        table.clear()
        current = self._current()
        for row in self.rows:
            table.add_row(*cell_row(row, current, self.verdicts.get(row.cell.profile)))
        table.focus()

    @on(DataTable.RowHighlighted)
    def _detail(self, event: DataTable.RowHighlighted) -> None:
        if not 0 <= event.cursor_row < len(self.cells):
            return
        row = self.rows[event.cursor_row]
        cell = row.cell
        text = Text()
        text.append(f"{cell.backend} · {cell.profile} · {cell.device} · {cell.model}\n", style="bold")
        if cell.info is not None:
            for lim in cell.info.limits:
                text.append(f"limit {lim.name}: {lim.tokens} tokens — {lim.reason}\n")
            caps = cell.info.capabilities
            for key, cap in caps.flags().items():
                text.append(f"{key}: {'yes' if cap.supported else 'no'} — {cap.reason}\n", style="dim")
            text.append(f"rollback: {caps.safe_rollback}\n", style="dim")
            for key, note in caps.notes.items():
                text.append(f"{key}: {note}\n", style="dim")
        text.append(("runs: " if cell.runnable else "unsupported: ") + cell.reason + "\n")
        text.append(f"{row.advertised}: {row.note}", style=_STANDING_STYLE.get(row.status, "dim"))
        verdict = self.verdicts.get(cell.profile)
        if verdict is not None:
            text.append(f"\nverdict: {verdict.verdict}\n", style="bold")
            text.append("\n".join(f"  {line}" for line in verdict.evidence), style="dim")
        elif self.verdict_note:
            text.append(f"\n{self.verdict_note}", style="dim")
        if cell.preparation:
            text.append(f"\nfirst use: {cell.preparation}", style="yellow")
        self.query_one("#cells-detail", Static).update(text)

    @on(DataTable.RowSelected)
    def _selected(self, event: DataTable.RowSelected) -> None:
        # The table takes Enter for itself (select the row); selecting a row is the swap.
        self.action_swap()

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
        if cell.preparation and self._asked != cell.profile:
            self._asked = cell.profile
            self.query_one("#cells-note", Static).update(
                f"{cell.profile}: the first use {cell.preparation}. Enter again to go ahead, or pick another cell.")
            return
        self.swapping = True
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
        how = "state carried over" if r.mode == "exact" else f"recomputed {r.recomputed} tokens"
        note.update(f"now on {r.new_profile}: {how} in {r.ms:.0f} ms ({r.reason})")
        self._fill()
