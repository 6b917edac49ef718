"""What every effctx app has, with or without an engine behind it: the one stylesheet,
themes from files (f2 cycles, the choice is remembered in settings.toml), the help page
(f1: terms and keys) and a command-palette entry for every key of the current screen.

EffctxApp builds on it; tests build on it too, to show any screen in any theme.
"""

from __future__ import annotations

from pathlib import Path
from typing import Iterable

from textual.app import App, SystemCommand
from textual.binding import Binding
from textual.content import Content
from textual.screen import Screen

from effctx_core.errors import EffctxError
from effctx_tui.screens.help import HelpScreen, declared_bindings, palette_help
from effctx_tui.settings import read_settings, write_setting
from effctx_tui.themes import MUTED, load_themes
from effctx_tui.widgets.residency_palette import theme_variables

DEFAULT_THEME = "effctx-dark"
# Named, for the palette's entries to say what the keys say
HELP_KEY = Binding("f1", "help", "Help", priority=True, tooltip="What each term means, and every key of every screen")
THEME_KEY = Binding("f2", "next_theme", "Theme", tooltip="Switch to the next effctx theme")


class ConsoleApp(App):
    # Absolute, because Textual resolves a relative CSS_PATH against the file of the
    # subclass, and subclasses live elsewhere (tests).
    CSS_PATH = str(Path(__file__).with_name("effctx.tcss"))

    BINDINGS = [
        # A priority binding: f1 opens the help from every screen, dialogs included, and
        # with any widget focused. `?` too, but not as a priority: it is typed into an
        # Input when one has the focus (the session prompt).
        HELP_KEY,
        Binding("question_mark", "help", show=False),
        THEME_KEY,
        # Textual's own ctrl+q, shown: a priority binding hides the screens' visible ones
        Binding("ctrl+q", "quit", "Quit", priority=True, tooltip="Quit effctx"),
    ]

    def __init__(self, theme: str | None = None) -> None:
        """`theme` starts in that theme instead of the remembered one, without remembering it."""
        super().__init__()
        loaded = load_themes()
        for loaded_theme in loaded.themes:
            self.register_theme(loaded_theme)
        self.effctx_themes = [loaded_theme.name for loaded_theme in loaded.themes]
        self.startup_warnings = list(loaded.warnings)
        settings, warning = read_settings()
        if warning:
            self.startup_warnings.append(warning)
        saved = theme if theme is not None else settings.get("theme")
        if isinstance(saved, str) and saved in self.available_themes:
            self.theme = saved
        else:
            if saved is not None:
                self.startup_warnings.append(f"Theme {saved!r} is not available; using {DEFAULT_THEME}")
            self.theme = DEFAULT_THEME if DEFAULT_THEME in self.available_themes else "textual-dark"
        # From here on a change of theme is the user's, and is remembered.
        self._remember_theme = True

    def get_theme_variable_defaults(self) -> dict[str, str]:
        # Textual's own themes know nothing of the residency classes
        return theme_variables()

    def format_title(self, title: str, sub_title: str) -> Content:
        # Textual's own dims the subtitle, which no theme can undo
        if not sub_title:
            return Content(title)
        return Content.assemble(title, (f" — {sub_title}", MUTED))

    def on_mount(self) -> None:
        for warning in self.startup_warnings:
            self.notify(warning, severity="warning", timeout=10)

    def watch_theme(self, name: str) -> None:
        if not getattr(self, "_remember_theme", False):
            return
        try:
            write_setting("theme", name)
        except (OSError, EffctxError) as exc:
            self.notify(f"Theme not remembered: {exc}", severity="warning")

    # ------------------------------------------------------------------ actions

    def action_help(self) -> None:
        if isinstance(self.screen, HelpScreen):
            self.pop_screen()
        else:
            self.push_screen(HelpScreen())

    def action_next_theme(self) -> None:
        names = self.effctx_themes
        if not names:
            return
        # from a Textual theme picked in the palette, cycling starts again at the first
        at = names.index(self.theme) + 1 if self.theme in names else 0
        self.theme = names[at % len(names)]
        self.notify(f"Theme {self.theme}", timeout=2)

    def set_theme(self, name: str) -> None:
        self.theme = name

    # ------------------------------------------------------------------ command palette

    def get_system_commands(self, screen: Screen) -> Iterable[SystemCommand]:
        # Textual's "Keys" (its key panel) would be a second help: the help page lists them all
        commands = [command for command in super().get_system_commands(screen)
                    if command.callback != self.action_show_help_panel]
        commands.append(SystemCommand("Help", palette_help(self, HELP_KEY), self.action_help))
        commands.append(SystemCommand("Next theme", palette_help(self, THEME_KEY), self.action_next_theme))
        commands += [
            SystemCommand(f"Theme: {name}", f"Switch to the {name} theme", lambda name=name: self.set_theme(name))
            for name in self.effctx_themes
        ]
        commands += self._binding_commands(screen, {command.title for command in commands})
        return commands

    def _binding_commands(self, screen: Screen, taken: set[str]) -> list[SystemCommand]:
        """One command per key of the screen and its focused widgets, described by its
        tooltip, so nothing needs the key to be remembered. The keys Textual's own classes
        declare (Input editing, focus moves) are left out."""
        commands = []
        # A screen with its own providers (snapshots) already lists its keys, in its words
        own_commands = bool(type(screen).COMMANDS)
        for active in screen.active_bindings.values():
            node, binding = active.node, active.binding
            if not binding.description or binding.system or not active.enabled or binding.description in taken:
                continue
            # Textual splits "left,h" into a binding per key: the action and description tell
            if (binding.action, binding.description) not in {(b.action, b.description) for b in declared_bindings(type(node))}:
                continue
            if own_commands and node is not self:
                continue
            taken.add(binding.description)
            commands.append(SystemCommand(
                binding.description,
                palette_help(self, binding),
                lambda node=node, action=binding.action: self.run_action(action, node),
            ))
        return commands
