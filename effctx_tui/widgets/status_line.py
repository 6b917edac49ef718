"""The one-line live status of the session: residency, reuse and speed."""

from __future__ import annotations

from textual.content import Content
from textual.widgets import Static

from effctx_core.engine import TurnResult
from effctx_core.units import format_ms, format_rate
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
            "  │  last turn: ",
            (f"reused {done.reused}", "bold $text-success"),
            " · ",
            (f"prefilled {done.prefilled}", "bold $text-warning"),
            (f" · dropped {done.dropped}", "bold $text-error") if done.dropped else "",
            f" · generated {done.generated}\n",
            *self._speeds(done),
            (cause, MUTED),
        ))

    @staticmethod
    def _speeds(done: TurnResult) -> list[str | tuple[str, str]]:
        """Only what was measured: no TTFT and no decode rate for a turn that generated
        nothing (one cancelled in its prefill), no rate where no time was taken."""
        parts: list[str | tuple[str, str]] = [(f"TTFT {format_ms(done.ttft_ms)}", "bold")] if done.generated else []
        rates = (("prefill", format_rate(done.prefill_tps)),
                 ("decode", format_rate(done.decode_tps) if done.generated else None))
        parts += [f"{name} {rate}" for name, rate in rates if rate is not None]
        return [piece for part in parts for piece in (part, " · ")]

    def show_busy(self, what: str, resident: int, n_ctx: int) -> None:
        self.update(self._residency(resident, n_ctx) + Content.styled(f"  │  {what}", "italic"))

    @staticmethod
    def _residency(resident: int, n_ctx: int) -> Content:
        return Content.assemble((f"resident {resident}", "bold"), f" / {n_ctx} · available {n_ctx - resident}")
