"""The console driven by a recorded trace, with no model loaded."""

from __future__ import annotations

import subprocess
import sys
from importlib import resources
from pathlib import Path

import pytest
from textual.widgets import Footer, Input, Static
from textual.widgets._footer import FooterKey

from effctx_core.events.reader import read_trace
from effctx_core.residency import BlockClass
from effctx_tui.app import EffctxApp
from effctx_tui.screens.residency import ResidencyScreen
from effctx_tui.screens.snapshot_diff import DiffScreen
from effctx_tui.widgets.residency_strip import ResidencyStrip
from effctx_tui.widgets.residency_view import ResidencyView
from effctx_tui.widgets.transcript import Transcript
from tests.helpers.pilot_wait import status_text, wait_for

EFFCTX = str(Path(sys.executable).with_name("effctx"))


def demo(name: str):
    with resources.as_file(resources.files("effctx_tui") / "demos" / f"{name}.jsonl") as path:
        return read_trace(path)


async def test_the_chat_demo_plays_its_turns_into_the_console():
    app = EffctxApp(replay=demo("chat"), replay_speed=64)
    async with app.run_test(size=(120, 30)) as pilot:
        screen = app.session_screen
        await wait_for(pilot, lambda: app.player.done and screen.turns_done == 3, seconds=30)
        turns = [str(w.render()) for w in screen.query_one(Transcript).children]
        assert turns[0::2] == ["What is the capital of France?", "And of Italy?", "Tell me about the sky."]
        assert screen.query_one(Input).disabled
        assert "reused" in str(screen.query_one("#status").render())
        await wait_for(pilot, lambda: screen.sub_title.startswith("replay: event 40/40 · done"), seconds=2)


async def test_a_paused_replay_steps_one_event_at_a_time():
    app = EffctxApp(replay=demo("chat"), replay_paused=True)
    async with app.run_test(size=(120, 30)) as pilot:
        await pilot.pause(0.1)
        assert app.player.index == 0
        await pilot.press("n", "n")
        assert app.player.index == 2 and not app.player.playing
        await pilot.press("plus")
        assert app.player.speed == 2.0
        await pilot.press("space")
        assert app.player.playing


async def test_a_turn_under_way_says_how_far_it_is_in_tokens_and_the_title_gives_n_ctx_as_a_count():
    app = EffctxApp(replay=demo("chat"), replay_paused=True)
    async with app.run_test(size=(120, 30)) as pilot:
        screen = app.session_screen
        await pilot.pause(0.1)
        await pilot.press("n", "n", "n", "n")  # opened, turn started, prefix checked, its one prefill chunk
        assert status_text(screen) == "resident 13 / 2,048 · available 2,035  │  prefilling 13 / 13 tokens…"
        await pilot.press("n")
        assert status_text(screen) == "resident 14 / 2,048 · available 2,034  │  decoding, 1 token…"
        assert screen.sub_title.endswith(" · Gemma 3 270m · llama · n_ctx 2,048")


async def test_a_replays_diff_shows_what_the_turns_said_and_offers_no_token_ids():
    app = EffctxApp(replay=demo("chat"), replay_speed=64)
    async with app.run_test(size=(120, 36)) as pilot:
        await wait_for(pilot, lambda: app.player.done and app.session_screen.turns_done == 3, seconds=30)
        await pilot.press("ctrl+t")
        await pilot.pause()
        await pilot.press("m", "up", "D")  # n3 (the current node) marked, compared with n2
        await wait_for(pilot, lambda: isinstance(app.screen, DiffScreen), seconds=10)
        text = lambda id: str(app.screen.query_one(id, Static).render())  # noqa: E731
        assert text("#diff-summary") == "n3 goes on where n2 ends: n2's 36 tokens, then 17 more"
        assert text("#diff-shared") == "shared: the 36 tokens up to n2; a recording keeps what each turn said, not its tokens"
        assert text("#diff-text-a") == "Tell me about the sky.\nThe sky is blue."
        await pilot.press("t")  # token ids: a recording has none
        assert not app.screen.show_ids and text("#diff-text-a") == "Tell me about the sky.\nThe sky is blue."
        assert app.screen.query_one("#diff-box").border_subtitle == "Esc closes"


async def test_the_streaming_demo_shows_its_evictions_in_the_strip():
    app = EffctxApp(replay=demo("streaming"), replay_speed=64)
    async with app.run_test(size=(120, 30)) as pilot:
        screen = app.session_screen
        await wait_for(pilot, lambda: app.player.done and screen.turns_done == 1, seconds=30)
        assert app.engine.residency_report().evicted_tokens > 0
        assert BlockClass.EVICTED in screen.query_one(ResidencyStrip).cell_classes()


