"""Plays a recorded trace into the console: the events arrive as they did live, at their
recorded times (scaled by the speed), or one at a time. A followed trace (`--watch`) is
played as its events are written: each as soon as it arrives."""

from __future__ import annotations

from textual.message_pump import MessagePump

from effctx_core.events.follow import TraceFollower
from effctx_core.events.reader import Trace, TraceError
from effctx_core.events.replay import ReplayEngine

TICK_SECONDS = 0.02
# Waiting for a person to type is not worth watching: a longer gap plays as this one.
MAX_GAP_MS = 800.0
# A watcher joining a long recording catches up over several ticks, answering keys between them.
LIVE_EVENTS_PER_TICK = 2000
SPEEDS = (0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 64.0)


class ReplayPlayer:
    """Applies the events to its ReplayEngine, which hands each to the engine's subscribers
    as a live engine does."""

    def __init__(self, trace: Trace, speed: float = 1.0, playing: bool = True, follow: TraceFollower | None = None):
        self.events = list(trace.events)
        self.follow = follow  # the trace is still being written: its new events are polled
        self.error: str | None = None  # why following stopped
        self.engine = ReplayEngine(trace)
        self.index = 0
        self.clock_ms = self.events[0].t_ms if self.events else 0.0
        self.speed = speed
        self.playing = playing

    def start(self, clock: MessagePump) -> None:
        """Play on `clock`'s timer, so events arrive on the app thread."""
        clock.set_interval(TICK_SECONDS, self._tick)

    @property
    def done(self) -> bool:
        """Every event played, and no more can come."""
        return self.follow is None and self._caught_up

    @property
    def _caught_up(self) -> bool:
        return self.index >= len(self.events)

    def _tick(self) -> None:
        if self.follow is not None:
            self._poll(self.follow)
        if not self.playing or self._caught_up:
            return
        if self.follow is not None:  # live: nothing to wait for, every event arrived late already
            for _ in range(min(LIVE_EVENTS_PER_TICK, len(self.events) - self.index)):
                self._play_next()
            return
        self.clock_ms += TICK_SECONDS * 1000 * self.speed
        if self.events[self.index].t_ms - self.clock_ms > MAX_GAP_MS:
            self.clock_ms = self.events[self.index].t_ms - MAX_GAP_MS
        while not self._caught_up and self.events[self.index].t_ms <= self.clock_ms:
            self._play_next()

    def _poll(self, follow: TraceFollower) -> None:
        try:
            self.events.extend(follow.poll())
        except TraceError as exc:
            self.error = str(exc)
            self.follow = None
            follow.close()

    def _play_next(self) -> None:
        event = self.events[self.index]
        self.index += 1
        self.engine.apply(event)

    def toggle(self) -> None:
        self.playing = not self.playing

    def restart(self) -> None:
        """Play the recording again from its first event."""
        self.engine.rewind()
        self.index = 0
        self.clock_ms = self.events[0].t_ms if self.events else 0.0
        self.playing = True

    def step(self) -> None:
        """Pause, and play exactly one more event."""
        self.playing = False
        if not self._caught_up:
            self.clock_ms = self.events[self.index].t_ms
            self._play_next()

    def faster(self, direction: int) -> None:
        self.speed = SPEEDS[self._speed_step(direction)]

    def can_go_faster(self, direction: int) -> bool:
        """False at the fastest speed (for 1) or at the slowest (for -1)."""
        return self.follow is None and SPEEDS[self._speed_step(direction)] != self.speed

    def _speed_step(self, direction: int) -> int:
        i = min(range(len(SPEEDS)), key=lambda k: abs(SPEEDS[k] - self.speed))
        return max(0, min(len(SPEEDS) - 1, i + direction))

    def describe(self) -> str:
        if self.follow is not None or self.error is not None:
            state = f"stopped: {self.error}" if self.error is not None else ("live" if self.playing else "paused")
            return f"watching {self.engine.trace.path.name}: event {self.index}/{len(self.events)} · {state}"
        state = "done" if self.done else ("playing" if self.playing else "paused")
        return f"replay: event {self.index}/{len(self.events)} · {state} · ×{self.speed:g}"
