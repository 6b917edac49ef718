"""The effctx console: one App, one engine, backend work in thread workers."""

from __future__ import annotations

import socket
from pathlib import Path
from typing import TYPE_CHECKING, Final, Literal
from urllib.parse import urlsplit

from textual import work

from effctx_core.api.client import EndpointConsole
from effctx_core.bench.cell import CellBenchPlan
from effctx_core.cancel import CancelToken
from effctx_core.engine import ConsoleEngine, PrefillCancelled, SessionEngine
from effctx_core.engine.queued import QueuedEngine
from effctx_core.engine.service import EngineService
from effctx_core.errors import Cancelled, EffctxError
from effctx_core.events.follow import TraceFollower
from effctx_core.events.reader import Trace
from effctx_core.events.trace import Event, ModelProgress
from effctx_core.models import resolve_model
from effctx_core.profiles import DEFAULT_PROFILE, Profile
from effctx_core.snapshots import SnapshotStore
from effctx_core.snapshots.tree_file import session_path
from effctx_tui.console import ConsoleApp
from effctx_tui.messages import EngineEvent, EngineFailed, EngineLoading, EngineReady
from effctx_tui.options import ApiAddress
from effctx_tui.replay_player import ReplayPlayer
from effctx_tui.screens.session import ConsoleHost, SessionScreen

if TYPE_CHECKING:
    from effctx_core.api.server import EndpointThread

# Requests (the endpoint's and the console's own turns) that may wait for the engine.
API_QUEUE = 16

# The default of `checkpoints`: a store in the user cache dir. None is a choice of its
# own (nodes keep no state, so every restore recomputes), hence a named default.
USER_CACHE: Final = "user-cache"


def _store(choice: SnapshotStore | None | Literal["user-cache"]) -> SnapshotStore | None:
    return SnapshotStore() if choice == USER_CACHE else choice


