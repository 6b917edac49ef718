"""The session screen: type a prompt, watch the reply stream, see what was reused."""

from __future__ import annotations

import math
import time
from dataclasses import replace
from functools import cached_property
from typing import TYPE_CHECKING, Any, Callable, Protocol, cast

from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal
from textual.screen import Screen
from textual.widgets import Header, Input, Label, ProgressBar

from effctx_core.bench.cell import CellBenchPlan
from effctx_core.certify.matrix import cell_matrix
from effctx_core.contract import DecodeConfig
from effctx_core.engine import ConsoleEngine, NodeRestore, TurnResult
from effctx_core.errors import EffctxError
from effctx_core.events.explain import reset_sentence, swap_sentence
from effctx_core.events.requests import RequestLog
from effctx_core.events.trace import (
    CellSwapped,
    ErrorRaised,
    ModelProgress,
    NodeAdded,
    NodeRestored,
    NodeUnsaved,
    PrefillChunk,
    PrefixCacheLookup,
    RequestQueued,
    RequestRouted,
    RequestServed,
    SessionOpened,
    SwapAbandoned,
    TokenDecoded,
    TurnFinished,
    TurnStarted,
)
from effctx_core.residency.policies import keeps_budget
from effctx_core.units import format_count, format_counted, format_ms
from effctx_tui.messages import EngineEvent, EngineFailed, EngineLoading, EngineReady, TurnDone
from effctx_tui.replay_controls import ReplayControls
from effctx_tui.screens.benchmark import BenchmarkScreen
from effctx_tui.screens.cells import CellsScreen
from effctx_tui.screens.prompt_file import PromptFileDialog
from effctx_tui.screens.requests import RequestsScreen
from effctx_tui.screens.residency import BudgetSteering, ResidencyScreen, changes_residency
from effctx_tui.screens.snapshots import BRANCH, SnapshotsScreen
from effctx_tui.screens.timings import TimingsScreen, engine_timeline
from effctx_tui.widgets.endpoint_status import EndpointStatus
from effctx_tui.widgets.footer import EffctxFooter
from effctx_tui.widgets.prompt_input import PromptInput
from effctx_tui.widgets.residency_strip import ResidencyStrip
from effctx_tui.widgets.snapshot_tree import restore_summary
from effctx_tui.widgets.status_line import StatusLine
from effctx_tui.widgets.transcript import Transcript

if TYPE_CHECKING:
    from effctx_core.api.client import EndpointConsole
    from effctx_core.cells import Cell
    from effctx_core.profiles import Profile
    from effctx_tui.replay_player import ReplayPlayer

# Prefills shorter than this finish before a progress bar would be readable.
PROGRESS_MIN_TOKENS = 256

# The first screen's notes: what a newcomer sees without being told.
STRIP_NOTE = ("From the first turn on, the coloured strip above the status line is the KV cache, block by "
              "block: sink, recent and hot are resident, cold is parked, evicted is gone (Ctrl+R explains it).")


def base_model_note(model: str) -> str:
    return (f"{model} is a base model: it continues text instead of following instructions, "
            "so expect loose answers to questions.")


def prefix_note(name: str, event: PrefixCacheLookup) -> str:
    """What became of a stable prefix, as the transcript's first line."""
    tokens, ms = format_counted(event.tokens, "token"), format_ms(event.ms)
    if event.result == "hit":
        return f"{name}: {tokens} restored from the prefix cache in {ms}"
    if event.result == "partial":
        how = (f"{name}: {format_count(event.restored)} of {tokens} restored from the prefix cache, "
               f"{format_count(event.tokens - event.restored)} prefilled, in {ms}")
    else:
        how = f"{name}: {tokens} prefilled in {ms}"
    if event.result == "off":
        return f"{how} (prefix cache off)"
    return f"{how}, stored in the prefix cache" if event.key else f"{how}, not stored in the prefix cache"


def _profile_of(cell: Cell) -> Profile:
    assert cell.profile_record is not None  # the cells screen swaps to runnable cells, which carry it
    return cell.profile_record


