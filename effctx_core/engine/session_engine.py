"""SessionEngine: the one object the CLI and the console talk to.

A facade over collaborators that share one EngineState under the engine's lock: the
running cell (backend, profile, session, residency tracker and executor), the event bus,
the cancel gate, the turn runner, the checkpointer (snapshot tree), the prefix loader and
swaps to another cell. Every step is an event for subscribers and, when asked, for a
JSON Lines trace.
"""

from __future__ import annotations

import threading
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterable, Iterator, ParamSpec, Sequence

import numpy as np

from effctx_core.backends.registry import get_backend
from effctx_core.cancel import CancelToken
from effctx_core.contract import ContextReport, DecodeConfig, ModelInfo, Session, SessionSnapshot
from effctx_core.engine.cancel_gate import CancelGate
from effctx_core.engine.cell import RunningCell
from effctx_core.engine.checkpoints import Checkpointer
from effctx_core.engine.events import EventBus
from effctx_core.engine.prefill import make_room, prefill, prefill_runs
from effctx_core.engine.prefix_loader import PrefixLoader
from effctx_core.engine.records import NodeRestore, PrefillCancelled, PrefixLoad, ScoreResult, SwapResult
from effctx_core.engine.requests import RequestPrompt, RequestResult, RequestRunner
from effctx_core.engine.state import EngineState
from effctx_core.engine.swap import swap
from effctx_core.engine.turns import TurnExtras, TurnRunner
from effctx_core.errors import EffctxError, UnsupportedFeatureError
from effctx_core.events.subscribers import Subscriber, Unsubscribe
from effctx_core.events.trace import (
    ErrorRaised,
    Event,
    ResidencyAction,
    SessionOpened,
    SnapshotRestored,
    SnapshotTaken,
    TurnResult,
)
from effctx_core.models import ProgressFn
from effctx_core.profiles import DEFAULT_PROFILE, Profile
from effctx_core.residency import BlockClass, ResidencyReport, Segment
from effctx_core.residency.policies import keeps_budget
from effctx_core.residency.tracker import ResidencyTracker, SegmentRun
from effctx_core.snapshots import SnapshotStore
from effctx_core.snapshots.tree import SnapshotTree
from effctx_core.transcript import chat_format_for
from effctx_core.units import ms_since

Fields = ParamSpec("Fields")


