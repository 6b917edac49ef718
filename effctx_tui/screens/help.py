"""The help page (f1): what each term the console shows means, in one line, then every
key of the console, screen by screen, read from the BINDINGS themselves so the list
cannot drift from what the keys do.

Screens are found by importing every module of this package, so a new screen shows up
here without an edit. A screen's keys also include those of the effctx widgets it hosts
(listed in HOSTED_WIDGETS: which widgets a screen composes is only known at run time);
Textual's own widgets (Input, Tree, OptionList) keep their usual keys and are left out.
"""

from __future__ import annotations

import importlib
import pkgutil
import re
from dataclasses import dataclass

from rich.table import Table
from rich.text import Text
from textual.app import App, ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import VerticalScroll
from textual.screen import Screen
from textual.widgets import Header, Static

from effctx_tui.widgets.footer import EffctxFooter

# Sections come in this order; screens not named here follow, alphabetically.
ORDER = ("SessionScreen", "ResidencyScreen", "SnapshotsScreen", "DiffScreen")

# The words the screens use without explaining them, in the order a newcomer meets them.
# One line each, short enough for a 100-column terminal.
TERMS: tuple[tuple[str, str], ...] = (
    ("tape", "the tokens the runtime holds for this conversation, in order"),
    ("block", "a run of consecutive tokens of the tape; residency is decided per block"),
    ("sink", "the first tokens, always kept: attention leans on them"),
    ("recent", "the latest tokens, always kept: what was just said"),
    ("hot", "older blocks the policy keeps resident, as the budget allows"),
    ("cold", "blocks parked outside the cache, recomputed when needed again"),
    ("evicted", "blocks dropped from the cache: the model no longer sees them"),
    ("policy, budget", "the rule that classes each block; the tokens it may keep resident"),
    ("reused", "prompt tokens already resident from before, not computed again"),
    ("prefilled", "prompt tokens the runtime computed for this turn"),
    ("dropped", "resident tokens thrown away where the new prompt differs from them"),
    ("observed", "read back from the runtime itself"),
    ("modeled", "worked out by effctx from the settings; the runtime does not report it"),
    ("segment", "what a token belongs to: system, user or assistant turn, prefix…"),
    ("profile", "named runtime settings: backend, model, context size, KV types, policy"),
    ("cell", "backend × version × device × model × profile: one way to run the model"),
    ("certified", "a cell measured on this machine by effctx certify, with its gates passed"),
    ("snapshot, node", "the session saved at a turn: its tokens and, if stored, its cache"),
    ("restore, recompute", "back to a node from its stored cache; computed again if none"),
    ("branch", "restore a node and continue differently from there"),
    ("prefix cache", "stored caches of prompt starts (system prompt, document), reused"),
    ("TTFT", "time to first token: from sending the prompt to the reply's first token"),
    ("route", "where a request started: the resident tape, a stored state, or cold"),
    ("divergence", "where a request's prompt left its conversation's last request, and why"),
    ("miss", "a request that left its conversation, or reused less than it held"),
)


@dataclass(frozen=True)
class Section:
    title: str
    rows: tuple[tuple[str, str], ...]  # (keys as the footer shows them, description)


def declared_bindings(cls: type) -> list[Binding]:
    """The bindings that effctx classes in cls's MRO declare, most derived first."""
    found: list[Binding] = []
    for klass in cls.__mro__:
        if klass.__module__.split(".")[0] != "effctx_tui":
            continue
        items: list[BindingType] = klass.__dict__.get("BINDINGS", [])
        found += [item if isinstance(item, Binding) else Binding(*item) for item in items]
    return found


def key_display(app: App, binding: Binding) -> str:
    if binding.key_display:
        return binding.key_display
    keys = [key.strip() for key in binding.key.split(",")]
    return " ".join(app.get_key_display(Binding(key, binding.action)) for key in keys)


