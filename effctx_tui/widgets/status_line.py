"""The one-line live status of the session: residency, reuse and speed."""

from __future__ import annotations

from textual.content import Content
from textual.widgets import Static

from effctx_core.engine import TurnResult
from effctx_core.units import format_count, turn_speeds
from effctx_tui.themes import MUTED


class StatusLine(Static):
    # Content, not Rich Text: its styles may name theme variables (MUTED), read at each paint
    def show_loading(self, what: str) -> None:
        self.update(Content.styled(what, "italic"))

    def show_ready(self, resident: int, n_ctx: int) -> None:
        self.update(self._residency(resident, n_ctx) + Content.styled("  │  no turn yet", MUTED))

    def show_turn(self, done: TurnResult, cause: str) -> None:
        """The last turn's counts and speeds, and `cause`: why it reused what it reused,
        in the words of the timings screen (events/explain.py)."""
        self.update(Content.assemble(
            self._residency(done.resident, done.n_ctx),
            # The reply's last token, on the tape, enters the cache with the next input.
            (f" · {format_count(done.pending)} pending", MUTED) if done.pending else "",
            "  │  last turn: ",
            (f"reused {format_count(done.reused)}", "bold $text-success"),
            " · ",
            (f"prefilled {format_count(done.prefilled)}", "bold $text-warning"),
            (f" · dropped {format_count(done.dropped)}", "bold $text-error") if done.dropped else "",
            f" · generated {format_count(done.generated)}\n",
            *self._speeds(done),
            (cause, MUTED),
        ))

    @staticmethod
    def _speeds(done: TurnResult) -> list[tuple[str, str]]:
        """Only what was measured (turn_speeds), each followed by a separator."""
        speeds = turn_speeds(done.generated, done.ttft_ms, done.prefill_tps, done.decode_tps)
        parts = [(f"{name} {figure}", "bold" if name == "TTFT" else "") for name, figure in speeds]
        return [piece for part in parts for piece in (part, (" · ", ""))]

    def show_busy(self, what: str, resident: int, n_ctx: int) -> None:
        self.update(self._residency(resident, n_ctx) + Content.styled(f"  │  {what}", "italic"))

    @staticmethod
    def _residency(resident: int, n_ctx: int) -> Content:
        return Content.assemble((f"resident {format_count(resident)}", "bold"),
                                f" / {format_count(n_ctx)} · available {format_count(n_ctx - resident)}")
