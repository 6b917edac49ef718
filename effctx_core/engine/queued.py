"""QueuedEngine: a front end that shares its engine with others through the engine's queue.

The console with `--api` is one more client of the engine the endpoint serves: each of
its commands (a turn, a restore, a swap) waits its turn in the EngineService's queue,
in arrival order with the endpoint's requests, and runs on the engine's worker thread. What
a front end reads (the tape, the tree, the residency map) it reads as before, from the
engine itself, and the events reach it as before.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Callable, Iterable, Sequence, TypeVar

from effctx_core.contract import DecodeConfig
from effctx_core.engine.records import NodeRestore, SwapResult
from effctx_core.engine.service import EngineService, Job
from effctx_core.engine.session_engine import SessionEngine
from effctx_core.events.subscribers import Subscriber, Unsubscribe
from effctx_core.events.trace import TurnResult
from effctx_core.models import ProgressFn
from effctx_core.profiles import Profile
from effctx_core.residency import ResidencyReport
from effctx_core.residency.tracker import ResidencyTracker
from effctx_core.snapshots.tree import SnapshotTree

T = TypeVar("T")


class QueuedEngine:
    can_run = True

    def __init__(self, service: EngineService, engine: SessionEngine):
        self.service = service
        self._engine = engine
        self._lock = threading.Lock()
        self._jobs: list[Job] = []  # this front end's commands, queued or running
        # Where this front end's own conversation is: the endpoint's requests move the
        # engine to their conversations in between, and a turn goes on from here.
        self._own: str | None = engine.tree.current

    def _run(self, command: Callable[[SessionEngine], T], resume: bool = False) -> T:
        """Queue the command behind everything submitted before it and wait for it;
        `resume`: first go back to this front end's conversation if another client
        moved the engine away from it."""
        def job_fn(engine: SessionEngine, _token: object) -> T:
            if resume and engine.tree.current != self._own:
                if self._own is None:
                    engine.reset()
                else:
                    engine.restore_node(self._own)
            try:
                return command(engine)
            finally:
                self._own = engine.tree.current

        job = self.service.submit(job_fn)
        with self._lock:
            self._jobs.append(job)
        try:
            return job.future.result()
        finally:
            with self._lock:
                self._jobs.remove(job)

    # ------------------------------------------------------------------ reading

    def subscribe(self, subscriber: Subscriber) -> Unsubscribe:
        return self._engine.subscribe(subscriber)

    @property
    def model_path(self) -> Path:
        return self._engine.model_path

    @property
    def model_name(self) -> str:
        return self._engine.model_name

    @property
    def backend(self) -> str:
        return self._engine.backend

    @property
    def n_ctx(self) -> int:
        return self._engine.n_ctx

    @property
    def profile(self) -> Profile:
        return self._engine.profile

    @property
    def policy(self) -> str:
        return self._engine.policy

    @property
    def tape(self) -> tuple[int, ...]:
        return self._engine.tape

    @property
    def residency(self) -> ResidencyTracker:
        return self._engine.residency

    def residency_report(self) -> ResidencyReport:
        return self._engine.residency_report()

    @property
    def tree(self) -> SnapshotTree:
        return self._engine.tree

    def detokenize(self, tokens: Sequence[int]) -> str:
        return self._engine.detokenize(tokens)

    @property
    def tokens_known(self) -> bool:
        return True

    def missing_states(self, keys: Iterable[str]) -> dict[str, str]:
        return self._engine.missing_states(keys)

    # ------------------------------------------------------------------ commands

    def chat(self, user_text: str, config: DecodeConfig = DecodeConfig()) -> TurnResult:
        return self._run(lambda engine: engine.chat(user_text, config), resume=True)

    def complete(self, prompt: str, config: DecodeConfig = DecodeConfig()) -> TurnResult:
        return self._run(lambda engine: engine.complete(prompt, config), resume=True)

    def reset(self) -> None:
        self._run(lambda engine: engine.reset())

    def restore_node(self, node_id: str) -> NodeRestore:
        return self._run(lambda engine: engine.restore_node(node_id))

    def mark(self, label: str = "") -> str:
        return self._run(lambda engine: engine.mark(label))

    def save_session(self, name: str) -> Path:
        return self._run(lambda engine: engine.save_session(name))

    def swap(self, profile: Profile) -> SwapResult:
        return self._run(lambda engine: engine.swap(profile))

    def prepare(self, profile: Profile, progress: ProgressFn) -> None:
        # No queue: preparing another cell's model does not touch the running one.
        self._engine.prepare(profile, progress)

    def set_budget(self, tokens: int) -> None:
        self._run(lambda engine: engine.set_budget(tokens))

    def recompute_cold(self) -> int:
        return self._run(lambda engine: engine.recompute_cold())

    def cancel(self) -> None:
        """Stop this front end's own commands (a queued one never runs); never a
        request of another client."""
        with self._lock:
            jobs = list(self._jobs)
        for job in jobs:
            self.service.cancel(job)

    def close(self) -> None:
        self.cancel()
        self.service.stop()
