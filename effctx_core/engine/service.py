"""EngineService: several front ends share one engine through one queue.

A model's cache holds one conversation at a time, so requests cannot run side by side:
one worker thread owns the engine (it opens it, runs every job, closes it) and serves a
bounded first-in-first-out queue. A full queue refuses at once (QueueFull) rather than
making a caller wait for room: an HTTP front end answers 429 and the client retries.

Each job has its own cancel token, bound to the engine's cancel gate only while the job
runs. A cancel therefore stops exactly the job it names, even when it arrives before the
job's turn begins (a turn clears the engine's own cancel, never a job's token), and a
late cancel of a finished job cannot stop the one after it.
"""

from __future__ import annotations

import enum
import threading
from collections import deque
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Callable, Generic, TypeVar

from effctx_core.cancel import CancelToken
from effctx_core.engine.session_engine import SessionEngine
from effctx_core.errors import EffctxError, EngineLoadFailed, QueueFull, ServiceStopping
from effctx_core.events.trace import ModelProgress
from effctx_core.models import ProgressFn

T = TypeVar("T")

# Builds the engine, reporting any preparation (a model assembled, hashed, converted)
# through the ProgressFn; the service opens it. It runs on the worker thread, so a slow
# preparation delays only the jobs, never the caller of start().
EngineFactory = Callable[[ProgressFn], SessionEngine]
JobFn = Callable[[SessionEngine, CancelToken], T]


class ServiceState(enum.Enum):
    NEW = "new"
    LOADING = "loading"
    READY = "ready"
    FAILED = "failed"
    STOPPING = "stopping"
    STOPPED = "stopped"


class JobState(enum.Enum):
    QUEUED = "queued"
    RUNNING = "running"
    DONE = "done"  # the work returned; a cancelled turn returns too, its result says so
    CANCELLED = "cancelled"  # taken off the queue before it ran
    FAILED = "failed"


@dataclass(frozen=True)
class ServiceStatus:
    """One consistent reading of the service, for a health check or a 503's reason."""

    state: ServiceState
    reason: str | None  # why the load failed
    progress: ModelProgress | None  # the last step of the load reported, while loading
    queued: int
    running: bool


class Job(Generic[T]):
    """A submitted piece of work: its future, its own cancel token, where it stands."""

    def __init__(self, fn: JobFn[T], where: Callable[[Job[T]], int | None]):
        self.fn = fn
        self.future: Future[T] = Future()
        self.token = CancelToken()
        self.state = JobState.QUEUED
        self._where = where

    @property
    def position(self) -> int | None:
        """How many jobs are ahead of it in the queue (0: it runs next); None once it
        has left the queue."""
        return self._where(self)

    def _fail(self, exc: BaseException) -> None:
        if self.future.set_running_or_notify_cancel():
            self.state = JobState.FAILED
            self.future.set_exception(exc)


def _one_line(exc: BaseException) -> str:
    text = str(exc) if isinstance(exc, EffctxError) else f"{type(exc).__name__}: {exc}"
    lines = text.strip().splitlines()
    return lines[0] if lines else type(exc).__name__


