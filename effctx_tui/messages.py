"""Messages that carry engine events from worker threads to the app thread."""

from __future__ import annotations

from textual.message import Message

from effctx_core.contract import ModelInfo
from effctx_core.events.trace import Event


class EngineEvent(Message):
    """An engine event, posted from the worker thread that produced it."""

    def __init__(self, event: Event) -> None:
        super().__init__()
        self.event = event


class EngineReady(Message):
    def __init__(self, info: ModelInfo) -> None:
        super().__init__()
        self.info = info


class EngineFailed(Message):
    """The model could not be prepared or opened, or its preparation was cancelled."""

    def __init__(self, message: str, cancelled: bool = False) -> None:
        super().__init__()
        self.message = message
        self.cancelled = cancelled


class TurnDone(Message):
    """The turn worker has returned (finished, stopped or failed)."""