class EffctxApp(ConsoleApp):
    """The console over a SessionEngine; stylesheet, themes, help and palette come from ConsoleApp."""

    TITLE = "effctx"

    def __init__(
        self,
        model: str | Path | None = None,
        profile: Profile = DEFAULT_PROFILE,
        max_tokens: int = 128,
        trace: str | Path | None = None,
        checkpoints: SnapshotStore | None | Literal["user-cache"] = USER_CACHE,
        session_name: str | None = None,
        replay: Trace | None = None,
        replay_speed: float = 1.0,
        replay_paused: bool = False,
        follow: TraceFollower | None = None,
        talk: EndpointConsole | None = None,
        theme: str | None = None,
        prefix_text: str | None = None,
        prefix_name: str = "prefix",
        prefix_cache: SnapshotStore | None | Literal["user-cache"] = USER_CACHE,
        warnings: list[str] | None = None,
        api: ApiAddress | None = None,
        api_socket: socket.socket | None = None,
    ) -> None:
        super().__init__(theme=theme)
        self.model_arg = model
        self.profile = profile
        self.max_tokens = max_tokens
        self.trace = trace
        self.checkpoints = checkpoints
        # A stable prefix (system prompt, document) made resident before the first turn,
        # restored from the prefix cache when this cell stored it before.
        self.prefix_text, self.prefix_name, self.prefix_cache = prefix_text, prefix_name, prefix_cache
        # The tree is saved under this name after every change, so a console can be
        # closed and reopened where it was (`effctx --session NAME`).
        self.session_name = session_name
        self.warnings = list(warnings or [])  # said by main on stderr too, hidden once the console draws
        self.engine: ConsoleEngine | None = None
        self._loading: CancelToken | None = None  # set while the model is prepared and opened
        self.bench_plan = CellBenchPlan()  # what the benchmark screen runs
        # A recorded trace to play instead of a model (`effctx --replay FILE`), or one
        # followed as another process writes it (`effctx --watch FILE`).
        self.player = ReplayPlayer(replay, replay_speed, not replay_paused, follow) if replay is not None else None
        # Where a watching console's own turns go: the endpoint of the engine it watches.
        self.talk = talk
        self.session_screen = SessionScreen(max_tokens, self.player)
        # The endpoint this console serves its engine on (`--api`), once the model is open.
        self.api, self._api_socket = api, api_socket
        self.endpoint: EndpointThread | None = None

    def on_mount(self) -> None:
        self.push_screen(self.session_screen)
        for warning in self.warnings:
            self.notify(warning, severity="warning", timeout=15)
        if self.player is not None:
            self.engine = self.player.engine  # the session screen starts the player once mounted
            self.engine.subscribe(self._forward)
        else:
            self.open_engine()

    def _forward(self, event: Event) -> None:
        # Called on the worker thread; post_message is thread-safe and does not wait,
        # so the decode loop never blocks on the UI. The app subscribes the session screen
        # itself: the engine's first events (its opening, a prefix load) come before the
        # screen could know of the engine.
        self.session_screen.post_message(EngineEvent(event))

    @property
    def loading(self) -> bool:
        return self._loading is not None

    def open_engine(self) -> None:
        """Prepare the model and open the engine in a worker; `cancel_loading` stops it."""
        self._loading = CancelToken()
        self.session_screen.post_message(EngineLoading())
        self._open_engine(self._loading)

    def cancel_loading(self) -> None:
        if self._loading is not None:
            self._loading.cancel()

    @work(thread=True, group="engine", exit_on_error=False)
    def _open_engine(self, token: CancelToken) -> None:
        def progress(stage: str, done: int, total: int) -> None:
            self._forward(ModelProgress(stage=stage, done=done, total=total))
            # Raised between two blocks: the half-written model file is removed.
            token.check("model preparation")

        engine = None
        try:
            path = resolve_model(self.model_arg, progress=progress)
            token.check("model preparation")
            engine = SessionEngine(path, self.profile, trace_path=self.trace, checkpoints=_store(self.checkpoints),
                                   prefix_cache=_store(self.prefix_cache) if self.prefix_text is not None else None)
            engine.subscribe(self._forward)
            info = engine.open()
            # llama.cpp's load cannot be stopped half way; a cancel during it closes the
            # engine right after, so a cancel always ends with no model open.
            token.check("model loading")
            # exists(), not the listing: anything at the session's path (a FIFO, a damaged
            # file) is read and refused or quarantined, never silently saved over.
            reopen = bool(self.session_name and session_path(self.session_name).exists())
            if self.prefix_text is not None and reopen:
                self.notify(f"{self.prefix_name} not loaded: session {self.session_name} "
                            "is reopened with its own conversation", severity="warning")  # thread-safe
            elif self.prefix_text is not None:
                self._load_prefix(engine, self.prefix_text, token)
        except (EffctxError, OSError) as exc:
            # Shown, never left to die in the worker (the console would wait on "Loading…").
            if engine is not None:
                engine.close()
            self._loading = None
            message = str(exc) if isinstance(exc, EffctxError) else f"{type(exc).__name__}: {exc}"
            self.session_screen.post_message(EngineFailed(message, cancelled=isinstance(exc, Cancelled)))
            return
        self._loading = None
        self.engine = engine
        self.session_screen.post_message(EngineReady(info))
        if reopen:
            assert self.session_name  # reopen says there is a session of this name
            try:
                engine.load_session(self.session_name)
            except EffctxError as exc:
                name = self.session_name
                if session_path(name).exists():
                    # Still there and unreadable (permissions, not a file): never save over it.
                    exc = EffctxError(f"{exc}; this console does not save the session")
                    self.session_name = None
                self.session_screen.post_message(EngineFailed(f"session {name} not reopened: {exc}"))
        if self._api_socket is not None:
            # After the session is back: the endpoint's first request sees its tree.
            self.engine = self._serve(engine)

    @property
    def endpoint_address(self) -> str | None:
        if self.talk is not None:  # the endpoint of the engine this console watches
            return urlsplit(self.talk.base_url).netloc
        return self.endpoint.address if self.endpoint is not None else None

    def _serve(self, engine: SessionEngine) -> QueuedEngine:
        """Share the open engine with the endpoint: one queue for the endpoint's requests
        and this console's turns, in arrival order."""
        from effctx_core.api.app import ApiSettings
        from effctx_core.api.server import EndpointThread

        assert self.api is not None and self._api_socket is not None  # both come from --api
        service = EngineService(lambda _progress: engine, queue_size=API_QUEUE)
        service.start()
        settings = ApiSettings(model_name=engine.model_name, api_key=self.api.key)
        self.endpoint = EndpointThread(service, settings, self._api_socket, API_QUEUE)
        self.endpoint.start()
        self.call_from_thread(self.session_screen.show_endpoint)
        return QueuedEngine(service, engine)

    def _load_prefix(self, engine: SessionEngine, text: str, token: CancelToken) -> None:
        try:
            with token.forwarded_to(engine.cancel):
                engine.load_prefix(text)
        except PrefillCancelled as stop:
            raise Cancelled(f"loading {self.prefix_name} cancelled after {stop.done} of {stop.total} tokens") from None

    @work(thread=True, group="save", exclusive=True, exit_on_error=False)
    def save_session(self) -> None:
        if self.engine is None or not self.session_name or not self.engine.can_run:
            return
        try:
            self.engine.save_session(self.session_name)
        except EffctxError as exc:
            self.notify(f"session not saved: {exc}", severity="warning")

    def on_unmount(self) -> None:
        if self.endpoint is not None:
            self.endpoint.stop()  # stops the engine's service too, which closes the engine
            return
        if self._api_socket is not None:
            self._api_socket.close()  # the model never opened: nothing served on it
        if self.engine is not None:
            self.engine.cancel()
            self.engine.close()


_HOST: type[ConsoleHost] = EffctxApp  # mypy checks here that the session screen's app is one
