"""The session engine: the one object the CLI and the console drive, and what it returns."""

from effctx_core.engine.checkpoints import session_owner
from effctx_core.engine.protocol import ConsoleEngine, EventSource
from effctx_core.engine.records import (
    NodeRestore,
    PrefillCancelled,
    PrefixLoad,
    ScoreResult,
    SwapCancelled,
    SwapResult,
)
from effctx_core.engine.session_engine import SessionEngine
from effctx_core.events.trace import TurnResult

__all__ = ["ConsoleEngine", "EventSource", "NodeRestore", "PrefillCancelled", "PrefixLoad", "ScoreResult",
           "SessionEngine", "SwapCancelled", "SwapResult", "TurnResult", "session_owner"]
