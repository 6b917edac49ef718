"""A long or multi-line prompt on the session screen: a paste or a file (Ctrl+F) goes in
whole, shows as one marker, and reaches the model, the transcript, the snapshot tree and a
reopened session with its line breaks; an Enter that cannot send says so."""

from __future__ import annotations

import asyncio
import os

import pytest
from textual import events
from textual.widgets import Input, Label

from effctx_core.snapshots import SnapshotStore
from effctx_core.snapshots.tree import TurnText
from effctx_core.snapshots.tree_file import list_sessions
from effctx_tui.app import EffctxApp
from effctx_tui.screens.prompt_file import PromptFileDialog
from effctx_tui.widgets.prompt_input import PromptInput
from effctx_tui.widgets.snapshot_details import node_details
from effctx_tui.widgets.transcript import Transcript
from tests.helpers.pilot_wait import opened_steady, session_when_ready, start_a_long_prefill, until, wait_for

NOTES = "Summarise these notes:\nThe grass is green.\nThe sky is blue."


def user_turns(screen) -> list[str]:
    return [str(w.render()) for w in screen.query_one(Transcript).query(".user-turn")]


async def test_a_pasted_text_reaches_the_model_the_tree_and_a_reopened_session_line_by_line(
        default_model, tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    store = SnapshotStore(tmp_path / "store")
    app = EffctxApp(max_tokens=4, checkpoints=store, session_name="notes")
    async with session_when_ready(app, (120, 30)) as (pilot, screen):
        prompt = screen.query_one(PromptInput)
        prompt.post_message(events.Paste(NOTES + "\n"))
        await pilot.press("enter")  # right after the paste
        await wait_for(pilot, lambda: screen.turns_done == 1 and "notes" in list_sessions())
        engine = app.engine
        assert f"User: {NOTES}\nAssistant:" in engine.detokenize(engine.tape)
        assert user_turns(screen) == [NOTES]
        tree, node = engine.tree, engine.tree.current
        assert tree.node(node).label == "Summarise these notes:…"
        assert [turn.input for turn in tree.turns(node)] == [NOTES]
        assert f"\n\n{NOTES}\n" in node_details(tree, node, None).plain
        reply = tree.turns(node)[0].reply
    reopened = EffctxApp(max_tokens=4, checkpoints=store, session_name="notes")
    async with reopened.run_test(size=(120, 30)) as pilot:
        screen = reopened.session_screen
        await wait_for(pilot, lambda: screen.ready and bool(user_turns(screen)))
        assert user_turns(screen) == [NOTES]
        assert reopened.engine.tree.turns(reopened.engine.tree.current) == [TurnText(NOTES, reply)]


async def test_an_enter_while_a_reply_runs_says_so_once_and_the_prompt_keeps_its_text(default_model):
    app = EffctxApp(max_tokens=1, checkpoints=None)
    async with app.run_test(size=(120, 30)) as pilot:
        screen = app.session_screen
        await start_a_long_prefill(pilot, app)
        prompt = screen.query_one(PromptInput)
        prompt.insert_text_at_cursor("and then")
        said: list[str] = []
        screen.notify = lambda message, **kw: said.append(message)
        for _ in range(3):  # a paste typed in as keys: an Enter a line
            app.post_message(events.Key("enter", None))
        await until(lambda: bool(said))
        await asyncio.sleep(0.3)  # the other two Enters' Submitted reach the screen meanwhile
        assert screen.busy, "the prefill should still be running"
        assert said == ["A reply is still running; the prompt keeps your text for when it is done (Esc stops the reply)."]
        await wait_for(pilot, lambda: screen.turns_done == 1)
        assert prompt.value == "and then"


# ---------------------------------------------------------------------- Ctrl+F: a file

def without_a_model(tmp_path) -> EffctxApp:
    """The prompt and its file dialog need no model: the console opens without one."""
    return EffctxApp(model=tmp_path / "absent.gguf", checkpoints=None)


async def read_in_the_dialog(pilot, path: str) -> PromptFileDialog:
    await pilot.press("ctrl+f")
    dialog = pilot.app.screen
    assert isinstance(dialog, PromptFileDialog)
    dialog.query_one(Input).value = path
    await pilot.press("enter")
    await dialog.workers.wait_for_complete()
    await pilot.pause()
    return dialog


async def test_ctrl_f_puts_a_file_into_the_prompt_as_a_marker_sent_whole(tmp_path):
    (tmp_path / "notes.md").write_text(NOTES + "\n", encoding="utf-8")
    app = without_a_model(tmp_path)
    async with app.run_test(size=(100, 30)) as pilot:
        prompt = app.session_screen.query_one(PromptInput)
        await pilot.press(*"Read this: ")
        await read_in_the_dialog(pilot, str(tmp_path / "notes.md"))
        assert app.screen is app.session_screen and prompt.has_focus
        assert prompt.value == "Read this: [paste 1: 59 B, 3 lines]"
        assert prompt.full_value == f"Read this: {NOTES}"


def a_fifo(tmp_path):
    os.mkfifo(tmp_path / "pipe")
    return tmp_path / "pipe"


def bytes_file(content: bytes):
    def make(tmp_path):
        (tmp_path / "file").write_bytes(content)
        return tmp_path / "file"
    return make


FILE_ERRORS = {
    "missing": (lambda tmp_path: tmp_path / "absent.md", "prompt file not found: {path}"),
    "a directory": (lambda tmp_path: tmp_path, "prompt file is a directory, not a file: {path}"),
    "unreadable": (a_fifo, "prompt file is a FIFO (named pipe), not a file: {path}"),
    "binary": (bytes_file(b"GGUF\0\0\0\3"), "prompt file is binary (it holds NUL bytes), not text: {path}"),
    "not UTF-8": (bytes_file("café".encode("latin-1")), "prompt file is not UTF-8 text: {path}"),
    "too large": (bytes_file(b"word " * 210_000), "prompt file is larger than 1 MiB (1,050,000 bytes): {path}"),
    "empty": (bytes_file(b"\n  \n"), "prompt file holds no text: {path}"),
}


@pytest.mark.parametrize("case", list(FILE_ERRORS))
async def test_a_file_that_cannot_be_a_prompt_is_one_line_in_the_dialog_and_nothing_else(tmp_path, case):
    make, message = FILE_ERRORS[case]
    path = make(tmp_path)
    app = without_a_model(tmp_path)
    async with app.run_test(size=(100, 30)) as pilot:
        prompt = app.session_screen.query_one(PromptInput)
        await pilot.press(*"kept")
        dialog = await read_in_the_dialog(pilot, str(path))
        assert str(dialog.query_one("#file-error", Label).render()) == message.format(path=path)
        assert app.screen is dialog
        await pilot.press("escape")
        assert app.screen is app.session_screen
        assert (prompt.value, prompt.full_value) == ("kept", "kept")


# ---------------------------------------------------------------------- baseline

async def pasted_a_document(pilot) -> None:
    await opened_steady(pilot)
    pilot.app.session_screen.query_one(PromptInput).post_message(
        events.Paste("The grass is green.\nThe sky is blue.\n\n  Water is wet.\n" * 270))
    await pilot.pause(0.2)


def test_snapshot_of_the_prompt_holding_a_pasted_document(snap_compare, default_model):
    assert snap_compare(EffctxApp(max_tokens=1, checkpoints=None), terminal_size=(100, 30),
                        run_before=pasted_a_document)
