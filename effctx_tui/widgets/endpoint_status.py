"""Where the console serves its engine as an OpenAI endpoint, and how many requests wait."""

from __future__ import annotations

from textual.content import Content
from textual.widgets import Static

from effctx_core.units import format_counted
from effctx_tui.themes import MUTED


class EndpointStatus(Static):
    """Hidden unless the console serves an endpoint (`effctx --api`)."""

    DEFAULT_CSS = """
    EndpointStatus { display: none; height: 1; padding: 0 1; }
    EndpointStatus.serving { display: block; }
    """

    def show(self, address: str, waiting: int, serving: bool) -> None:
        """`serving`: a request's turn runs now (it no longer waits)."""
        self.add_class("serving")
        queue = format_counted(waiting, "request") + " waiting" if waiting else "no request waiting"
        if serving:
            queue = f"serving a request · {queue}"
        self.update(Content.assemble(("API ", "bold"), f"http://{address}/v1", ("  │  " + queue, MUTED)))