class SessionEngine:
    can_run = True

    def __init__(
        self,
        model_path: str | Path,
        profile: Profile = DEFAULT_PROFILE,
        trace_path: str | Path | None = None,
        prefix_cache: SnapshotStore | None = None,
        checkpoints: SnapshotStore | None = None,
    ):
        self.model_path = Path(model_path)
        self._profile = profile  # the profile to open; the running cell's once open
        self._state = EngineState(self.model_path, EventBus(trace_path), CancelGate())
        self._checkpointer = Checkpointer(self._state, checkpoints)
        self._turns = TurnRunner(self._state, self._checkpointer)
        self._prefix = PrefixLoader(self._state, self._checkpointer, prefix_cache)
        self._requests = RequestRunner(self._state, self._checkpointer, self._turns)
        self._lock = threading.RLock()

    # ------------------------------------------------------------------ events

    def subscribe(self, subscriber: Subscriber) -> Unsubscribe:
        """Call `subscriber` with every event from now on; returns the call that stops it."""
        return self._state.bus.subscribe(subscriber)

    def note(self, event_type: Callable[Fields, Event], /, *args: Fields.args, **fields: Fields.kwargs) -> None:
        """An event a front end adds to the engine's (a request queued, a request served):
        its subscribers and its trace get it like the engine's own, from any thread."""
        self._state.bus.emit(event_type, *args, **fields)

    @property
    def trace_error(self) -> str | None:
        return self._state.bus.trace_error

    @contextmanager
    def _reported(self) -> Iterator[None]:
        """An EffctxError from inside is also an ErrorRaised event, then raised on."""
        try:
            yield
        except EffctxError as exc:
            self._state.bus.emit(ErrorRaised, error=type(exc).__name__, message=str(exc))
            raise

    # ------------------------------------------------------------------ lifecycle

    def open(self) -> ModelInfo:
        with self._lock:
            state = self._state
            if state.cell is None:
                state.cell = RunningCell.open(self.model_path, self._profile)
                info = state.cell.session.info
                state.tree.add(None, (), "root", info.identity.digest(), label="start")
                state.bus.emit(
                    SessionOpened, backend=info.backend, model=info.facts.name, n_ctx=info.n_ctx,
                    identity=info.identity.digest(), started=round(state.bus.started_wall, 3),
                    **state.cell.recorded_residency(),
                )
            return state.session.info

    @property
    def profile(self) -> Profile:
        return self._state.cell.profile if self._state.cell is not None else self._profile

    @property
    def session(self) -> Session:
        return self._state.session

    @property
    def info(self) -> ModelInfo:
        return self.session.info

    @property
    def model_name(self) -> str:
        return self.info.facts.name

    @property
    def backend(self) -> str:
        return self.info.backend

    @property
    def n_ctx(self) -> int:
        return self.info.n_ctx

    @property
    def tape(self) -> tuple[int, ...]:
        return tuple(self._state.tape)

    @property
    def tree(self) -> SnapshotTree:
        return self._state.tree

    @property
    def checkpoints(self) -> SnapshotStore | None:
        """The checkpoint store, with every state written so far on disk."""
        self.settle()
        return self._checkpointer.store

    def settle(self) -> None:
        """Wait until every checkpoint state written in the background is on disk; a node
        whose write failed is left without a state (a NodeUnsaved event says so)."""
        with self._lock:
            self._checkpointer.settle()

    def missing_states(self, keys: Iterable[str]) -> dict[str, str]:
        """Of these saved states, the ones the checkpoint store does not hold, each with why."""
        return self._checkpointer.missing_states(keys)

    @property
    def residency(self) -> ResidencyTracker:
        return self._state.tracker

    @property
    def policy(self) -> str:
        return self.residency.policy

    def residency_report(self) -> ResidencyReport:
        return self.residency.report()

    def reopen(self) -> None:
        """Open the running cell again after its session was poisoned (SessionFatalError):
        the tree stays, the tape starts empty, and the next turn or request restores or
        recomputes what it needs."""
        with self._lock:
            state = self._state
            if state.cell is not None:
                self._profile = state.cell.profile
                state.cell.close()
                state.cell = None
            state.cell = RunningCell.open(self.model_path, self._profile)
            state.tape, state.left = [], []

    def close(self) -> None:
        with self._lock:
            self._checkpointer.close()  # its last events go out before the bus closes
            if self._state.cell is not None:
                self._state.cell.close()
                self._state.cell = None
            self._state.bus.close()

    def reset(self, keep_shared: bool = True) -> None:
        """Start a new conversation. The next turn's ensure_prefix keeps what the new
        conversation shares with the old one (the same system prompt, a resent edited
        conversation) and drops the rest, which it reports as dropped; without
        `keep_shared` it drops everything: a cold start, as a new session's."""
        with self._lock:
            self._state.left, self._state.tape = (self._state.tape if keep_shared else []), []
            if self._state.cell is not None:
                self._state.tracker.reset()
                if not keep_shared:
                    # Emptied now, not by the next turn: what emptying costs (a runtime
                    # whose own prefix cache only a new pipeline empties) is no part of
                    # that turn, whose time to first token is a cold start's.
                    self.session.ensure_prefix([])

    def cancel(self) -> None:
        """Stop the running turn (its prefill between two chunks, its decode after the
        current token), a prefix load's prefill or a swap's recompute."""
        self._state.gate.cancel()

    @contextmanager
    def cancelled_by(self, token: CancelToken) -> Iterator[None]:
        """Inside, `token` stops the engine's work as `cancel()` does, and only while
        inside: a front end sharing the engine gives each job its own token, so the
        cancel of one job never reaches another. Holds the lock: nothing else runs on
        the engine while a job does."""
        with self._lock, self._state.gate.bound(token):
            yield

    # ------------------------------------------------------------------ turns

    # Every EffctxError out of a turn, raised before it starts or during it, is also an
    # ErrorRaised event: the console shows errors from events alone.

    def complete(self, prompt: str, config: DecodeConfig = DecodeConfig()) -> TurnResult:
        """Raw completion: the prompt text is appended to the tape as it is."""
        with self._lock, self._reported():
            session = self.session
            new = session.tokenize(prompt, add_bos=not self._state.tape and session.info.facts.add_bos)
            return self._turns.run(prompt, new, config, tuple(config.stop), Segment.USER, None)

    def complete_tokens(self, tokens: Sequence[int], config: DecodeConfig = DecodeConfig(),
                        input_text: str = "") -> TurnResult:
        """Raw completion of tokens appended to the tape as they are: a prompt tokenized
        whole and fed in parts reaches the model exactly as it would in one piece."""
        with self._lock, self._reported():
            return self._turns.run(input_text, list(tokens), config, tuple(config.stop), Segment.USER, None)

    def chat(self, user_text: str, config: DecodeConfig = DecodeConfig()) -> TurnResult:
        """A conversation turn in the model's chat format."""
        with self._lock, self._reported():
            session = self.session
            fmt = chat_format_for(session.info.facts)
            tape = self._state.tape
            first = not tape
            opened = not first and session.detokenize(tape[-8:]).endswith(fmt.turn_opening)
            text = fmt.render_turn(user_text, first, opened)
            new = session.tokenize(text, add_bos=first and session.info.facts.add_bos, special=fmt.special_tokens)
            return self._turns.run(user_text, new, config, tuple(config.stop) + fmt.stop, Segment.USER,
                                   fmt.turn_opening)

    def request(self, prompt: RequestPrompt, config: DecodeConfig = DecodeConfig(),
                extras: TurnExtras = TurnExtras()) -> RequestResult:
        """A client's whole prompt, served from the cheapest start the engine holds (the
        tape, a stored state, or nothing) and answered as a turn; its node keeps the state."""
        with self._lock, self._reported():
            return self._requests.run(prompt, config, extras)

    def set_tree(self, tree: SnapshotTree) -> None:
        """Go on with a tree kept from an earlier run (the endpoint's conversations); the
        session's tape starts empty, and a request restores what it needs."""
        with self._lock:
            self._state.tree = tree
            self._state.left, self._state.tape = self._state.tape or self._state.left, []
            if self._state.cell is not None:
                self._state.tracker.reset()

    def score(self, text: str) -> ScoreResult:
        """Teacher-forced scoring: `text` (tokenized with BOS, as `complete` does) prefilled
        as a new conversation through the residency policy, exactly as a prompt is (under
        an evicting policy in chunks, room made before each), every token scored by the
        model as it goes in. The text stays on the tape. Its prefill can be cancelled,
        which leaves the conversation empty."""
        with self._lock, self._reported():
            state = self._state
            session = state.session
            claim = session.info.capabilities.token_scores
            if not claim.supported:
                raise UnsupportedFeatureError(f"no token scores here: {claim.reason}")
            self.reset()
            tokens = session.tokenize(text, add_bos=session.info.facts.add_bos)
            t0 = time.perf_counter_ns()
            sink: list[np.ndarray] = []
            state.gate.clear()
            try:
                with state.gate.cancellable():
                    # Turn 0, as a prefix load: a score run is no turn of the conversation.
                    session.ensure_prefix([])
                    prefill(state, tokens, Segment.DOCUMENT, 0, 0, scores=sink)
            except PrefillCancelled:
                self.reset()
                raise
            logprobs = np.concatenate(sink) if sink else np.empty(0)
            known = logprobs[~np.isnan(logprobs)]
            report = state.tracker.report()
            return ScoreResult(
                policy=state.running.profile.residency.policy,
                tokens=len(tokens),
                scored=len(known),
                mean_nll=float(-known.mean()) if len(known) else float("nan"),
                ms=ms_since(t0),
                evicted=report.evicted_tokens + report.cold_tokens,
                logprobs=logprobs,
            )

    def set_budget(self, tokens: int) -> None:
        """Steer the residency budget of the running session. A smaller budget is carried
        out at once (the policy parks blocks now); a larger one leaves room that the next
        tokens, or `recompute_cold`, fill."""
        with self._lock:
            policy = self.residency.policy
            if not keeps_budget(policy):
                raise UnsupportedFeatureError(
                    f"the {policy} policy does not keep to a token budget; profiles with the budget policy do")
            if not 0 < tokens <= self.session.info.n_ctx:
                raise EffctxError(f"a budget must be between 1 and n_ctx {self.session.info.n_ctx}")
            self.residency.budget = tokens
            make_room(self._state, 0, self._state.turns, "steer")

    def recompute_cold(self) -> int:
        """Bring the cold blocks back by recomputing the tape from the first of them.

        Returns the tokens recomputed. The cache is cut back to the resident tokens before
        the first cold block, and everything after it in the tape is prefilled again;
        the policy then plans as usual, so a budget that is still too small parks again.
        """
        with self._lock:
            state = self._state
            session, tracker = state.session, state.tracker
            table = tracker.table()
            cold = table.ranges_of(BlockClass.COLD)
            if not cold:
                return 0
            first = cold[0][0]
            cached = tracker.resident_tokens(state.tape)
            keep = int(table.sizes[(table.start < first) & table.resident_mask()].sum())
            runs = tracker.segments_from(first)
            tail = state.tape[first:]
            turn = state.turns
            t0 = time.perf_counter_ns()
            # Cut the cache back to what precedes the first cold block; ensure_prefix
            # re-prefills those tokens instead if the cache cannot be cut there.
            session.ensure_prefix(cached[:keep], state.progress(turn, 0))
            state.tape = state.tape[:first]
            tracker.truncate(first)
            prefill_runs(state, tail, runs, session.explain().resident_tokens)
            ms = ms_since(t0)
            state.bus.emit(ResidencyAction, turn=turn, stage="recompute", action="recompute", start=first,
                           end=first + len(tail), pos_start=keep, pos_end=keep + len(tail), ms=round(ms, 3))
            return len(tail)

    # ------------------------------------------------------------------ the tree, the prefix, swaps

    def mark(self, label: str = "") -> str:
        """A node for the tape as it is now, on demand; returns its id."""
        with self._lock:
            self._checkpointer.checkpoint("manual", label or "mark", None, {})
            current = self.tree.current
            assert current is not None  # a checkpoint always leaves the tree at a node
            return current

    def save_session(self, name: str) -> Path:
        with self._lock:
            return self._checkpointer.save_session(name)

    def load_session(self, name: str) -> NodeRestore | None:
        with self._lock:
            return self._checkpointer.load_session(name)

    def restore_node(self, node_id: str) -> NodeRestore:
        with self._lock:
            return self._checkpointer.restore_node(node_id)

    def load_prefix(self, text: str, kind: Segment = Segment.DOCUMENT) -> PrefixLoad:
        with self._lock:
            # The prefix cache may be the checkpoints' own folder: it misses none in flight.
            self._checkpointer.settle()
            return self._prefix.load(text, kind)

    def prepare(self, profile: Profile, progress: ProgressFn) -> None:
        """Make the model ready for `profile`'s backend (an OpenVINO conversion, once), so
        that a swap to it only opens it. No lock: the running cell is not involved."""
        get_backend(profile.backend).prepare(self.model_path, profile, progress)

    def swap(self, profile: Profile) -> SwapResult:
        """Move the running conversation to another cell (profile, backend); a cancelled
        recompute leaves it where it was (SwapCancelled)."""
        with self._lock:
            # A swap loads a second model, the likeliest moment to run out of memory: the
            # states in flight reach the disk before it starts.
            self._checkpointer.settle()
            return swap(self._state, profile)

    # ------------------------------------------------------------------ state

    def snapshot(self) -> SessionSnapshot:
        with self._lock:
            t0 = time.perf_counter_ns()
            snap = self.session.snapshot()
            self._state.bus.emit(SnapshotTaken, tokens=snap.n_tokens, bytes=len(snap.state),
                                 ms=ms_since(t0))
            return snap

    def restore(self, snapshot: SessionSnapshot) -> None:
        with self._lock:
            t0 = time.perf_counter_ns()
            with self._reported():
                self.session.restore(snapshot)
            self._state.tape = list(snapshot.tape)
            self.residency.reset([SegmentRun(Segment.OTHER, len(snapshot.tape), 0)])  # a bare state has no segment map
            self._state.bus.emit(SnapshotRestored, tokens=snapshot.n_tokens, bytes=len(snapshot.state),
                                 ms=ms_since(t0))

    def explain(self) -> ContextReport:
        return self.session.explain()

    def detokenize(self, tokens: Sequence[int]) -> str:
        return self.session.detokenize(tokens)

    @property
    def tokens_known(self) -> bool:
        return True
