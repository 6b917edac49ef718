"""The one-line live status of the session: residency, reuse and speed."""

from __future__ import annotations

from textual.content import Content
from textual.widgets import Static

from effctx_core.engine import TurnResult
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
            (f"TTFT {done.ttft_ms:.0f} ms", "bold"),
            f" · prefill {done.prefill_tps:.0f} tok/s · decode {done.decode_tps:.1f} tok/s",
            (f" · {cause}", MUTED),
        ))

    def show_busy(self, what: str, resident: int, n_ctx: int) -> None:
        self.update(self._residency(resident, n_ctx) + Content.styled(f"  │  {what}", "italic"))

    @staticmethod
    def _residency(resident: int, n_ctx: int) -> Content:
        return Content.assemble((f"resident {resident}", "bold"), f" / {n_ctx} · available {n_ctx - resident}")
