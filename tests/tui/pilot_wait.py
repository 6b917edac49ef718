"""Waiting in Pilot tests for what a worker thread does."""

from __future__ import annotations


async def wait_for(pilot, condition, seconds: float = 60.0) -> None:
    for _ in range(int(seconds / 0.02)):
        if condition():
            return
        await pilot.pause(0.02)
    raise AssertionError("condition not reached in time")
