"""The session screen's footer offers only the keys that act, in every mode: loading,
ready, busy (a replay's keys are in test_replay_console). On the real default model."""

from __future__ import annotations

from effctx_tui.app import EffctxApp
from tests.helpers.pilot_wait import start_a_long_prefill, until, wait_for


def offered(app: EffctxApp) -> list[str]:
    """The session screen's own keys its footer shows now (the app's, Quit, Help and Theme, aside)."""
    screen = app.session_screen
    return [active.binding.description for active in screen.active_bindings.values()
            if active.node is screen and active.binding.show]


async def test_while_the_model_loads_only_stop_the_timings_the_requests_and_insert_file_act(default_model):
    app = EffctxApp(max_tokens=1, checkpoints=None)
    async with app.run_test(size=(100, 30)) as pilot:
        await until(lambda: app.session_screen.loading)
        assert offered(app) == ["Stop", "Timings", "Requests", "Insert file"]  # the prompt takes text while the model loads
        await wait_for(pilot, lambda: app.session_screen.ready)
        assert offered(app) == ["New conversation", "Residency", "Snapshots", "Timings", "Cells", "Benchmark",
                                "Requests", "Insert file"]


async def test_while_a_reply_runs_stop_is_offered_and_a_new_conversation_is_not(default_model):
    app = EffctxApp(max_tokens=1, checkpoints=None)
    async with app.run_test(size=(100, 30)) as pilot:
        screen = app.session_screen
        await start_a_long_prefill(pilot, app)
        assert offered(app) == ["Stop", "Residency", "Snapshots", "Timings", "Cells", "Benchmark", "Requests",
                                "Insert file"]
        await wait_for(pilot, lambda: screen.turns_done == 1)
        assert "Stop" not in offered(app) and "New conversation" in offered(app)
