"""Messages that carry engine events from worker threads to the app thread."""

from __future__ import annotations

from textual.message import Message
from textual.message_pump import MessagePump

from effctx_core.contract import ModelInfo
from effctx_core.engine import EventSource
from effctx_core.events.subscribers import Unsubscribe
from effctx_core.events.trace import Event


class EngineEvent(Message):
    """An engine event, posted from the worker thread that produced it."""

    def __init__(self, event: Event) -> None:
        super().__init__()
        self.event = event


def post_events(target: MessagePump, source: EventSource | None) -> Unsubscribe:
    """Post every event of `source` to `target` as an EngineEvent until the returned call.
    post_message is thread-safe and does not wait, so a live engine's worker thread never
    blocks on the UI, and the target handles each event on the app thread."""
    if source is None:
        return lambda: None

    def post(event: Event) -> None:
        target.post_message(EngineEvent(event))

    return source.subscribe(post)


class EngineLoading(Message):
    """The app began preparing and opening the model (Esc cancels it)."""


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
