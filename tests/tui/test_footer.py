"""The footer of every screen keeps Quit and Help at its right end whatever the width; the
screen's own keys have the room left first, then Theme and the palette, each key whole or
not at all."""

from __future__ import annotations

import pytest
from textual.widgets import Footer
from textual.widgets._footer import FooterKey

from tests.helpers.theme_fixtures import config_home  # noqa: F401 - fixture
from tests.tui.test_help_screen import SessionApp
from tests.tui.test_visual_baselines import demo_app, played_to_the_end

ALWAYS = [("^q", "Quit"), ("f1", "Help")]
EVERYWHERE = ALWAYS + [("f2", "Theme"), ("^p", "palette")]
SCREENS = [("^n", "New conversation"), ("^r", "Residency"), ("^t", "Snapshots"), ("^g", "Timings"), ("^o", "Cells"),
           ("^b", "Benchmark")]
SESSION_KEYS = SCREENS + [("^y", "Requests"), ("^f", "Insert file")]


def shown(app) -> list[tuple[str, str]]:
    """The footer's keys a user sees, left to right."""
    keys = [key for key in app.screen.query_one(Footer).query(FooterKey) if key.display and key.region.width]
    return [(key.key_display, key.description) for key in sorted(keys, key=lambda key: key.region.x)]


async def ready_session(pilot) -> None:
    """The session screen as it is with a model open and no turn running."""
    screen = pilot.app.screen
    screen.ready = True
    screen.refresh_bindings()
    await pilot.pause()
    await pilot.pause()


async def test_at_160_columns_the_footer_shows_every_key(config_home):
    app = SessionApp()
    async with app.run_test(size=(160, 48)) as pilot:
        await ready_session(pilot)
        assert shown(app) == SESSION_KEYS + EVERYWHERE


async def test_at_100_columns_the_screen_keys_up_to_benchmark_stay_with_quit_and_help(config_home):
    app = SessionApp()
    async with app.run_test(size=(100, 30)) as pilot:
        await ready_session(pilot)
        assert shown(app) == SCREENS + ALWAYS  # Requests and Insert file are in the help page and the palette
        keys = [key for key in app.screen.query_one(Footer).query(FooterKey) if key.display]
        assert all(key.region.right <= 100 for key in keys)
        for left, right in zip(keys, keys[1:]):
            assert left.region.right <= right.region.x, f"{left.description} runs into {right.description}"


async def test_at_80_columns_the_screen_keys_that_do_not_fit_go_whole_and_quit_and_help_stay(config_home):
    app = SessionApp()
    async with app.run_test(size=(80, 24)) as pilot:
        await ready_session(pilot)
        assert shown(app) == SESSION_KEYS[:4] + ALWAYS


async def test_a_wider_terminal_brings_the_keys_back(config_home):
    app = SessionApp()
    async with app.run_test(size=(100, 30)) as pilot:
        await ready_session(pilot)
        await pilot.resize_terminal(160, 48)
        await pilot.pause()
        assert shown(app) == SESSION_KEYS + EVERYWHERE


@pytest.mark.parametrize("size", [(100, 30), (160, 48)], ids=lambda size: f"{size[0]}x{size[1]}")
def test_snapshot_of_the_session_footer_after_the_chat_demo(snap_compare, utc, size):
    assert snap_compare(demo_app("effctx-dark"), terminal_size=size, run_before=played_to_the_end)
