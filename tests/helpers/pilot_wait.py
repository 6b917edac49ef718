"""Waiting in Pilot tests for what a worker thread does."""

from __future__ import annotations

import asyncio
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, AsyncIterator

from textual import events
from textual.pilot import Pilot
from textual.widgets import Input, ProgressBar

from effctx_tui.widgets.prompt_input import PromptInput
from effctx_tui.widgets.status_line import StatusLine

if TYPE_CHECKING:
    from effctx_tui.app import EffctxApp
    from effctx_tui.screens.session import SessionScreen


async def wait_for(pilot, condition, seconds: float = 60.0) -> None:
    for _ in range(int(seconds / 0.02)):
        if condition():
            return
        await pilot.pause(0.02)
    raise AssertionError("condition not reached in time")


@asynccontextmanager
async def session_when_ready(app: EffctxApp, size: tuple[int, int]) -> AsyncIterator[tuple[Pilot, SessionScreen]]:
    """`app` running headless at `size`, once its session screen's model is ready."""
    async with app.run_test(size=size) as pilot:
        screen = app.session_screen
        await wait_for(pilot, lambda: screen.ready)
        yield pilot, screen


async def take_a_turn(pilot, screen, text: str) -> None:
    """Type `text` into the session screen's prompt, press Enter, and wait for its turn
    to finish."""
    done = screen.turns_done
    await pilot.press(*text, "enter")
    await wait_for(pilot, lambda: screen.turns_done == done + 1)


async def opened_steady(pilot) -> None:
    """For an SVG baseline of the session screen: wait for its model to be ready, and hold
    the prompt's cursor still (it blinks every half second, into or out of the picture)."""
    await wait_for(pilot, lambda: pilot.app.session_screen.ready)
    pilot.app.session_screen.query_one(PromptInput).cursor_blink = False
    await pilot.pause(0.2)


def status_text(screen) -> str:
    """The session screen's status line, as text."""
    return str(screen.query_one(StatusLine).render())


async def until(condition, seconds: float = 60.0) -> None:
    """Wait for a condition while the app is busy (a prefill runs): plain sleeps, no
    Pilot call, which would wait for an idle app; and a bound, so a test cannot hang."""
    for _ in range(int(seconds / 0.005)):
        if condition():
            return
        await asyncio.sleep(0.005)
    raise AssertionError("condition not reached in time")


LONG_PROMPT = "The grass is green. " * 500  # 2,506 tokens on the default model


async def start_a_long_prefill(pilot, app) -> None:
    """Send LONG_PROMPT on the session screen once it is ready, and return when its
    prefill has reported a chunk: it is still running then. The Enter is posted, not
    pressed: Pilot.press would wait for an idle app, which it is not during a prefill."""
    screen = app.session_screen
    await wait_for(pilot, lambda: screen.ready)
    screen.query_one(Input).value = LONG_PROMPT
    app.post_message(events.Key("enter", None))
    bar = screen.query_one(ProgressBar)
    await until(lambda: bar.total == 2506)