def palette_help(app: App, binding: Binding) -> str:
    """A key's line in the command palette: what it does (its tooltip) and the key."""
    return f"{binding.tooltip} ({key_display(app, binding)})"


def rows(app: App, classes: list[type]) -> tuple[tuple[str, str], ...]:
    return tuple(
        (key_display(app, binding), binding.description)
        for cls in classes
        for binding in declared_bindings(cls)
        if binding.description  # an action without a description is not the user's
    )


def _title(cls: type) -> str:
    words = re.findall(r"[A-Z][a-z]*", cls.__name__)
    if words and words[-1] == "Screen":
        words.pop()
    return " ".join([words[0], *(w.lower() for w in words[1:])])


def screen_classes() -> list[type[Screen]]:
    from effctx_tui import screens

    found: list[type[Screen]] = []
    for info in pkgutil.iter_modules(screens.__path__):
        module = importlib.import_module(f"{screens.__name__}.{info.name}")
        found += [
            value for value in vars(module).values()
            if isinstance(value, type) and issubclass(value, Screen) and value.__module__ == module.__name__
        ]
    rank = {name: i for i, name in enumerate(ORDER)}
    return sorted(found, key=lambda cls: (rank.get(cls.__name__, len(ORDER)), cls.__name__))


def hosted_widgets() -> dict[str, list[type]]:
    from effctx_tui.widgets.request_table import RequestTable
    from effctx_tui.widgets.residency_view import ResidencyView
    from effctx_tui.widgets.snapshot_tree import SnapshotTreeView

    return {"ResidencyScreen": [ResidencyView], "SnapshotsScreen": [SnapshotTreeView], "RequestsScreen": [RequestTable]}


def sections(app: App) -> list[Section]:
    everywhere = rows(app, [type(app)])
    if app.ENABLE_COMMAND_PALETTE:
        palette = Binding(app.COMMAND_PALETTE_BINDING, "command_palette", "Command palette")
        everywhere += ((key_display(app, palette), palette.description),)
    found = [Section("Everywhere", everywhere)]
    widgets = hosted_widgets()
    for cls in screen_classes():
        if cls is HelpScreen:
            continue
        section = Section(_title(cls), rows(app, [cls, *widgets.get(cls.__name__, [])]))
        if section.rows:
            found.append(section)
    return found


def section_text(section: Section, key_width: int) -> Text:
    text = Text()
    for keys, description in section.rows:
        text.append(f"{keys:>{key_width}}", style="bold")
        text.append(f"  {description}\n")
    text.rstrip()
    return text


def terms_table() -> Table:
    # a grid, so a line too long for a narrow terminal wraps under its own column
    table = Table.grid(padding=(0, 2))
    table.add_column(style="bold", no_wrap=True)
    table.add_column(ratio=1)
    for term, meaning in TERMS:
        table.add_row(term, meaning)
    return table


class HelpScreen(Screen):
    # f1 closes it too: the app's f1 (a priority binding) toggles the help
    BINDINGS = [Binding("escape,q", "app.pop_screen", "Close", key_display="esc", tooltip="Back to the screen the help was opened from")]

    DEFAULT_CSS = """
    HelpScreen {
        #help-body { padding: 0 2; }
        .help-title { color: $accent; text-style: bold; margin-top: 1; }
        .help-keys { color: $foreground; }
    }
    """

    def __init__(self) -> None:
        super().__init__()
        self.title = "Help"
        self.sub_title = "terms, then keys"

    def compose(self) -> ComposeResult:
        found = sections(self.app)
        width = max((len(keys) for section in found for keys, _ in section.rows), default=0)
        yield Header(show_clock=False)
        with VerticalScroll(id="help-body"):
            yield Static("Terms", classes="help-title")
            yield Static(terms_table(), id="help-terms", classes="help-keys")
            for section in found:
                slug = section.title.lower().replace(" ", "-")
                yield Static(section.title, classes="help-title")
                yield Static(section_text(section, width), id=f"help-{slug}", classes="help-keys")
        yield EffctxFooter()
