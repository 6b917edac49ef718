"""The effctx console: one App, one engine, backend work in thread workers."""

from __future__ import annotations

from pathlib import Path

from textual import work
from textual.app import App

from effctx_core.contract import EffctxError
from effctx_core.engine import SessionEngine
from effctx_core.models import resolve_model
from effctx_core.profiles import DEFAULT_PROFILE, Profile
from effctx_core.trace import Event, ModelProgress

from .messages import EngineEvent, EngineFailed, EngineReady
from .screens.session import SessionScreen


class EffctxApp(App):
    CSS_PATH = "effctx.tcss"
    TITLE = "effctx"

    def __init__(
        self,
        model: str | Path | None = None,
        profile: Profile = DEFAULT_PROFILE,
        max_tokens: int = 128,
        trace: str | Path | None = None,
    ) -> None:
        super().__init__()
        self.model_arg = model
        self.profile = profile
        self.max_tokens = max_tokens
        self.trace = trace
        self.engine: SessionEngine | None = None
        self.session_screen = SessionScreen(max_tokens)

    def on_mount(self) -> None:
        self.push_screen(self.session_screen)
        self.open_engine()

    def _forward(self, event: Event) -> None:
        # Called on the worker thread; post_message is thread-safe and does not wait,
        # so the decode loop never blocks on the UI.
        self.session_screen.post_message(EngineEvent(event))

    @work(thread=True, group="engine", exit_on_error=False)
    def open_engine(self) -> None:
        try:
            path = resolve_model(
                self.model_arg,
                progress=lambda stage, done, total: self._forward(ModelProgress(stage=stage, done=done, total=total)),
            )
            engine = SessionEngine(path, self.profile, trace_path=self.trace)
            engine.subscribe(self._forward)
            info = engine.open()
        except EffctxError as exc:
            self.session_screen.post_message(EngineFailed(str(exc)))
            return
        self.engine = engine
        self.session_screen.post_message(EngineReady(info))

    def on_unmount(self) -> None:
        if self.engine is not None:
            self.engine.cancel()
            self.engine.close()