class EngineService:
    def __init__(self, open_engine: EngineFactory, queue_size: int = 16):
        if queue_size < 1:
            raise ValueError("an engine queue holds at least one job")
        self._open_engine = open_engine
        self._queue_size = queue_size
        self._queue: deque[Job] = deque()
        self._cond = threading.Condition()
        self._state = ServiceState.NEW
        self._reason: str | None = None
        self._load_error: BaseException | None = None
        self._progress: ModelProgress | None = None
        self._running: Job | None = None
        self._engine: SessionEngine | None = None
        self._stopping = False
        # A daemon so that a job stuck in native code cannot keep the process alive after
        # stop() gave up waiting; stop() is the clean way out, and it waits for the job.
        self._thread = threading.Thread(target=self._serve, name="effctx-engine", daemon=True)

    # ------------------------------------------------------------------ reading

    @property
    def status(self) -> ServiceStatus:
        with self._cond:
            return ServiceStatus(self._state, self._reason, self._progress, len(self._queue),
                                 self._running is not None)

    @property
    def state(self) -> ServiceState:
        return self._state

    @property
    def engine(self) -> SessionEngine | None:
        """The open engine, once loaded: for what may be read or noted from any thread
        (its info, its events); everything that runs goes through submit()."""
        return self._engine if self._state is ServiceState.READY else None

    @property
    def model_name(self) -> str | None:
        """The loaded model's name, once it is loaded (its info does not change)."""
        engine = self.engine
        return engine.model_name if engine is not None else None

    def _position(self, job: Job) -> int | None:
        with self._cond:
            try:
                return self._queue.index(job)
            except ValueError:
                return None

    # ------------------------------------------------------------------ commands

    def start(self) -> None:
        """Open the engine on the worker thread; returns at once (watch `status`)."""
        with self._cond:
            if self._state is not ServiceState.NEW or self._stopping:
                return
            self._state = ServiceState.LOADING
        self._thread.start()

    def submit(self, fn: JobFn[T]) -> Job[T]:
        """Queue `fn(engine, token)`; it runs after every job submitted before it. A job
        submitted before the engine is ready waits for the load; after a failed load its
        future fails with the load's reason."""
        job: Job[T] = Job(fn, self._position)
        with self._cond:
            if self._stopping:
                raise ServiceStopping("the engine is stopping: no new requests are taken")
            if self._state is ServiceState.FAILED:
                failed = self._load_failed()
            else:
                if len(self._queue) >= self._queue_size:
                    raise QueueFull(self._queue_size)
                self._queue.append(job)
                self._cond.notify_all()
                return job
        job._fail(failed)
        return job

    def cancel(self, job: Job) -> bool:
        """Take a queued job off the queue, or ask a running one to stop at its next safe
        point (its turn ends 'cancelled'). False when the job had already ended."""
        with self._cond:
            if job.state is JobState.QUEUED and job in self._queue:
                self._queue.remove(job)
                job.state = JobState.CANCELLED
                job.future.cancel()
                return True
            if job.state is not JobState.RUNNING:
                return False
        job.token.cancel()  # the job's own token: nothing else listens to it
        return True

    def stop(self, timeout: float = 10.0) -> bool:
        """Refuse new jobs, fail the queued ones (ServiceStopping), stop the running one,
        and wait up to `timeout` seconds for the worker to close the engine. True once the
        engine is closed; False if the running job has not yet reached a point where it
        can stop (the worker closes the engine when it does). Safe to call again."""
        with self._cond:
            self._stopping = True
            if self._state is not ServiceState.STOPPED:
                self._state = ServiceState.STOPPING
            dropped = list(self._queue)
            self._queue.clear()
            running = self._running
            self._cond.notify_all()
        for job in dropped:
            job._fail(ServiceStopping("the engine stopped before this request ran"))
        if running is not None:
            running.token.cancel()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(timeout)
        if self._thread.is_alive():
            return False
        with self._cond:
            self._state = ServiceState.STOPPED
        return True

    # ------------------------------------------------------------------ the worker

    def _load_failed(self) -> EngineLoadFailed:
        assert self._reason is not None  # set with the FAILED state
        failed = EngineLoadFailed(self._reason)
        failed.__cause__ = self._load_error
        return failed

    def _report(self, stage: str, done: int, total: int) -> None:
        with self._cond:
            self._progress = ModelProgress(stage=stage, done=done, total=total)
            stopping = self._stopping
        if stopping:
            # Between two steps of the preparation, which leaves nothing half-written.
            raise ServiceStopping("model loading stopped: the engine is stopping")

    def _load(self) -> SessionEngine | None:
        engine: SessionEngine | None = None
        try:
            engine = self._open_engine(self._report)
            engine.open()
        except Exception as exc:  # any failure must reach the queued jobs, or they wait forever
            if engine is not None:
                engine.close()
            with self._cond:
                self._reason, self._load_error = _one_line(exc), exc
                if not self._stopping:
                    self._state = ServiceState.FAILED
                failed = list(self._queue)
                self._queue.clear()
                error = self._load_failed()
            for job in failed:
                job._fail(error)
            return None
        with self._cond:
            self._progress = None
            self._engine = engine
            if not self._stopping:
                self._state = ServiceState.READY
        return engine

    def _next(self) -> Job | None:
        with self._cond:
            while True:
                while not self._queue and not self._stopping:
                    self._cond.wait()
                if self._stopping:
                    return None
                job = self._queue.popleft()
                if job.future.set_running_or_notify_cancel():
                    job.state = JobState.RUNNING
                    self._running = job
                    return job
                job.state = JobState.CANCELLED  # cancelled through its future, not cancel()

    def _serve(self) -> None:
        try:
            engine = self._load()
            if engine is not None:
                self._serve_jobs(engine)
        finally:
            # A stop() that gave up waiting left the state at stopping: the worker ends it.
            with self._cond:
                if self._stopping:
                    self._state = ServiceState.STOPPED

    def _serve_jobs(self, engine: SessionEngine) -> None:
        try:
            while (job := self._next()) is not None:
                self._execute(engine, job)
        finally:
            # Also reached when the worker dies of something no job should raise
            # (KeyboardInterrupt): the waiting jobs are told instead of waiting forever.
            with self._cond:
                self._stopping = True
                dropped = list(self._queue)
                self._queue.clear()
            for waiting in dropped:
                waiting._fail(ServiceStopping("the engine stopped before this request ran"))
            engine.close()

    def _execute(self, engine: SessionEngine, job: Job) -> None:
        try:
            with engine.cancelled_by(job.token):
                result = job.fn(engine, job.token)
        except BaseException as exc:  # the job's failure is its caller's to read
            with self._cond:
                job.state, self._running = JobState.FAILED, None
            job.future.set_exception(exc)
            if not isinstance(exc, Exception):
                raise
            return
        with self._cond:
            job.state, self._running = JobState.DONE, None
        job.future.set_result(result)
