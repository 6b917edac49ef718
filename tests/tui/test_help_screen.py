"""The help page (f1 from every screen, or ? where no Input has the focus) explains each
term in one line and lists every key of every screen; every key is also a command in the
palette and shown in the footer."""

from __future__ import annotations

import importlib
import pkgutil

import pytest
from textual.app import App
from textual.widgets import Footer, Input, Static
from textual.widgets._footer import FooterKey

from effctx_tui.console import ConsoleApp
from effctx_tui.screens.help import HelpScreen, declared_bindings, screen_classes
from effctx_tui.screens.session import SessionScreen
from effctx_tui.screens.snapshot_dialogs import ConfirmDialog, RenameDialog
from tests.helpers.theme_fixtures import SIZE, StripApp, ThemedResidencyApp, config_home  # noqa: F401 - fixture


class SessionApp(ConsoleApp):
    """The session screen without an engine: its keys, footer and palette are all we need."""

    def on_mount(self) -> None:
        self.push_screen(SessionScreen(16))


def help_rows(app: App, section: str) -> list[tuple[str, str]]:
    text = str(app.screen.query_one(f"#help-{section}", Static).render())
    return [tuple(part.strip() for part in line.strip().split("  ", 1)) for line in text.splitlines()]


async def test_f1_opens_the_help_and_f1_or_escape_closes_it(config_home):
    app = StripApp()
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("f1")
        assert isinstance(app.screen, HelpScreen)
        await pilot.press("f1")
        assert not isinstance(app.screen, HelpScreen)
        await pilot.press("f1", "escape")
        assert not isinstance(app.screen, HelpScreen)


async def test_f1_opens_the_help_from_a_dialog_and_from_a_focused_input(config_home):
    app = StripApp()
    async with app.run_test(size=SIZE) as pilot:
        for dialog in (ConfirmDialog("Delete n3?"), RenameDialog("n3", "turn")):
            app.push_screen(dialog)
            await pilot.pause()
            await pilot.press("f1")
            assert isinstance(app.screen, HelpScreen)
            await pilot.press("f1")
            assert app.screen is dialog
            dialog.dismiss(None)
            await pilot.pause()


async def test_the_help_explains_each_term_the_console_shows_in_one_line(config_home):
    app = StripApp()
    async with app.run_test(size=(100, 30)) as pilot:
        await pilot.press("f1")
        titles = [str(w.render()) for w in app.screen.query(".help-title")]
        assert titles[:2] == ["Terms", "Everywhere"]
        terms = app.screen.query_one("#help-terms")
        # one line each at 100 columns: nothing wraps
        lines = [terms.render_line(y).text.rstrip() for y in range(terms.size.height)]
        assert [line.split("  ")[0] for line in lines] == [
            "tape", "block", "sink", "recent", "hot", "cold", "evicted", "policy, budget", "reused", "prefilled",
            "dropped", "observed", "modeled", "segment", "profile", "cell", "certified", "snapshot, node",
            "restore, recompute", "branch", "prefix cache", "TTFT", "route", "divergence", "miss"]
        assert lines[2] == "sink" + " " * 16 + "the first tokens, always kept: attention leans on them"


async def test_question_mark_opens_the_help_but_is_typed_into_the_prompt(config_home):
    residency = ThemedResidencyApp()
    async with residency.run_test(size=SIZE) as pilot:
        await pilot.press("question_mark")
        assert isinstance(residency.screen, HelpScreen)
    session = SessionApp()
    async with session.run_test(size=SIZE) as pilot:
        prompt = session.screen.query_one(Input)
        prompt.disabled = False  # no engine will ever enable it
        prompt.focus()
        await pilot.press("question_mark")
        assert prompt.value == "?"
        assert isinstance(session.screen, SessionScreen)


async def test_the_help_lists_the_session_screen_s_keys_exactly(config_home):
    app = SessionApp()
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("f1")
        assert help_rows(app, "session") == [
            ("space", "Play/pause"),
            ("space", "Play again"),
            ("n", "Step"),
            ("+", "Faster"),
            ("-", "Slower"),
            ("esc", "Stop"),
            ("^l", "Load model"),
            ("^n", "New conversation"),
            ("^r", "Residency"),
            ("^t", "Snapshots"),
            ("^g", "Timings"),
            ("^o", "Cells"),
            ("^b", "Benchmark"),
            ("^y", "Requests"),
            ("^f", "Insert file"),
            ("^q", "Quit"),
        ]
        assert help_rows(app, "everywhere") == [
            ("f1", "Help"), ("f2", "Theme"), ("^q", "Quit"), ("^p", "Command palette")]


