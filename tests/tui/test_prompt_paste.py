"""The session's prompt takes a long paste in one event, every line of it, and an Enter
pressed right after submits all of it."""

from __future__ import annotations

from textual import events
from textual.app import App, ComposeResult
from textual.widgets import Input

from effctx_tui.widgets.prompt_input import PromptInput, one_line

DOCUMENT = "The grass is green.\nThe sky is blue.\n\n  Water is wet.\n" * 270  # 14.6 KB, as pasted from a file


class PromptApp(App):
    def __init__(self) -> None:
        super().__init__()
        self.submitted: list[str] = []

    def compose(self) -> ComposeResult:
        yield PromptInput(id="prompt")

    def on_input_submitted(self, event: Input.Submitted) -> None:
        self.submitted.append(event.value)


def test_a_pasted_document_is_one_line_of_all_its_lines():
    assert len(DOCUMENT.encode()) == 14_580
    assert one_line("The grass is green.\nThe sky is blue.\n\n  Water is wet.\n") == \
        "The grass is green. The sky is blue. Water is wet."


async def test_a_long_paste_arrives_at_once_and_an_enter_right_after_submits_it():
    app = PromptApp()
    async with app.run_test(size=(100, 30)) as pilot:
        prompt = app.query_one(PromptInput)
        prompt.focus()
        changes: list[str] = []
        prompt.watch(prompt, "value", lambda value: changes.append(value), init=False)
        prompt.post_message(events.Paste(DOCUMENT))
        await pilot.press("enter")
        assert changes == [one_line(DOCUMENT)]
        assert app.submitted == [one_line(DOCUMENT)]


async def test_a_paste_replaces_the_selected_text():
    app = PromptApp()
    async with app.run_test(size=(100, 30)) as pilot:
        prompt = app.query_one(PromptInput)
        prompt.focus()
        await pilot.press(*"Summarise: XYZ")
        prompt.select_all()
        prompt.post_message(events.Paste("first line\nsecond line"))
        await pilot.pause()
        assert prompt.value == "first line second line"
