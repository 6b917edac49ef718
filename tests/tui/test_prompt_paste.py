"""The session's prompt takes a long paste in one event, every line of it, shows it as one
marker, and an Enter pressed right after submits all of it."""

from __future__ import annotations

from contextlib import asynccontextmanager
from typing import AsyncIterator

import pytest
from textual import events
from textual.app import App, ComposeResult
from textual.pilot import Pilot
from textual.widgets import Input

from effctx_tui.widgets.prompt_input import PromptInput

DOCUMENT = "The grass is green.\nThe sky is blue.\n\n  Water is wet.\n" * 270  # 14.6 KB, as pasted from a file
KEPT = DOCUMENT.rstrip("\n")  # the line break after the last line is the copy's, not the text's
MARKER = "[paste 1: 14.24 KiB, 1,080 lines]"


class PromptApp(App):
    def __init__(self) -> None:
        super().__init__()
        self.submitted: list[str] = []

    def compose(self) -> ComposeResult:
        yield PromptInput(id="prompt")

    def on_input_submitted(self, event: Input.Submitted) -> None:
        self.submitted.append(event.value)


@asynccontextmanager
async def focused_prompt() -> AsyncIterator[tuple[PromptApp, Pilot, PromptInput]]:
    """The prompt alone in an app at 100x30, with the focus."""
    app = PromptApp()
    async with app.run_test(size=(100, 30)) as pilot:
        prompt = app.query_one(PromptInput)
        prompt.focus()
        yield app, pilot, prompt


async def pasted(pilot, prompt: PromptInput, text: str) -> None:
    prompt.post_message(events.Paste(text))
    await pilot.pause()


async def test_a_long_paste_arrives_at_once_as_a_marker_and_an_enter_right_after_submits_all_its_lines():
    assert len(DOCUMENT.encode()) == 14_580
    async with focused_prompt() as (app, pilot, prompt):
        changes: list[str] = []
        prompt.watch(prompt, "value", lambda value: changes.append(value), init=False)
        prompt.post_message(events.Paste(DOCUMENT))
        await pilot.press("enter")
        assert changes == [MARKER]
        assert app.submitted == [KEPT]


@pytest.mark.parametrize(("paste", "shown", "sent"), [
    ("Paris", "Paris", "Paris"),
    ("a copied line\n", "a copied line", "a copied line"),
    ("x" * 200, "x" * 200, "x" * 200),
    ("x" * 201, "[paste 1: 201 B, 1 line]", "x" * 201),
    ("def f():\r\n    return 1\r\n", "[paste 1: 21 B, 2 lines]", "def f():\n    return 1"),
    ("\n \n", "", ""),
])
async def test_a_paste_of_one_short_line_is_shown_as_itself_and_any_other_as_a_marker(paste, shown, sent):
    async with focused_prompt() as (app, pilot, prompt):
        await pasted(pilot, prompt, paste)
        assert (prompt.value, prompt.full_value) == (shown, sent)


async def test_typing_around_a_marker_keeps_the_paste_whole_between_the_words():
    async with focused_prompt() as (app, pilot, prompt):
        await pilot.press(*"Summarise ")
        await pasted(pilot, prompt, "one\ntwo")
        await pilot.press(*" briefly", "home", *"Please: ")
        assert prompt.value == "Please: Summarise [paste 1: 7 B, 2 lines] briefly"
        await pilot.press("end", *["left"] * 12, *"!")  # the cursor inside the marker: typing goes after it
        assert prompt.value == "Please: Summarise [paste 1: 7 B, 2 lines]! briefly"
        await pilot.press("enter")
        assert app.submitted == ["Please: Summarise one\ntwo! briefly"]


async def test_backspace_after_a_marker_removes_the_whole_paste():
    async with focused_prompt() as (app, pilot, prompt):
        await pilot.press(*"Read: ")
        await pasted(pilot, prompt, DOCUMENT)
        await pilot.press("backspace")
        assert (prompt.value, prompt.full_value) == ("Read: ", "Read: ")
        await pilot.press("backspace")
        assert prompt.value == "Read:"


async def test_two_pastes_of_one_size_are_two_markers_each_sent_as_itself():
    async with focused_prompt() as (app, pilot, prompt):
        await pasted(pilot, prompt, "a\nb")
        await pilot.press("space")
        await pasted(pilot, prompt, "c\nd")
        assert prompt.value == "[paste 1: 3 B, 2 lines] [paste 2: 3 B, 2 lines]"
        await pilot.press("enter")
        prompt.clear()
        await pasted(pilot, prompt, "e\nf")  # an empty prompt numbers from 1 again
        assert prompt.value == "[paste 1: 3 B, 2 lines]"
        assert app.submitted == ["a\nb c\nd"]


async def test_a_paste_replaces_the_selected_text_marker_and_all():
    async with focused_prompt() as (app, pilot, prompt):
        await pilot.press(*"Summarise: ")
        await pasted(pilot, prompt, "first line\nsecond line")
        prompt.select_all()
        await pasted(pilot, prompt, "third line")
        assert (prompt.value, prompt.full_value) == ("third line", "third line")
