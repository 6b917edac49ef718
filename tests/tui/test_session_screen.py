"""The session screen, driven with Textual's Pilot on the real default model."""

from __future__ import annotations

import re

from textual import events
from textual.widgets import Input, ProgressBar

from effctx_core.backends.profile_loader import load_profile
from effctx_core.residency.config import ResidencyConfig
from effctx_core.snapshots import SnapshotStore
from effctx_core.snapshots.tree_file import list_sessions
from effctx_tui.app import EffctxApp
from effctx_tui.widgets.transcript import Transcript
from tests.helpers.pilot_wait import session_when_ready, start_a_long_prefill, status_text, take_a_turn, until, wait_for


async def test_a_prompt_streams_a_reply_and_fills_the_status_line(default_model):
    app = EffctxApp(max_tokens=16, checkpoints=None)
    async with session_when_ready(app, (120, 30)) as (pilot, screen):
        assert "no turn yet" in status_text(screen)
        await take_a_turn(pilot, screen, "What is the capital of France?")
        transcript = screen.query_one(Transcript)
        turns = [str(w.render()) for w in transcript.children if not w.has_class("note-line")]
        assert turns[0] == "What is the capital of France?"
        assert turns[1] == "The capital of France is Paris."
        generated = screen.last_result.generated
        assert transcript.streamed_pieces == generated > 1
        status = status_text(screen)
        assert "reused 0" in status and "prefilled 13" in status and f"generated {generated}" in status
        assert "TTFT" in status and "decode" in status and "tok/s" in status


async def test_keys_are_answered_while_a_long_prefill_runs(default_model):
    # Pilot.press waits until the process is idle, which it never is during a
    # prefill, so the keys go straight into the app's queue and the test watches
    # the order of effects: the keys land first, the prefill ends later.
    app = EffctxApp(max_tokens=1, checkpoints=None)
    async with app.run_test(size=(120, 30)) as pilot:
        screen = app.session_screen
        prompt = screen.query_one(Input)
        await start_a_long_prefill(pilot, app)
        for key in "abc":
            app.post_message(events.Key(key, key))
        await until(lambda: prompt.value == "abc")
        assert screen.busy, "the prefill should still be running"
        await wait_for(pilot, lambda: screen.turns_done == 1)
        assert "prefilled 2,506" in status_text(screen)


async def test_a_missing_model_is_shown_as_one_error_line(tmp_path):
    app = EffctxApp(model=tmp_path / "absent.gguf")
    async with app.run_test(size=(100, 20)) as pilot:
        screen = app.session_screen
        await wait_for(pilot, lambda: len(screen.query_one(Transcript).children) == 1)
        line = str(screen.query_one(Transcript).children[0].render())
        assert line == f"model file not found: {tmp_path / 'absent.gguf'}"
        assert not screen.ready


async def test_ctrl_n_starts_a_new_conversation(default_model):
    app = EffctxApp(max_tokens=2, checkpoints=None)
    async with session_when_ready(app, (120, 30)) as (pilot, screen):
        await take_a_turn(pilot, screen, "Hello")
        await pilot.press("ctrl+n")
        assert len(screen.query_one(Transcript).children) == 0
        assert status_text(screen).endswith(
            "new conversation: the next turn keeps the start it shares with what is resident and drops the rest")
        await take_a_turn(pilot, screen, "Hi again")
        # The new conversation keeps the start it shares with the old one (BOS, "User:")
        # and drops the rest of the cache: the old message and its reply but its last
        # token, which was pending (never in the cache).
        assert "last turn: reused 3 · prefilled 5 · dropped 5" in status_text(screen)


