"""SVG baselines of every screen, in a deterministic state: the console plays the shipped
chat demo (a recorded session of the default model) to its end, at a fixed size, in two
themes. The cells screen needs a model to describe cells, so it has no replay baseline."""

from __future__ import annotations

from importlib import resources

import pytest

from effctx_core.events.reader import read_trace
from effctx_tui.app import EffctxApp

SIZE = (120, 36)
SCREENS = {"session": [], "residency": ["ctrl+r"], "timings": ["ctrl+g"], "snapshots": ["ctrl+t"], "help": ["f1"]}


def demo_app(theme: str) -> EffctxApp:
    with resources.as_file(resources.files("effctx_tui") / "demos" / "chat.jsonl") as path:
        trace = read_trace(path)
    return EffctxApp(replay=trace, replay_speed=64, theme=theme)


async def played_to_the_end(pilot) -> None:
    app = pilot.app
    for _ in range(1500):
        if app.player.done and app.session_screen.turns_done == 3:
            break
        await pilot.pause(0.02)
    await pilot.pause(0.4)  # the title and strip refresh on their timers



@pytest.mark.parametrize("theme", ["effctx-dark", "effctx-light"])
@pytest.mark.parametrize("screen", list(SCREENS))
def test_snapshot_of_each_screen_after_the_chat_demo(snap_compare, utc, screen, theme):
    assert snap_compare(demo_app(theme), press=SCREENS[screen], terminal_size=SIZE, run_before=played_to_the_end)


async def cells_described(pilot) -> None:
    app = pilot.app
    for _ in range(3000):
        if app.session_screen.ready:
            break
        await pilot.pause(0.02)
    await pilot.press("ctrl+o")
    for _ in range(3000):
        if getattr(app.screen, "cells", None):
            break
        await pilot.pause(0.02)
    await pilot.pause(0.2)


@pytest.mark.parametrize("theme", ["effctx-dark", "effctx-light"])
def test_snapshot_of_the_cells_screen(snap_compare, default_model, theme, tmp_path, monkeypatch):
    # Cells are described by the backend itself, so this one runs the real default model;
    # nothing on the screen depends on timing. No user profiles: only the built-in cells.
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    app = EffctxApp(max_tokens=1, checkpoints=None, theme=theme)
    assert snap_compare(app, terminal_size=SIZE, run_before=cells_described)