async def test_every_screen_has_a_section_with_the_keys_of_the_widgets_it_hosts(config_home):
    app = StripApp()
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("f1")
        titles = [str(w.render()) for w in app.screen.query(".help-title")]
        assert titles == ["Terms", "Everywhere", "Session", "Residency", "Snapshots", "Diff", "Benchmark", "Cells",
                          "Confirm dialog", "Prompt file dialog", "Rename dialog", "Request inspector",
                          "Requests", "Timings"]
        assert help_rows(app, "residency") == [
            ("esc", "Back"), ("[", "Budget −"), ("]", "Budget +"), ("c", "Recompute cold"), ("←→", "Block"), ("→ l", "Next block"), ("↑↓", "Row"), ("↓ j", "Next row"),
            ("pgup", "Page up"), ("pgdn", "Page down"), ("home", "First block"), ("end", "Last block"),
            ("z +", "Zoom"), ("Z -", "Zoom out"),
        ]
        # the tree's own keys
        assert help_rows(app, "snapshots")[-3:] == [("⏎", "Restore"), ("home", "First"), ("end", "Last")]


def effctx_classes() -> list[type]:
    """The app, every screen and every widget of effctx: all that declares keys."""
    from effctx_tui import widgets

    found = [ConsoleApp, *screen_classes()]
    for info in pkgutil.iter_modules(widgets.__path__):
        module = importlib.import_module(f"{widgets.__name__}.{info.name}")
        found += [value for value in vars(module).values()
                  if isinstance(value, type) and value.__module__ == module.__name__ and "BINDINGS" in vars(value)]
    return found


def test_every_key_says_what_it_does():
    # the tooltip is the key's line in the palette (and the footer's hover)
    classes = effctx_classes()
    assert {"SessionScreen", "ResidencyView", "SnapshotTreeView", "ListTable", "ConfirmDialog"} <= {c.__name__ for c in classes}
    assert [f"{cls.__name__}: {binding.description}" for cls in classes for binding in declared_bindings(cls)
            if binding.description and not binding.tooltip] == []


async def test_the_palette_describes_each_key_of_the_screen_and_leaves_textual_s_own_out(config_home):
    app = ThemedResidencyApp()
    async with app.run_test(size=SIZE):
        helps = {c.title: c.help for c in app.get_system_commands(app.screen)}
        assert helps["Back"] == "Back to the session (esc)"
        # the focused residency view's keys
        assert helps["Zoom"] == "Zoom in: fewer tokens per cell, down to one (z)"
        assert helps["First block"] == "The first block of the tape (home)"
        assert "Focus Next" not in helps


async def test_the_palette_has_one_help_entry_and_it_opens_the_help(config_home):
    app = SessionApp()
    async with app.run_test(size=(160, 30)) as pilot:
        commands = app.get_system_commands(app.screen)
        helps = [(c.title, c.help) for c in commands if "help" in c.title.lower() or "help" in c.help.lower()
                 or c.title == "Keys"]
        assert helps == [("Help", "What each term means, and every key of every screen (f1)")]
        next(c for c in commands if c.title == "Help").callback()
        await pilot.pause()
        assert isinstance(app.screen, HelpScreen)


async def test_every_session_key_is_a_palette_command_and_the_footer_offers_those_that_act(config_home):
    app = SessionApp()
    async with app.run_test(size=(160, 30)):
        screen = app.screen
        titles = {command.title for command in app.get_system_commands(screen)}
        assert {"Load model", "Timings", "Requests", "Insert file", "Quit", "Help", "Next theme"} <= titles
        assert not {"Stop", "New conversation", "Residency", "Snapshots", "Cells", "Benchmark"} & titles
        footer = [(key.key_display, key.description) for key in screen.query_one(Footer).query(FooterKey)]
        # No model is open here: Ctrl+L (load it) is offered, and nothing that needs a model;
        # a file can go into the prompt already.
        assert footer == [("^l", "Load model"), ("^g", "Timings"), ("^y", "Requests"), ("^f", "Insert file"),
                          ("^q", "Quit"), ("f1", "Help"), ("f2", "Theme"), ("^p", "palette")]


@pytest.mark.parametrize("size", [(100, 30), (160, 48)], ids=lambda size: f"{size[0]}x{size[1]}")
def test_snapshot_the_help_screen(snap_compare, config_home, size):
    assert snap_compare(StripApp(theme="effctx-dark"), press=["f1"], terminal_size=size)