async def test_the_residency_strip_and_screen_follow_a_streaming_session(default_model):
    from textual.widgets import OptionList

    from effctx_core.backends.profile_loader import load_profile
    from effctx_core.residency import BlockClass
    from effctx_core.residency.config import ResidencyConfig
    from effctx_tui.screens.residency import ResidencyScreen
    from effctx_tui.widgets.residency_strip import ResidencyStrip

    profile = load_profile("streaming").with_changes(
        n_ctx=512, residency=ResidencyConfig(policy="streaming", sink_tokens=4, recent_tokens=380, budget=384, block_size=4)
    )
    app = EffctxApp(profile=profile, max_tokens=2, checkpoints=None)
    async with session_when_ready(app, (120, 30)) as (pilot, screen):
        screen.query_one(Input).value = "The grass is green. " * 150
        await pilot.press("enter")
        await wait_for(pilot, lambda: screen.turns_done == 1)
        report = app.engine.residency_report()
        assert report.evicted_tokens > 0
        strip = screen.query_one(ResidencyStrip)
        assert strip.cell_classes()[-1] is BlockClass.RECENT
        assert BlockClass.EVICTED in strip.cell_classes()
        await pilot.press("ctrl+r")
        residency = app.screen
        assert isinstance(residency, ResidencyScreen)
        ranges = residency.query_one("#evicted-ranges", OptionList)
        assert ranges.option_count == len(report.evicted_ranges) == 1
        assert residency.report == report
        await pilot.press("escape")
        assert app.screen is screen


async def test_a_named_session_is_saved_and_reopened_where_it_was(default_model, tmp_path, monkeypatch):
    from effctx_core.snapshots import SnapshotStore

    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    store = SnapshotStore(tmp_path / "store")
    app = EffctxApp(max_tokens=4, checkpoints=store, session_name="demo")
    async with session_when_ready(app, (120, 30)) as (pilot, screen):
        await pilot.press(*"Hello", "enter")
        await wait_for(pilot, lambda: screen.turns_done == 1 and "demo" in list_sessions())
        tape = app.engine.tape
    reopened = EffctxApp(max_tokens=4, checkpoints=store, session_name="demo")
    async with reopened.run_test(size=(120, 30)) as pilot:
        screen = reopened.session_screen
        transcript = screen.query_one(Transcript)
        # The engine's tape is set on the worker thread; the transcript follows once the
        # restore's event has reached the screen.
        await wait_for(pilot, lambda: screen.ready and reopened.engine.tape == tape and transcript.query(".user-turn"))
        assert str(transcript.query_one(".user-turn").render()) == "Hello"
        assert screen.sub_title.startswith("session demo · ")


async def test_escape_cancels_a_long_prefill(default_model):
    app = EffctxApp(max_tokens=1, checkpoints=None)
    async with app.run_test(size=(120, 30)) as pilot:
        screen = app.session_screen
        await start_a_long_prefill(pilot, app)
        app.post_message(events.Key("escape", None))
        await wait_for(pilot, lambda: screen.turns_done == 1)
        assert screen.last_result.stop_reason == "cancelled"
        assert screen.last_result.prefilled < 2506
        # Where it stopped, not a cause of the reuse it did not finish.
        assert re.search(r" · cancelled during prefill after \d+ of \d+ tokens$", status_text(screen))


async def test_escape_cancels_the_model_preparation_and_ctrl_l_loads_it_again(default_model, tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))  # the default model is assembled afresh
    app = EffctxApp(max_tokens=1, checkpoints=None)
    async with app.run_test(size=(120, 30)) as pilot:
        screen = app.session_screen
        label = screen.query_one("#progress-label")
        await until(lambda: str(label.render()) == "assembling default model")
        app.post_message(events.Key("escape", None))
        # the worker stops loading, then posts the failure: wait for what the user sees
        await wait_for(pilot, lambda: status_text(screen) == "model preparation cancelled: Ctrl+L loads the model")
        assert not app.loading
        assert not screen.ready and app.engine is None
        assert [p for p in (tmp_path / "data").rglob("*") if p.is_file()] == []
        await pilot.press("ctrl+l")
        await wait_for(pilot, lambda: screen.ready)
        assert (tmp_path / "data" / "effctx" / "models" / default_model.name).is_file()


NOTES = "Notes. " + "The grass is green. The sky is blue. " * 60


