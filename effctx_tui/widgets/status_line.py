"""The one-line live status of the session: residency, reuse and speed."""

from __future__ import annotations

from rich.text import Text
from textual.widgets import Static

from effctx_core.contract import TurnResult


class StatusLine(Static):
    def show_loading(self, what: str) -> None:
        self.update(Text(what, style="italic"))

    def show_ready(self, resident: int, n_ctx: int) -> None:
        self.update(self._residency(resident, n_ctx) + Text("  │  no turn yet", style="dim"))

    def show_turn(self, done: TurnResult) -> None:
        text = self._residency(done.resident, done.n_ctx)
        text.append("  │  last turn: ")
        text.append(f"reused {done.reused}", style="bold green")
        text.append(" · ")
        text.append(f"prefilled {done.prefilled}", style="bold yellow")
        if done.dropped:
            text.append(f" · dropped {done.dropped}", style="bold red")
        text.append(f" · generated {done.generated}\n")
        text.append(f"TTFT {done.ttft_ms:.0f} ms", style="bold")
        text.append(f" · prefill {done.prefill_tps:.0f} tok/s · decode {done.decode_tps:.1f} tok/s")
        text.append(f" · {done.prefix_reason}", style="dim")
        self.update(text)

    def show_busy(self, what: str, resident: int, n_ctx: int) -> None:
        self.update(self._residency(resident, n_ctx) + Text(f"  │  {what}", style="italic"))

    @staticmethod
    def _residency(resident: int, n_ctx: int) -> Text:
        text = Text()
        text.append(f"resident {resident}", style="bold")
        text.append(f" / {n_ctx} · available {n_ctx - resident}")
        return text
