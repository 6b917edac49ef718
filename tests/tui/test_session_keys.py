"""The session screen's footer offers only the keys that act, in every mode: loading,
ready, busy (a replay's keys are in test_replay_console). On the real default model."""

from __future__ import annotations

import effctx_tui.app
from effctx_tui.app import EffctxApp
from tests.helpers.pilot_wait import session_when_ready, wait_for


def offered(app: EffctxApp) -> list[str]:
    """The session screen's own keys its footer shows now (the app's, Quit, Help and Theme, aside)."""
    screen = app.session_screen
    return [active.binding.description for active in screen.active_bindings.values()
            if active.node is screen and active.binding.show]


async def test_while_the_model_loads_only_stop_the_timings_the_requests_and_insert_file_act(default_model, gate,
                                                                                           monkeypatch):
    # The model's preparation is held at its start: the keys are read while it loads,
    # however fast the model would load.
    monkeypatch.setattr(effctx_tui.app, "resolve_model", gate.before(effctx_tui.app.resolve_model))
    app = EffctxApp(max_tokens=1, checkpoints=None)
    async with app.run_test(size=(100, 30)) as pilot:
        await wait_for(pilot, lambda: gate.reached.is_set() and app.session_screen.loading)
        assert offered(app) == ["Stop", "Timings", "Requests", "Insert file"]  # the prompt takes text while the model loads
        assert app.loading and app.engine is None  # what was offered was offered during the load
        gate.release()
        await wait_for(pilot, lambda: app.session_screen.ready)
        assert not app.loading and app.engine is not None
        assert offered(app) == ["New conversation", "Residency", "Snapshots", "Timings", "Cells", "Benchmark",
                                "Requests", "Insert file"]


async def test_while_a_reply_runs_stop_is_offered_and_a_new_conversation_is_not(default_model, gate):
    app = EffctxApp(max_tokens=1, checkpoints=None)
    async with session_when_ready(app, (100, 30)) as (pilot, screen):
        app.engine.subscribe(gate.at_event("prefill_chunk"))  # the reply waits after its prefill
        await pilot.press(*"Hello", "enter")
        await wait_for(pilot, lambda: gate.reached.is_set() and screen.busy)
        assert offered(app) == ["Stop", "Residency", "Snapshots", "Timings", "Cells", "Benchmark", "Requests",
                                "Insert file"]
        gate.release()
        await wait_for(pilot, lambda: screen.turns_done == 1)
        assert "Stop" not in offered(app) and "New conversation" in offered(app)