async def test_a_prefix_file_is_prefilled_once_then_restored_from_the_prefix_cache(default_model, tmp_path):
    store = SnapshotStore(tmp_path / "prefix-cache")
    notes, reused = [], []
    for _ in range(2):
        app = EffctxApp(max_tokens=2, checkpoints=None, prefix_text=NOTES, prefix_name="notes.txt", prefix_cache=store)
        async with app.run_test(size=(120, 30)) as pilot:
            screen = app.session_screen
            await wait_for(pilot, lambda screen=screen: screen.ready)
            notes.append(str(screen.query_one(Transcript).children[0].render()))
            prefix_tokens = len(app.engine.tape)
            await pilot.press(*"Hello", "enter")
            await wait_for(pilot, lambda screen=screen: screen.turns_done == 1)
            reused.append(screen.last_result.reused)
    assert re.fullmatch(rf"notes\.txt: {prefix_tokens:,} tokens prefilled in [\d.,]+ m?s, stored in the prefix cache",
                        notes[0])
    assert re.fullmatch(rf"notes\.txt: {prefix_tokens} tokens restored from the prefix cache in [\d,]+ ms", notes[1])
    assert reused == [prefix_tokens, prefix_tokens]


async def test_escape_cancels_loading_a_prefix_and_no_model_stays_open(default_model, tmp_path):
    app = EffctxApp(max_tokens=2, checkpoints=None, prefix_text=NOTES * 4, prefix_name="notes.txt",
                    prefix_cache=SnapshotStore(tmp_path / "prefix-cache"))
    async with app.run_test(size=(120, 30)) as pilot:
        screen = app.session_screen
        bar = screen.query_one(ProgressBar)
        await until(lambda: (bar.total and bar.progress))  # the prefix's first chunk is done
        app.post_message(events.Key("escape", None))
        await wait_for(pilot, lambda: not app.loading)
        assert re.fullmatch(r"loading notes\.txt cancelled after \d+ of \d+ tokens: Ctrl\+L loads the model",
                            status_text(screen))
        assert app.engine is None and not screen.ready


BUDGET_768 = load_profile("exact").with_changes(
    n_ctx=1024, residency=ResidencyConfig(policy="budget", sink_tokens=32, recent_tokens=128, budget=768, block_size=32))


async def test_the_residency_screen_steers_the_budget_and_recomputes_cold_blocks(default_model):
    app = EffctxApp(profile=BUDGET_768, max_tokens=1, checkpoints=None)
    async with session_when_ready(app, (120, 30)) as (pilot, screen):
        screen.query_one(Input).value = "The grass is green. " * 120
        await pilot.press("enter")
        await wait_for(pilot, lambda: screen.turns_done == 1)
        await pilot.press("ctrl+r")
        residency = app.screen
        n_tokens = residency.report.n_tokens
        assert 512 < n_tokens <= 768 and residency.report.cold_tokens == 0
        await pilot.press("left_square_bracket", "left_square_bracket")  # 768 -> 640 -> 512: below the tape
        await wait_for(pilot, lambda: residency.report.budget == 512)
        assert residency.report.cold_tokens > 0 and residency.report.resident_tokens <= 512
        await pilot.press("right_square_bracket", "right_square_bracket")
        await wait_for(pilot, lambda: residency.report.budget == 768)
        await pilot.press("c")
        # the recompute cuts the cold tail off first, then prefills it again: wait for all of it
        await wait_for(pilot, lambda: residency.report.cold_tokens == 0 and residency.report.n_tokens == n_tokens)
        assert residency.report.resident_tokens == n_tokens
        assert list(app.engine.session.tokens) == list(app.engine.tape)


async def test_an_error_raised_before_the_turn_starts_is_shown_in_the_transcript(default_model):
    app = EffctxApp(max_tokens=2, checkpoints=None)
    async with session_when_ready(app, (120, 30)) as (pilot, screen):
        app.engine.close()  # the session is gone: chat() fails before any turn starts
        await pilot.press(*"Hello", "enter")
        await wait_for(pilot, lambda: not screen.busy)
        errors = [str(w.render()) for w in screen.query_one(Transcript).children if w.has_class("error-line")]
        assert errors == ["EffctxError: the engine has no open session"]