class ConsoleHost(Protocol):
    """What the session screen needs of its app, EffctxApp (which imports this screen, so
    the screen names the app's side instead of importing the app)."""

    engine: ConsoleEngine | None
    prefix_name: str
    session_name: str | None  # the name the tree is saved under (None: not saved)
    bench_plan: CellBenchPlan
    talk: EndpointConsole | None  # a watching console's turns go to the watched endpoint (`--endpoint`)

    @property
    def endpoint_address(self) -> str | None:
        """Where the console serves its engine as an OpenAI endpoint (`--api`), if it does."""
        ...

    def open_engine(self) -> None: ...

    def cancel_loading(self) -> None: ...

    def save_session(self) -> object: ...  # a Worker: saving runs in the background


# What the transcript says after a reply that did not end by itself (None: nothing).
_STOP_NOTES: dict[str, str | None] = {"stop": None, "eog": None, "n_ctx": "context full", "max_tokens": "max tokens"}


class SessionScreen(Screen):
    BINDINGS = [
        # Replay only (see check_action): the prompt is disabled then, so these reach us.
        *ReplayControls.BINDINGS,
        Binding("escape", "stop", "Stop", tooltip="Stop the reply, the prefill or the model preparation under way"),
        Binding("ctrl+l", "load_model", "Load model", tooltip="Load the model again after a cancelled or failed preparation"),
        Binding("ctrl+n", "new_conversation", "New conversation", tooltip="Start a new conversation; the tokens it shares with this one are reused"),
        Binding("ctrl+r", "residency", "Residency", tooltip="Which blocks the runtime holds, by class, and why"),
        Binding("ctrl+t", "snapshots", "Snapshots", tooltip="The snapshot tree of this session: restore, branch, compare"),
        Binding("ctrl+g", "timings", "Timings", tooltip="Prefill, decode and time to first token of every turn"),
        Binding("ctrl+o", "cells", "Cells", tooltip="What this machine can run, certified or not; swap the conversation to another cell"),
        Binding("ctrl+b", "bench", "Benchmark", tooltip="Measure this cell's throughput and passkey recall"),
        Binding("ctrl+y", "requests", "Requests", tooltip="The requests of the OpenAI-compatible endpoint: what each "
                "reused, its route, where it left its conversation"),
        Binding("ctrl+f", "prompt_file", "Insert file", tooltip="Put a text file into the prompt, as one marker like a long paste"),
        Binding("ctrl+q", "app.quit", "Quit", tooltip="Quit effctx"),
    ]

    def __init__(self, max_tokens: int, player: ReplayPlayer | None = None) -> None:
        """`player`: a recorded trace the console plays instead of running a model."""
        super().__init__()
        self.max_tokens = max_tokens
        self.busy = False
        self.ready = False
        self.loading = False  # from EngineLoading to EngineReady or EngineFailed
        self.turns_done = 0
        self.last_result: TurnResult | None = None
        self._replay = ReplayControls(player, self, self._clear_for_replay) if player is not None else None
        # Fed with every event from the start, so the timings screen has the history.
        self.timeline = engine_timeline(lambda: self.effctx_app.engine)
        self.requests = RequestLog()  # the endpoint's requests, for the requests screen, fed likewise
        self.restores: dict[str, NodeRestore] = {}  # node id -> its last restore, for the snapshots screen
        self._n_ctx = 0
        self._resident = 0
        self._introduced = False  # the first screen's notes (the strip, a base model) are said once
        self._enter_refused = -math.inf  # time.monotonic() of the last "Enter sent nothing" notice
        self._waiting: set[str] = set()  # the endpoint's requests queued and not yet started
        self._request_turn = 0  # the turn serving the endpoint's last routed request
        self._serving: str | None = None  # the request whose turn runs, until it is served

    @property
    def effctx_app(self) -> ConsoleHost:
        """The app, typed: this screen runs in an EffctxApp."""
        return cast("ConsoleHost", self.app)

    @property
    def _engine(self) -> ConsoleEngine:
        """The app's engine, where the caller's state says it is open (ready, busy, or an event from it)."""
        engine = self.effctx_app.engine
        assert engine is not None
        return engine

    @property
    def _replaying(self) -> ReplayControls:
        """The replay's controls, for its keys (check_action enables them only in a replay)."""
        assert self._replay is not None
        return self._replay

    def compose(self) -> ComposeResult:
        yield Header(show_clock=False)
        yield Transcript(id="transcript")
        with Horizontal(id="progress-row"):
            yield Label("", id="progress-label")
            yield ProgressBar(id="progress", show_eta=False)
        yield ResidencyStrip(id="residency-strip")
        yield StatusLine(id="status")
        yield EndpointStatus(id="endpoint")
        yield PromptInput(placeholder="Loading the model…", id="prompt")
        yield EffctxFooter()

    def on_mount(self) -> None:
        if self._replay is not None:
            self._start_replay(self._replay)
            return
        self.query_one(Input).focus()

    def _show_loading(self) -> None:
        self.query_one(StatusLine).show_loading("preparing the model… (Esc cancels)")
        self.query_one(Input).placeholder = "Loading the model…"
        self._show_progress("preparing the model", None, None)

    # ------------------------------------------------------------------ progress

    def _show_progress(self, label: str, done: int | None, total: int | None) -> None:
        row = self.query_one("#progress-row")
        row.display = True
        self.query_one("#progress-label", Label).update(label)
        bar = self.query_one(ProgressBar)
        bar.update(total=total, progress=done or 0)

    def _hide_progress(self) -> None:
        self.query_one("#progress-row").display = False

    # ------------------------------------------------------------------ replay

    def _start_replay(self, controls: ReplayControls) -> None:
        self._n_ctx = controls.player.engine.n_ctx
        self._hide_progress()
        prompt = self.query_one(Input)
        if self.effctx_app.talk is not None:
            prompt.placeholder = "Say something and press Enter: it goes to the endpoint, in its queue"
            prompt.focus()
            self._show_endpoint()
        elif controls.player.follow is not None:
            prompt.placeholder = "watching another process's engine: space pauses, n steps"
            prompt.disabled = True
        else:
            prompt.placeholder = "a recorded session: space plays/pauses, n steps, + and - change the speed"
            prompt.disabled = True
        self.query_one(StatusLine).show_ready(0, self._n_ctx)
        controls.start()

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        """Whether a key acts now; one that cannot is hidden, so the footer offers only the
        keys that act (busy, loading and ready change; refresh_bindings follows them)."""
        if self._replay is not None:
            if action == "new_conversation" and self.effctx_app.talk is not None:
                return not self.busy  # the console's own conversation on the watched engine
            return self._replay.allows(action, parameters)
        if ReplayControls.owns(action):
            return False
        if action == "load_model":  # after a failed or cancelled preparation
            return not self.ready and not self.loading
        if action == "stop":
            return self.busy or self.loading
        if action == "new_conversation":
            return self.ready and not self.busy
        if action in ("residency", "snapshots", "cells", "bench"):
            return self.ready
        return True

    def action_replay_toggle(self) -> None:
        self._replaying.toggle()

    def action_replay_restart(self) -> None:
        self._replaying.restart()

    def _clear_for_replay(self) -> None:
        """Empty the views, for the recording to play into them again."""
        self.query_one(Transcript).remove_children()
        self.turns_done = 0
        self.last_result = None
        self.restores.clear()
        self.timeline = engine_timeline(lambda: self.effctx_app.engine)
        self.requests = RequestLog()
        self._waiting.clear()
        self._serving = None
        self._resident = 0
        self._hide_progress()
        self._refresh_strip()
        self.query_one(StatusLine).show_ready(0, self._n_ctx)

    def action_replay_step(self) -> None:
        self._replaying.step()

    def action_replay_speed(self, direction: int) -> None:
        self._replaying.speed(direction)

    # ------------------------------------------------------------------ engine messages

    def on_engine_loading(self, message: EngineLoading) -> None:
        self.loading = True
        self.refresh_bindings()
        self._show_loading()

    def on_engine_ready(self, message: EngineReady) -> None:
        self.ready = True
        self.loading = False
        self.refresh_bindings()
        self._n_ctx = message.info.n_ctx
        self._hide_progress()
        facts = message.info.facts
        self._show_cell(facts.name, self._engine.profile.name, message.info.backend, message.info.n_ctx)
        prompt = self.query_one(Input)
        prompt.placeholder = "Say something and press Enter (Esc stops a reply)"
        self.query_one(StatusLine).show_ready(self._resident, self._n_ctx)
        if not self._introduced:
            self._introduced = True
            transcript = self.query_one(Transcript)
            transcript.add_note(STRIP_NOTE)
            if facts.chat_template is None:
                transcript.add_note(base_model_note(facts.name))

    def _show_cell(self, model: str, profile: str, backend: str, n_ctx: int) -> None:
        """What runs, in the header: the session's name (when it is saved), the model, the
        profile and its backend, the context."""
        name = self.effctx_app.session_name
        session = f"session {name} · " if name else ""
        self.sub_title = f"{session}{model} · {profile} on {backend} · n_ctx {n_ctx:,}"

    def _show_engine_state(self, what: str) -> None:
        """After an operation between turns (a swap, a cancelled swap): the status line and
        the strip as the engine holds them now, and what was done."""
        self._hide_progress()  # a recompute showed its prefill
        self._resident = self._engine.residency.report().resident_tokens
        self._refresh_strip()
        self.query_one(StatusLine).show_busy(what, self._resident, self._n_ctx)

    def on_engine_failed(self, message: EngineFailed) -> None:
        self.loading = False
        self._hide_progress()
        self.refresh_bindings()
        if not self.ready:
            self.query_one(Input).placeholder = "No model is open: Ctrl+L loads it"
        if message.cancelled:
            self.query_one(StatusLine).show_loading(f"{message.message}: Ctrl+L loads the model")
            return
        self.query_one(Transcript).add_error(message.message)
        self.query_one(StatusLine).show_loading(f"error: {message.message}")

    def action_load_model(self) -> None:
        if self.check_action("load_model", ()):
            self.loading = True  # now: a second Ctrl+L before EngineLoading arrives opens nothing
            self.effctx_app.open_engine()
            self.refresh_bindings()

    def _refresh_strip(self) -> None:
        engine = self.effctx_app.engine
        if engine is not None:  # None while it opens: a prefix load's chunks come before the engine
            self.query_one(ResidencyStrip).set_table(engine.residency.table())

    def _viewable_engine(self) -> ConsoleEngine | None:
        """The engine when there is something to look at: a live one that is ready, or a replay."""
        engine = self.effctx_app.engine
        return engine if engine is not None and (self.ready or not engine.can_run) else None

    def action_residency(self) -> None:
        engine = self._viewable_engine()
        if engine is None:
            return
        self.app.push_screen(ResidencyScreen.of_engine(engine, self._budget_steering(engine)))

    def _budget_steering(self, engine: ConsoleEngine) -> BudgetSteering | None:
        if not engine.can_run or not keeps_budget(engine.policy):
            return None
        n_ctx, block = engine.n_ctx, engine.profile.residency.block_size
        return BudgetSteering(
            set_budget=engine.set_budget, recompute_cold=engine.recompute_cold,
            is_busy=lambda: self.busy, n_ctx=n_ctx, step=max(block, n_ctx // 8 // block * block),
        )

    def action_snapshots(self) -> None:
        engine = self._viewable_engine()
        if engine is None:
            return
        screen = SnapshotsScreen(
            engine.tree, detokenize=engine.detokenize, tokens_known=engine.tokens_known, restore=self._restorer(),
            restores=self.restores, is_busy=lambda: self.busy, events=engine, missing_states=engine.missing_states,
        )
        self.app.push_screen(screen, self._snapshots_closed)

    def _restorer(self) -> Callable[[str], NodeRestore] | None:
        """How the snapshots screen restores a node: in the console's own engine, or, for a
        console that watches an endpoint's engine, in that engine through the endpoint (the
        console's next turn then goes on from the node); a replay restores nothing."""
        engine, talk = self.effctx_app.engine, self.effctx_app.talk
        if engine is not None and engine.can_run:
            return engine.restore_node
        if talk is None or self._replay is None:
            return None
        recorded = self._replay.player.engine

        def restore(node_id: str) -> NodeRestore:
            there = recorded.recorded_node(node_id)
            if there is None:
                raise EffctxError(f"{node_id} is not a node of the watched engine")
            return replace(talk.restore(there), node=node_id)
        return restore

    def action_cells(self) -> None:
        engine = self.effctx_app.engine
        if not self.ready or engine is None:
            return
        self.app.push_screen(CellsScreen(
            load=lambda: cell_matrix(engine.model_path, engine.model_path.name),
            swap=lambda cell: engine.swap(_profile_of(cell)),
            current=lambda: engine.profile.name,
            is_busy=lambda: self.busy,
            cancel=engine.cancel,
            prepare=lambda cell, progress: engine.prepare(_profile_of(cell), progress),
            events=engine,
        ))

    def action_bench(self) -> None:
        engine = self.effctx_app.engine
        if not self.ready or engine is None:
            return
        self.app.push_screen(BenchmarkScreen(engine.model_path, engine.profile, self.effctx_app.bench_plan, is_busy=lambda: self.busy))

    def action_prompt_file(self) -> None:
        self.app.push_screen(PromptFileDialog(), self._prompt_file_read)

    def _prompt_file_read(self, text: str | None) -> None:
        prompt = self.query_one(PromptInput)
        if text is not None:
            prompt.put(text)
        prompt.focus()

    def action_timings(self) -> None:
        self.app.push_screen(TimingsScreen(self.timeline))

    def action_requests(self) -> None:
        self.app.push_screen(RequestsScreen(self.requests))

    def _snapshots_closed(self, result: str | None) -> None:
        self.effctx_app.save_session()  # renames and deletes happened on the screen
        if result == BRANCH:
            self.query_one(Input).focus()

    def _follow_restore(self, event: NodeRestored) -> None:
        """Show the conversation of the restored node: its path's turns, and the cache it left."""
        self.restores[event.node] = restore = NodeRestore(
            event.node, event.mode, event.tokens, event.recomputed, event.ms, event.reason
        )
        self._hide_progress()  # a long recompute showed its prefill
        tree = self._engine.tree  # the event came from it
        if event.node not in tree:
            return
        self.query_one(Transcript).show_history(tree.turns(event.node))
        self._resident = event.tokens
        label = tree.node(event.node).label or event.node
        self.query_one(StatusLine).show_busy(
            f"at {label!r}: {restore_summary(restore)}; the next turn branches from here", self._resident, self._n_ctx
        )

    def on_engine_event(self, message: EngineEvent) -> None:
        event = message.event
        self.timeline.feed(event)
        self.requests.feed(event)
        handler = self._event_handlers.get(type(event))
        if handler is not None:
            handler(event)
        if changes_residency(event):
            self._refresh_strip()

    @cached_property
    def _event_handlers(self) -> dict[type, Callable[[Any], None]]:
        """One handler per event type: everything the screen does for that event."""
        return {
            ModelProgress: lambda e: self._show_progress(e.stage, e.done, e.total),
            SessionOpened: lambda e: self.query_one(StatusLine).show_loading(f"opened {e.model} on {e.backend}"),
            TurnStarted: self._on_turn_started,
            PrefillChunk: self._on_prefill_chunk,
            TokenDecoded: self._on_token,
            TurnFinished: self._on_turn_finished,
            PrefixCacheLookup: self._on_prefix_cache,
            ErrorRaised: lambda e: self.query_one(Transcript).add_error(f"{e.error}: {e.message}"),
            CellSwapped: self._on_cell_swapped,
            SwapAbandoned: lambda e: self._show_engine_state(
                f"swap to {e.new_profile} cancelled after recomputing {e.done:,} of {e.total:,} tokens; "
                f"still on {e.old_profile}"),
            NodeAdded: self._on_node_changed,
            NodeUnsaved: self._on_node_changed,
            NodeRestored: self._on_node_restored,
            RequestQueued: self._on_request_queued,
            RequestRouted: self._on_request_routed,
            RequestServed: self._on_request_served,
        }

    # ------------------------------------------------------------------ an endpoint's requests

    def _on_request_queued(self, event: RequestQueued) -> None:
        self._waiting.add(event.request)
        self._show_endpoint()

    def _on_request_routed(self, event: RequestRouted) -> None:
        # The turn that follows is a client's, not typed here: the transcript says so.
        self._waiting.discard(event.request)
        self._serving = event.request
        self._request_turn = event.turn
        self._show_endpoint()

    def _on_request_served(self, event: RequestServed) -> None:
        self._waiting.discard(event.request)
        if self._serving == event.request:
            self._serving = None
        self._show_endpoint()

    def show_endpoint(self) -> None:
        """The endpoint started: the line that says where it listens appears."""
        self._show_endpoint()

    def _show_endpoint(self) -> None:
        address = self.effctx_app.endpoint_address
        if address is None:
            return
        self.query_one(EndpointStatus).show(address, len(self._waiting), self._serving is not None)

    def _on_turn_started(self, event: TurnStarted) -> None:
        if event.turn == self._request_turn:
            self.query_one(Transcript).add_user(f"⇄ request: {event.input_text}")
        elif self._replay is not None:
            self.query_one(Transcript).add_user(event.input_text)  # live, the prompt box added it
        self.query_one(StatusLine).show_busy("prefilling…", self._resident, self._n_ctx)

    def _on_prefill_chunk(self, event: PrefillChunk) -> None:
        self._resident = event.start + event.tokens
        if event.total >= PROGRESS_MIN_TOKENS:
            self._show_progress(f"prefill ({event.stage})", event.done, event.total)
        self.query_one(StatusLine).show_busy(f"prefilling {format_count(event.done)} / {format_counted(event.total, 'token')}…", self._resident, self._n_ctx)

    def _on_token(self, event: TokenDecoded) -> None:
        self._hide_progress()
        self._resident += 1
        self.query_one(Transcript).append_reply(event.text)
        self.query_one(StatusLine).show_busy(f"decoding, {format_counted(event.index + 1, 'token')}…", self._resident, self._n_ctx)

    def _on_turn_finished(self, event: TurnFinished) -> None:
        result = self.last_result = event.result
        self._resident = result.resident
        note = _STOP_NOTES.get(result.stop_reason, result.stop_reason.replace("_", " "))
        self.query_one(Transcript).finish_reply(result.text, note)
        explained = self.timeline.explain(event.turn)
        # A turn cancelled in its prefill has no prefix cause; its reason says where it stopped.
        in_prefill = result.stop_reason == "cancelled" and not result.prefix_cause
        cause = explained.cause if explained is not None and not in_prefill else result.prefix_reason
        self.query_one(StatusLine).show_turn(result, cause)
        if self._replay is not None:
            self.turns_done += 1  # live, the turn worker counts it

    def _on_prefix_cache(self, event: PrefixCacheLookup) -> None:
        self._hide_progress()
        self._resident = event.tokens
        self.query_one(Transcript).add_note(prefix_note(self.effctx_app.prefix_name, event))
        if event.message:
            self.notify(event.message, severity="warning")

    def _on_cell_swapped(self, event: CellSwapped) -> None:
        self._n_ctx = event.n_ctx
        self._show_cell(event.model or self._engine.model_name, event.new_profile, event.backend, event.n_ctx)
        sentence = swap_sentence(event)
        self.query_one(Transcript).add_note(sentence, event.details and f"runtime identity: {event.details}")
        self._show_engine_state(sentence)

    def _on_node_changed(self, event: NodeAdded | NodeUnsaved) -> None:
        """A node added, or its state not saved after all: the session file follows, and
        a state not saved says why."""
        self.effctx_app.save_session()
        if event.message:
            self.notify(event.message, severity="warning")

    def _on_node_restored(self, event: NodeRestored) -> None:
        self.effctx_app.save_session()
        self._follow_restore(event)

    def on_turn_done(self, message: TurnDone) -> None:
        self.busy = False
        self.refresh_bindings()
        self.turns_done += 1
        self._hide_progress()

    # ------------------------------------------------------------------ input

    @on(Input.Submitted, "#prompt")
    def submit(self, event: Input.Submitted) -> None:
        text = event.value.strip()
        if not text:
            return
        talk = self.effctx_app.talk
        if talk is not None:
            self._send(talk, event.input, text)
            return
        if not self.ready:
            self._refuse_enter("The model is still loading; the prompt keeps your text.")
            return
        if self.busy:
            self._refuse_enter("A reply is still running; the prompt keeps your text for when it is done "
                               "(Esc stops the reply).")
            return
        event.input.clear()
        self.busy = True
        self.refresh_bindings()
        self.query_one(Transcript).add_user(text)
        self.run_turn(text)

    def _send(self, talk: EndpointConsole, prompt: Input, text: str) -> None:
        """A watching console's turn: sent to the endpoint's engine, in its queue, going on
        from the console's node; the engine's events show it here."""
        if self.busy:
            self._refuse_enter("Your last turn is still with the endpoint; the prompt keeps your text.")
            return
        prompt.clear()
        self.busy = True
        self._say_to_endpoint(talk, text)

    @work(thread=True, group="turn", exit_on_error=False)
    def _say_to_endpoint(self, talk: EndpointConsole, text: str) -> None:
        try:
            talk.say(text, self.max_tokens)
        except EffctxError as exc:
            self.app.call_from_thread(self.notify, str(exc), severity="error")
        finally:
            # Not TurnDone: the watched engine's own events count the turn.
            self.app.call_from_thread(setattr, self, "busy", False)

    def _refuse_enter(self, why: str) -> None:
        """Say why an Enter sent nothing, once while the notice shows: a terminal without
        bracketed paste types a paste in as keys, an Enter a line."""
        now = time.monotonic()
        if now - self._enter_refused < self.app.NOTIFICATION_TIMEOUT:
            return
        self._enter_refused = now
        self.notify(why, severity="warning")

    @work(thread=True, group="turn", exit_on_error=False)
    def run_turn(self, text: str) -> None:
        try:
            self._engine.chat(text, DecodeConfig(max_tokens=self.max_tokens))
        except EffctxError:
            pass  # the engine reports every error of a turn as an ErrorRaised event, shown above
        except Exception as exc:  # a bug must not kill the console; show it as one line
            self.post_message(EngineEvent(ErrorRaised(error=type(exc).__name__, message=str(exc))))
        finally:
            self.post_message(TurnDone())

    def action_new_conversation(self) -> None:
        talk = self.effctx_app.talk
        if talk is not None:
            talk.forget()
            self.query_one(Transcript).remove_children()
            self.notify("Your next turn starts a new conversation on the watched engine.")
            return
        self._engine.reset()
        self.query_one(Transcript).remove_children()
        # The cache still holds the old tape until the next turn: the resident count stays.
        self.query_one(StatusLine).show_busy(reset_sentence(self._engine.residency.evicts), self._resident, self._n_ctx)

    def action_stop(self) -> None:
        if self.busy:
            self._engine.cancel()
        elif self.loading:
            self.effctx_app.cancel_loading()
            self.query_one(StatusLine).show_loading("cancelling the model preparation…")
