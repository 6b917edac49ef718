"""EngineService on the tiny generated model: one worker thread serves a bounded FIFO
queue of jobs, each cancelled through its own token, loaded and stopped cleanly."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Callable

import pytest

from effctx_core.cancel import CancelToken
from effctx_core.contract import DecodeConfig
from effctx_core.engine import SessionEngine
from effctx_core.engine.cancel_gate import CancelGate
from effctx_core.engine.service import EngineService, Job, JobState, ServiceState, ServiceStatus
from effctx_core.errors import EffctxError, EngineLoadFailed, QueueFull, ServiceStopping
from effctx_core.events.trace import Event, ModelProgress, TurnResult
from effctx_core.profiles import Profile
from tests.helpers.engine_jobs import WAIT, Blocker
from tests.helpers.tiny_gguf import write_tiny_llama_gguf

PROFILE = Profile(name="service-test", n_ctx=2048)
LONG = "The grass is green. " * 150  # 1,502 tokens: three prefill chunks of up to 512
QUEUE = 4


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory) -> Path:
    return write_tiny_llama_gguf(tmp_path_factory.mktemp("tiny") / "tiny.gguf")


@pytest.fixture(scope="module")
def service(tiny_model):
    """The module's one model load, shared by every test that does not stop its service."""
    svc = EngineService(lambda progress: SessionEngine(tiny_model, PROFILE), queue_size=QUEUE)
    svc.start()
    svc.submit(lambda engine, token: None).future.result(WAIT)
    yield svc
    svc.stop(WAIT)


def fresh_turn(prompt: str, max_tokens: int, on_event: Callable[[Event], None] | None = None,
               before: Callable[[], None] | None = None) -> Callable[[SessionEngine, CancelToken], TurnResult]:
    """A job: a turn of a new conversation that keeps nothing of the one before (a second
    reset forgets the first's tape), so its counts are the same in any test order."""

    def run(engine: SessionEngine, token: CancelToken) -> TurnResult:
        engine.reset()
        engine.reset()
        unsubscribe = engine.subscribe(on_event) if on_event else None
        try:
            if before:
                before()
            return engine.complete(prompt, DecodeConfig(max_tokens=max_tokens))
        finally:
            if unsubscribe:
                unsubscribe()

    return run


def on_first_chunk(action: Callable[[], object]) -> Callable[[Event], None]:
    done: list[object] = []

    def hook(event: Event) -> None:
        if event.kind == "prefill_chunk" and not done:
            done.append(action())

    return hook


def test_a_bound_token_stops_the_gated_work_through_a_clear_and_not_after_the_binding():
    gate, token = CancelGate(), CancelToken()
    token.cancel()
    with gate.bound(token):
        gate.clear()  # what a turn does as it starts
        inside = gate.requested
    assert (inside, gate.requested) == (True, False)


def test_jobs_run_in_the_order_they_were_submitted(service):
    ran: list[int] = []
    blocker = Blocker(service)

    def job(i: int) -> Callable[[SessionEngine, CancelToken], int]:
        def run(engine: SessionEngine, token: CancelToken) -> int:
            ran.append(i)
            return engine.complete(f" {i}", DecodeConfig(max_tokens=1)).generated

        return run

    jobs = [service.submit(job(i)) for i in range(QUEUE)]
    assert [j.position for j in jobs] == [0, 1, 2, 3]
    assert (blocker.job.state, blocker.job.position) == (JobState.RUNNING, None)
    blocker.release.set()
    assert [j.future.result(WAIT) for j in jobs] == [1, 1, 1, 1]
    assert ran == [0, 1, 2, 3]
    assert [j.state for j in jobs] == [JobState.DONE] * QUEUE


def test_a_full_queue_refuses_a_job_at_once(service):
    blocker = Blocker(service)
    jobs = [service.submit(lambda engine, token: "ran") for _ in range(QUEUE)]
    with pytest.raises(QueueFull) as refused:
        service.submit(lambda engine, token: "ran")
    assert str(refused.value) == "the engine's queue is full (4 requests waiting); try again when one has finished"
    assert service.status == ServiceStatus(ServiceState.READY, None, None, queued=QUEUE, running=True)
    blocker.release.set()
    assert [j.future.result(WAIT) for j in jobs] == ["ran"] * QUEUE


def test_a_job_submitted_during_the_load_waits_for_it_and_then_runs(tiny_model):
    loading, release = threading.Event(), threading.Event()

    def open_engine(progress) -> SessionEngine:
        progress("preparing model", 1, 2)
        loading.set()
        assert release.wait(WAIT)
        return SessionEngine(tiny_model, PROFILE)

    svc = EngineService(open_engine)
    try:
        svc.start()
        assert loading.wait(WAIT)
        job = svc.submit(lambda engine, token: engine.complete("Hello", DecodeConfig(max_tokens=3)).generated)
        assert svc.status == ServiceStatus(ServiceState.LOADING, None, ModelProgress(stage="preparing model", done=1,
                                           total=2), queued=1, running=False)
        assert (job.state, job.position) == (JobState.QUEUED, 0)
        release.set()
        assert job.future.result(WAIT) == 3
        assert (svc.state, job.state) == (ServiceState.READY, JobState.DONE)
    finally:
        release.set()
        svc.stop(WAIT)