async def test_the_streaming_demo_shows_the_recorded_plan_on_the_residency_screen():
    app = EffctxApp(replay=demo("streaming"), replay_speed=64)
    async with app.run_test(size=(100, 30)) as pilot:
        await wait_for(pilot, lambda: app.player.done, seconds=30)
        await pilot.press("ctrl+r")
        screen = app.screen
        assert isinstance(screen, ResidencyScreen)
        legend = str(screen.query_one("#residency-legend", Static).render())
        assert legend.splitlines() == [
            "   sink 4      recent 479      hot 20      cold 0      evicted 232",
            "735 tokens · resident 503 / budget 512 · policy streaming · observed",
        ]
        # the inspector opens on the first block, and says why the recording's policy kept it
        assert screen.query_one(ResidencyView).cursor_block.reason.text == "inside the attention-sink tokens at the start of the tape"


def footer_keys(app) -> list[FooterKey]:
    """The keys the footer shows, left to right."""
    keys = [key for key in app.screen.query_one(Footer).query(FooterKey) if key.display and key.region.width]
    return sorted(keys, key=lambda key: key.region.x)


def shown(app) -> list[tuple[str, str]]:
    return [(key.key_display, key.description) for key in footer_keys(app)]


async def test_a_replay_footer_offers_the_replay_keys_first_and_hides_what_would_continue_it():
    app = EffctxApp(replay=demo("chat"), replay_paused=True)
    async with app.run_test(size=(100, 30)) as pilot:
        await wait_for(pilot, lambda: footer_keys(app), seconds=5)
        await pilot.pause()  # the footer fits its keys after it has laid them out
        await pilot.pause()
        assert shown(app) == [("space", "Play/pause"), ("n", "Step"), ("+", "Faster"), ("-", "Slower"),
                              ("^r", "Residency"), ("^t", "Snapshots"), ("^g", "Timings"), ("^q", "Quit"), ("f1", "Help")]
        keys = footer_keys(app)
        assert keys[-1].region.right <= 100
        for left, right in zip(keys, keys[1:]):
            assert left.region.right <= right.region.x, f"{left.description} runs into {right.description}"


async def test_the_speed_keys_go_at_the_fastest_and_the_slowest_speed():
    app = EffctxApp(replay=demo("chat"), replay_paused=True, replay_speed=32)
    async with app.run_test(size=(100, 30)) as pilot:
        await pilot.press("plus")
        assert app.player.speed == 64.0
        assert [d for _, d in shown(app)][:4] == ["Play/pause", "Step", "Slower", "Residency"]
        app.player.speed = 0.5
        await pilot.press("minus")
        assert app.player.speed == 0.25
        assert [d for _, d in shown(app)][:4] == ["Play/pause", "Step", "Faster", "Residency"]


async def test_space_at_the_end_plays_the_recording_again_from_its_start():
    app = EffctxApp(replay=demo("chat"), replay_speed=64)
    async with app.run_test(size=(100, 30)) as pilot:
        screen = app.session_screen
        await wait_for(pilot, lambda: app.player.done and screen.turns_done == 3, seconds=30)
        # within the subtitle's tick: nothing is left to step through, and Space plays again
        await wait_for(pilot, lambda: shown(app)[:2] == [("space", "Play again"), ("-", "Slower")], seconds=2)
        played_again = []
        app.engine.subscribe(played_again.append)
        await pilot.press("space")
        await wait_for(pilot, lambda: app.player.done and screen.turns_done == 3, seconds=30)
        assert [e.kind for e in played_again] == [e.kind for e in demo("chat").events]
        turns = [str(w.render()) for w in screen.query_one(Transcript).children]
        assert turns[0::2] == ["What is the capital of France?", "And of Italy?", "Tell me about the sky."]
        assert [n.label for n in app.engine.tree] == ["start", *turns[0::2]]


@pytest.mark.parametrize("size", [(100, 30), (160, 48)])
def test_snapshot_of_a_paused_replay_at_its_start(snap_compare, size):
    # the footer a replay opens with: its own keys first, then the views it can show
    assert snap_compare(EffctxApp(replay=demo("chat"), replay_paused=True, theme="effctx-dark"), terminal_size=size)


def test_a_damaged_trace_is_refused_in_one_line(tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"kind":"session_opened","backend":"llama","model":"m","n_ctx":1,"identity":"x","t_ms":0}\n{oops\n')
    out = subprocess.run([EFFCTX, "--replay", str(bad)], capture_output=True, text=True, timeout=30)
    assert out.returncode == 2
    assert out.stderr == f"effctx: error: {bad} line 2: not a JSON event (the trace is damaged)\n"
