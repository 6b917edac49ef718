"""Waiting in Pilot tests for what a worker thread does."""

from __future__ import annotations

import asyncio


async def wait_for(pilot, condition, seconds: float = 60.0) -> None:
    for _ in range(int(seconds / 0.02)):
        if condition():
            return
        await pilot.pause(0.02)
    raise AssertionError("condition not reached in time")


async def until(condition, seconds: float = 60.0) -> None:
    """Wait for a condition while the app is busy (a prefill runs): plain sleeps, no
    Pilot call, which would wait for an idle app; and a bound, so a test cannot hang."""
    for _ in range(int(seconds / 0.005)):
        if condition():
            return
        await asyncio.sleep(0.005)
    raise AssertionError("condition not reached in time")