def test_a_failed_load_fails_every_job_with_the_loads_reason(tmp_path):
    bad = tmp_path / "corrupt.gguf"
    bad.write_bytes(b"garbage!")
    reason = f"not a GGUF model file (magic b'garb', expected b'GGUF'): {bad}"
    release = threading.Event()

    def open_engine(progress) -> SessionEngine:
        assert release.wait(WAIT)
        return SessionEngine(bad, PROFILE)

    svc = EngineService(open_engine)
    try:
        svc.start()
        queued = svc.submit(lambda engine, token: "ran")
        release.set()
        with pytest.raises(EngineLoadFailed) as first:
            queued.future.result(WAIT)
        later = svc.submit(lambda engine, token: "ran")
        with pytest.raises(EngineLoadFailed) as second:
            later.future.result(WAIT)
        assert (str(first.value), str(second.value)) == (reason, reason)
        assert (queued.state, later.state) == (JobState.FAILED, JobState.FAILED)
        assert svc.status == ServiceStatus(ServiceState.FAILED, reason, None, queued=0, running=False)
    finally:
        release.set()
        svc.stop(WAIT)


def test_cancelling_a_queued_job_cancels_its_future_and_the_next_job_still_runs(service):
    ran: list[str] = []
    blocker = Blocker(service)
    first = service.submit(lambda engine, token: ran.append("first"))
    second = service.submit(lambda engine, token: ran.append("second") or "second")
    assert service.cancel(first) is True
    assert (first.future.cancelled(), first.state, first.position, second.position) == (
        True, JobState.CANCELLED, None, 0)
    blocker.release.set()
    assert second.future.result(WAIT) == "second"
    assert ran == ["second"]


def test_cancelling_a_running_turn_stops_it_and_not_the_job_after_it(service):
    jobs: dict[str, Job] = {}
    blocker = Blocker(service)
    jobs["first"] = service.submit(fresh_turn(LONG, 8, on_first_chunk(lambda: service.cancel(jobs["first"]))))
    jobs["second"] = service.submit(fresh_turn(LONG, 8))
    blocker.release.set()
    first, second = (jobs[name].future.result(WAIT) for name in ("first", "second"))
    assert (first.stop_reason, first.generated, first.prefix_reason) == (
        "cancelled", 0, "cancelled during prefill after 512 of 1502 tokens")
    assert (second.stop_reason, second.generated) == ("max_tokens", 8)


def test_a_cancel_that_comes_before_the_running_jobs_turn_starts_still_stops_it(service):
    jobs: dict[str, Job] = {}
    blocker = Blocker(service)
    jobs["a"] = service.submit(fresh_turn(LONG, 8, before=lambda: service.cancel(jobs["a"])))
    blocker.release.set()
    result = jobs["a"].future.result(WAIT)
    assert (result.stop_reason, result.generated, result.prefix_reason) == (
        "cancelled", 0, "cancelled during prefill after 512 of 1502 tokens")


def test_a_late_cancel_of_a_finished_job_does_not_stop_the_running_one(service):
    finished = service.submit(lambda engine, token: "done")
    assert finished.future.result(WAIT) == "done"
    answers: list[object] = []
    running = service.submit(fresh_turn(LONG, 8, on_first_chunk(lambda: answers.append(service.cancel(finished)))))
    result = running.future.result(WAIT)
    assert answers == [False]
    assert (result.stop_reason, result.generated, result.prefilled) == ("max_tokens", 8, 1502)


def test_stop_fails_the_queued_jobs_stops_the_running_one_and_closes_the_engine(tiny_model):
    opened: list[SessionEngine] = []

    def open_engine(progress) -> SessionEngine:
        opened.append(SessionEngine(tiny_model, PROFILE))
        return opened[0]

    svc = EngineService(open_engine)
    svc.start()
    try:
        blocker = Blocker(svc)
        queued = [svc.submit(lambda engine, token: "ran") for _ in range(2)]
        assert svc.stop(WAIT) is True
        assert blocker.job.future.result(WAIT) is True  # its own token told it to stop
        for job in queued:
            with pytest.raises(ServiceStopping, match="^the engine stopped before this request ran$"):
                job.future.result(WAIT)
        assert [job.state for job in queued] == [JobState.FAILED, JobState.FAILED]
        assert svc.status == ServiceStatus(ServiceState.STOPPED, None, None, queued=0, running=False)
        with pytest.raises(EffctxError, match="^the engine has no open session$"):
            opened[0].explain()
        with pytest.raises(ServiceStopping, match="^the engine is stopping: no new requests are taken$"):
            svc.submit(lambda engine, token: "ran")
    finally:
        svc.stop(WAIT)


def test_stop_is_idempotent(tiny_model):
    svc = EngineService(lambda progress: SessionEngine(tiny_model, PROFILE))
    svc.start()
    assert svc.submit(lambda engine, token: "ran").future.result(WAIT) == "ran"
    assert (svc.stop(WAIT), svc.stop(WAIT)) == (True, True)
    assert svc.status == ServiceStatus(ServiceState.STOPPED, None, None, queued=0, running=False)
