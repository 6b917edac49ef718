"""The session screen says what the engine did: after a swap, a cancelled swap or a turn,
in the words of every other view (events/explain.py), and what runs, from the first
screen on. Pilot on the real default model."""

from __future__ import annotations

import asyncio
import re

import pytest

from effctx_core.backends.profile_loader import load_profile
from effctx_core.engine import SwapCancelled
from effctx_core.events.explain import EXTENDS, FIRST_TURN
from effctx_core.profiles import DEFAULT_PROFILE
from effctx_tui.app import EffctxApp
from effctx_tui.screens.session import STRIP_NOTE, base_model_note
from effctx_tui.widgets.transcript import Transcript
from tests.helpers.pilot_wait import opened_steady, session_when_ready, status_text, take_a_turn, wait_for

Q8 = load_profile("q8").with_changes(n_ctx=1024)


def notes(screen) -> list[str]:
    return [str(w.render()) for w in screen.query_one(Transcript).query(".note-line")]


async def test_the_first_screen_says_what_the_strip_is_and_that_the_model_is_a_base_model(default_model):
    app = EffctxApp(max_tokens=2, checkpoints=None)
    async with session_when_ready(app, (100, 30)) as (pilot, screen):
        model = app.engine.model_name
        assert notes(screen) == [STRIP_NOTE, base_model_note(model)]
        assert screen.sub_title == f"{model} · {DEFAULT_PROFILE.name} on llama · n_ctx {app.engine.n_ctx:,}"


async def test_the_status_line_names_the_turns_cause_as_the_timings_screen_does(default_model):
    app = EffctxApp(max_tokens=4, checkpoints=None)
    async with session_when_ready(app, (100, 30)) as (pilot, screen):
        await take_a_turn(pilot, screen, "Hello")
        assert status_text(screen).endswith(f" · {FIRST_TURN}")
        await take_a_turn(pilot, screen, "And then?")
        assert screen.timeline.explain(2).cause == EXTENDS
        assert status_text(screen).endswith(f" · {EXTENDS}")


async def test_after_a_swap_the_status_line_title_and_transcript_show_the_new_cell(default_model):
    app = EffctxApp(max_tokens=4, checkpoints=None)
    async with session_when_ready(app, (100, 30)) as (pilot, screen):
        await take_a_turn(pilot, screen, "Hello")
        tape = len(app.engine.tape)
        await asyncio.to_thread(app.engine.swap, Q8)  # what the cells screen does, off the UI thread
        sentence = rf"now on q8: recomputed {tape} tokens in [\d.,]+ m?s \(other KV settings\)"
        await wait_for(pilot, lambda: re.search(sentence, status_text(screen)) is not None)
        assert status_text(screen).startswith(f"resident {tape} / 1,024 · available {1024 - tape:,}  │  now on q8")
        note = screen.query_one(Transcript).query(".note-line").last()
        assert re.fullmatch(sentence, str(note.render()))
        assert "kv_settings.kv_cache_type_k 'f16' -> 'q8_0'" in str(note.tooltip)
        assert not screen.query_one("#progress-row").display
        assert screen.sub_title == f"{app.engine.model_name} · q8 on llama · n_ctx 1,024"


async def test_a_cancelled_swap_says_so_and_shows_the_cell_it_stayed_on(default_model):
    app = EffctxApp(max_tokens=2, checkpoints=None)
    async with session_when_ready(app, (100, 30)) as (pilot, screen):
        screen.query_one("#prompt").value = "The grass is green. " * 150
        await pilot.press("enter")
        await wait_for(pilot, lambda: screen.turns_done == 1)
        tape = len(app.engine.tape)
        title = screen.sub_title
        engine = app.engine

        def cancel_at_the_first_chunk(event):
            if event.kind == "prefill_chunk":
                engine.cancel()

        engine.subscribe(cancel_at_the_first_chunk)
        try:
            await asyncio.to_thread(engine.swap, Q8)
        except SwapCancelled:
            pass
        expected = f"swap to q8 cancelled after recomputing 512 of {tape} tokens; still on {DEFAULT_PROFILE.name}"
        await wait_for(pilot, lambda: status_text(screen).endswith(expected))
        assert status_text(screen).startswith(f"resident {tape} / ")
        assert not screen.query_one("#progress-row").display
        assert screen.sub_title == title


@pytest.mark.parametrize("size", [(100, 30), (160, 48)], ids=["100x30", "160x48"])
def test_snapshot_of_the_first_screen(snap_compare, default_model, size):
    # The header, the two first-screen notes, the empty strip and the status line: what a
    # newcomer sees before the first turn; nothing on it depends on timing.
    assert snap_compare(EffctxApp(max_tokens=1, checkpoints=None), terminal_size=size, run_before=opened_steady)
