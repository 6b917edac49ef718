"""A request: a whole prompt from a client, served from the longest start the engine holds.

A console turn appends to the one conversation on the tape. A client of the endpoint
sends its whole conversation each time, and several clients take turns: the prompt may
extend the tape, share only its start, or belong to a conversation whose state the
snapshot store keeps from an earlier reply (of this process or an earlier one). The
runner finds the candidates, lets the router pick the cheapest, makes that start
resident and runs the rest as a turn, whose node in the tree keeps the new state.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Sequence

from effctx_core.backends.tape import common_prefix_length
from effctx_core.contract import DecodeConfig
from effctx_core.engine.checkpoints import Checkpointer
from effctx_core.engine.router import RouteCosts, RouteKind, RouteOption, choose_route
from effctx_core.engine.state import EngineState
from effctx_core.engine.turns import TurnExtras, TurnRunner
from effctx_core.errors import ContextOverflowError, EffctxError
from effctx_core.events.trace import RequestRouted, TurnResult
from effctx_core.residency import Segment
from effctx_core.residency.tracker import SegmentRun
from effctx_core.snapshots import SnapshotError, load_snapshot
from effctx_core.units import ms_since


@dataclass(frozen=True)
class RequestPrompt:
    """A rendered prompt: its tokens, what they are (segment runs that cover them) and
    the stop strings and turn opening of the format it was rendered in."""

    tokens: Sequence[int]
    runs: Sequence[SegmentRun]
    input_text: str  # what the node's turn records as said: the last message
    stop: tuple[str, ...] = ()
    opening: str | None = None
    request: str = ""  # the front end's id of the request, for its events


@dataclass(frozen=True)
class Route:
    kind: RouteKind
    shared: int  # prompt tokens the start held before anything was computed
    key: str | None = None
    node: str | None = None
    ms: float = 0.0  # the restore
    reason: str = ""  # a stored state refused, and why


@dataclass(frozen=True)
class RequestResult:
    turn: TurnResult
    route: Route
    prompt_tokens: int
    node: str | None  # the tree node that keeps the reply's state
    turn_number: int = 0  # the engine turn that served it

    @property
    def computed(self) -> int:
        """Prompt tokens the backend computed for this request (measured)."""
        return min(self.turn.prefilled, self.prompt_tokens)

    @property
    def cached(self) -> int:
        """Prompt tokens this request did not compute: reused from the tape or restored."""
        return self.prompt_tokens - self.computed


def _extends(tape: list[int], tokens: list[int]) -> bool:
    """The prompt is the tape and more (at least one token more: the last prompt token is
    prefilled for the next token's logits)."""
    return bool(tape) and len(tokens) > len(tape) and tokens[:len(tape)] == tape


def _cut(runs: Sequence[SegmentRun], n: int) -> list[SegmentRun]:
    out, done = [], 0
    for run in runs:
        if done >= n:
            break
        out.append(SegmentRun(run.kind, min(run.tokens, n - done), run.turn))
        done += run.tokens
    return out


class RequestRunner:
    def __init__(self, state: EngineState, checkpointer: Checkpointer, turns: TurnRunner):
        self._state = state
        self._checkpointer = checkpointer
        self._turns = turns
        self.costs = RouteCosts()

    def run(self, prompt: RequestPrompt, config: DecodeConfig, extras: TurnExtras) -> RequestResult:
        state = self._state
        session, tracker = state.session, state.tracker
        tokens = list(prompt.tokens)
        if not tokens:
            raise EffctxError("the prompt is empty")
        n_ctx = session.info.n_ctx
        if not tracker.evicts and len(tokens) >= n_ctx:
            # Refused before the session changes; one token of room is the least a reply needs.
            raise ContextOverflowError("prompt", 0, len(tokens), n_ctx)
        route = self._route(tokens, prompt.runs)
        new = tokens[route.shared:] if route.kind in (RouteKind.RESTORED, RouteKind.PREFIX_CACHE) else tokens
        if route.kind not in (RouteKind.RESTORED, RouteKind.PREFIX_CACHE):
            if _extends(state.tape, tokens):
                new = tokens[len(state.tape):]  # the prompt extends the tape: a turn as the console's
            elif state.tape:
                # Another conversation: the turn keeps what the session shares with it.
                state.left, state.tape = state.tape, []
                tracker.reset()
        state.bus.emit(RequestRouted, turn=state.turns + 1, route=route.kind.value, shared=route.shared,
                       prompt_tokens=len(tokens), key=route.key or "", node=route.node or "", ms=round(route.ms, 3),
                       reason=route.reason, request=prompt.request)
        routed = {"route": route.kind.value, "shared": route.shared, "prompt_tokens": len(tokens)}
        given = extras.metrics
        result = self._turns.run(prompt.input_text, new, config, prompt.stop, Segment.USER, prompt.opening,
                                 TurnExtras(prompt.runs, extras.on_token, extras.label,
                                            lambda r: {**(given(r) if given is not None else {}), **routed}))
        self.costs.observe_prefill(result.prefilled, result.prefill_ms)
        node = state.tree.current if result.stop_reason != "cancelled" or result.generated else None
        return RequestResult(result, route, len(tokens), node, state.turns)

    def _resident_shared(self, tokens: list[int]) -> int:
        state = self._state
        if state.tracker.evicts:
            # The cache holds only part of the tape: only a prompt that extends it goes on from it.
            return len(state.tape) if _extends(state.tape, tokens) else 0
        held = state.tape or state.left
        shared = min(common_prefix_length(held, tokens), len(tokens) - 1)
        if shared < len(held):
            report = state.session.explain()
            if shared < report.rollback_floor:
                # The cache cannot be cut back that far exactly: ensure_prefix restarts from
                # the longest state the backend keeps below it, or recomputes everything.
                return max((n for n in report.restart_points if n <= shared), default=0)
        return shared

    def _stored(self, tokens: list[int]) -> RouteOption | None:
        """The stored state that starts the prompt furthest, if restoring one is possible
        on this cell at all: a store entry the prompt begins with (the prefix index finds
        it, whatever stored it), or a node of the tree whose state shares a longer start
        and is cut back to it after the restore (a reply sent back in other tokens, an
        edit near the end)."""
        state = self._state
        session = state.session
        store = self._checkpointer.store
        costs = session.info.state_costs
        if store is None or state.tracker.evicts or not session.info.capabilities.state_snapshot.supported \
                or (costs is not None and costs.recompute_reason is not None):
            return None
        if not _extends(state.tape, tokens):
            # Another conversation's last state may still be on its way to the store. A
            # prompt that extends the tape waits for nothing: the states in flight are of
            # the turns that made the tape, and none starts the prompt further than it does.
            self._checkpointer.settle()
        # All but the last token: the last is prefilled for the next token's logits.
        match = store.longest_prefix(session.info.identity.digest(), tokens[:-1])
        best: tuple[str, int] | None = match
        cut = self._cut_candidate(tokens)
        if cut is not None and (best is None or cut[1] > best[1]):
            best = cut
        if best is None:
            return None
        key, n = best
        try:
            info = store.info(key)
        except SnapshotError:
            return None
        kind = RouteKind.PREFIX_CACHE if info.meta.get("kind") == "prefix" else RouteKind.RESTORED
        return RouteOption(kind, n, info.bytes, key)

    def _cut_candidate(self, tokens: list[int]) -> tuple[str, int] | None:
        """(key, prompt tokens shared) of the tree's stored state, longer than what it
        shares with the prompt, that shares the most and is still in the store. Not where the
        cache has a rollback floor: a restore keeps only the window before the state's end
        in the sliding-window layers, so a restored state cannot be cut back at all."""
        state = self._state
        if state.session.info.capabilities.rollback_floor is not None:
            return None
        out = []
        tree = state.tree
        shared_with = tree.shared_with(tokens)
        for node in tree:
            if node.blob is None:
                continue
            shared = min(shared_with[node.id], len(tokens) - 1)
            cut = tree.tape_length(node.id) - shared
            if shared > 0 and cut > 0:
                out.append((node.blob, shared))
        store = self._checkpointer.store
        assert store is not None
        for key, n in sorted(out, key=lambda c: -c[1]):
            try:
                store.info(key)
            except SnapshotError:
                continue  # evicted by the store's LRU or removed
            return key, n
        return None

    def _route(self, tokens: list[int], runs: Sequence[SegmentRun]) -> Route:
        resident = self._resident_shared(tokens)
        options = [RouteOption(RouteKind.RESIDENT if resident else RouteKind.COLD, resident)]
        stored = self._stored(tokens)
        if stored is not None:
            options.append(stored)
        chosen = choose_route(len(tokens), options, self.costs)
        if chosen.key is None:
            return Route(chosen.kind, chosen.shared)
        state = self._state
        session = state.session
        store = self._checkpointer.store
        assert store is not None  # a stored option comes from the store
        # No write runs while the state is read: a write's eviction could take it.
        self._checkpointer.settle()
        t0 = time.perf_counter_ns()
        try:
            session.restore(load_snapshot(store, chosen.key, session.info.identity))
        except SnapshotError as exc:
            # A damaged entry is quarantined by the store: the request goes on without it.
            kind = RouteKind.RESIDENT if resident else RouteKind.COLD
            return Route(kind, resident, reason=f"stored state {chosen.key[:12]} not used ({exc})")
        ms = ms_since(t0)
        self.costs.observe_restore(chosen.state_bytes, ms)
        state.left = []  # the restore replaced whatever the session held
        state.tape = tokens[:chosen.shared]
        state.tracker.reset(_cut(runs, chosen.shared))
        holder = next((n.id for n in state.tree if n.blob == chosen.key), None)
        return Route(chosen.kind, chosen.shared, chosen.key, holder, ms)
