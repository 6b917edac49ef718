"""Themes: read from TOML files, switched at run time (f2, the command palette), and
remembered across starts; a bad file is skipped with one warning line."""

from __future__ import annotations

from pathlib import Path

import pytest
from textual.color import Color
from textual.command import CommandList
from textual.geometry import Region

from effctx_tui.themes import ThemeFileError, builtin_theme_files, load_theme_file, load_themes
from effctx_tui.widgets.block_inspector import BlockInspector, block_rows
from effctx_tui.widgets.residency_palette import theme_variables
from effctx_tui.widgets.residency_strip import ResidencyStrip
from effctx_tui.widgets.residency_view import ResidencyView
from effctx_tui.widgets.snapshot_tree import SnapshotTreeView
from tests.helpers.pilot_wait import wait_for
from tests.helpers.theme_fixtures import (  # noqa: F401 - config_home is a fixture
    SIZE,
    StripApp,
    ThemedResidencyApp,
    ThemedSnapshotsApp,
    config_home,
)

REPO = Path(__file__).resolve().parents[2]

# The strip of the fixed tape at 100 columns (98 cells inside its padding): the class
# runs, left to right, as (cells, class).
STRIP_RUNS = [(2, "sink"), (12, "hot"), (14, "evicted"), (13, "hot"), (8, "evicted"),
              (6, "hot"), (8, "cold"), (24, "hot"), (11, "recent")]


def strip_runs(app) -> list[tuple[int, str]]:
    strip = app.screen.query_one(ResidencyStrip)
    return [(len(segment.text), segment.style.bgcolor.triplet.hex) for segment in strip.render_line(0)]


def expected_runs(theme: str) -> list[tuple[int, str]]:
    variables = {t.name: t for t in load_themes().themes}[theme].variables
    return [(cells, variables[f"residency-{cls}"]) for cells, cls in STRIP_RUNS]


# The first row of the residency view at SIZE in block zoom, as (cells, class), the
# cursor's sink block first (see test_residency_screen).
VIEW_ROW = [(1, "sink"), (9, "hot"), (10, "evicted"), (10, "hot"), (5, "evicted"), (5, "hot"),
            (5, "cold"), (14, "hot")]
LEGEND_CLASSES = ["sink", "recent", "hot", "cold", "evicted"]


def theme_vars(theme: str) -> dict[str, str]:
    return {t.name: t for t in load_themes().themes}[theme].variables


def painted(widget) -> list[list]:
    """The widget's lines as painted: lists of Rich segments."""
    return widget.render_lines(Region(0, 0, *widget.outer_size))


def legend_swatches(app) -> list[tuple[str, str]]:
    """(background, colour) of each class's swatch in the residency legend, left to right."""
    line = painted(app.screen.query_one("#residency-legend"))[0]
    return [(s.style.bgcolor.triplet.hex, s.style.color.triplet.hex) for s in line if s.text == "  "]


def view_row(app) -> list[tuple[int, str]]:
    line = app.screen.query_one(ResidencyView).render_line(0)
    return [(len(s.text), s.style.bgcolor.triplet.hex) for s in line][:-1]  # the last is the gutter


def inspector_labels(app) -> dict[str, str]:
    """Each label of the block inspector with its style as painted."""
    labels = {label for label, _ in block_rows(app.screen.query_one(ResidencyView).cursor_block)}
    return {s.text.strip(): str(s.style) for line in painted(app.screen.query_one(BlockInspector))
            for s in line if s.text.strip() in labels}


# The facts of each node of snapshot_fixtures' tree, top to bottom; the screen puts the
# cursor on the current node, n3.
TREE_FACTS = ["root · 0 tokens · no state", "turn · 8 tokens · 180.7 KiB · 0 shared",
              "turn · 24 tokens · 433.02 KiB · 8 shared", "turn · 22 tokens · no state · 8 shared",
              "turn · 30 tokens · 556.7 KiB · 22 shared"]
CURSOR_LINE = 3


def tree_facts(app) -> list[tuple[str, str]]:
    """Each node's facts in the snapshot tree with their colour as painted."""
    return [(s.text.strip(), s.style.color.triplet.hex) for line in painted(app.screen.query_one(SnapshotTreeView))
            for s in line if " tokens · " in s.text]


def expected_facts(app, muted: str) -> list[tuple[str, str]]:
    # the cursor line is the cursor's colour throughout, as Textual's Tree draws it
    cursor = app.screen.query_one(SnapshotTreeView).get_component_rich_style("tree--cursor").color.triplet.hex
    return [(facts, cursor if i == CURSOR_LINE else muted) for i, facts in enumerate(TREE_FACTS)]


def notifications(app) -> list[tuple[str, str]]:
    return [(n.severity, n.message) for n in app._notifications]


# ---------------------------------------------------------------------- files


def test_three_themes_ship_with_effctx_and_the_top_level_folder_is_theirs():
    assert [t.name for t in load_themes().themes] == ["effctx-dark", "effctx-high-contrast", "effctx-light"]
    assert load_themes().warnings == []
    # themes/ at the top of the repository is the package folder the wheel ships
    assert (REPO / "themes").resolve() == (REPO / "effctx_tui" / "builtin_themes").resolve()
    assert [p.name for p in builtin_theme_files()] == sorted(p.name for p in (REPO / "themes").glob("*.toml"))


@pytest.mark.parametrize("path", builtin_theme_files(), ids=lambda p: p.stem)
def test_every_shipped_theme_colours_every_residency_class_and_the_cursor(path):
    assert set(theme_variables()) <= set(load_theme_file(path).variables)


@pytest.mark.parametrize(
    "text, reason",
    [
        ('name = "x"\nprimary = "notacolour"', "primary = 'notacolour' is not a colour"),
        ('name = "x"', "'primary' is missing"),
        ('primary = "#ffffff"', "'name' is missing"),
        ('name = "x"\nprimary = "#ffffff"\nprimry = "#ffffff"', "unknown key 'primry'"),
        ('name = "x"\nprimary = "#ffffff"\ndark = "yes"', "'dark' must be true or false"),
        ('name = "x"\nprimary = "#ffffff"\n[variables]\nresidency-hot = "hot pink"',
         "variables.residency-hot = 'hot pink' is not a colour"),
        ('name = "x"\nprimary = "#ffffff"\n[variables]\nblock-cursor-text-style = "loud"',
         "variables.block-cursor-text-style = 'loud' is not a text style"),
        ('name = ', "is not TOML: Invalid value (at end of document)"),
    ],
    ids=["bad colour", "no primary", "no name", "typo", "dark not bool", "bad variable", "bad style", "not toml"],
)
def test_a_bad_theme_file_is_refused_with_a_one_line_reason(tmp_path, text, reason):
    path = tmp_path / "bad.toml"
    path.write_text(text)
    with pytest.raises(ThemeFileError) as refused:
        load_theme_file(path)
    assert str(refused.value) == reason
    assert load_themes([path]).warnings == [f"Theme file {path} skipped: {reason}"]


def test_a_variable_may_carry_an_alpha_as_textual_s_own_do(tmp_path):
    path = tmp_path / "alpha.toml"
    path.write_text('name = "alpha"\nprimary = "#ffffff"\n[variables]\ninput-selection-background = "#81a1c1 35%"')
    assert load_theme_file(path).variables == {"input-selection-background": "#81a1c1 35%"}


# ---------------------------------------------------------------------- switching


async def test_f2_cycles_the_effctx_themes_and_the_strip_takes_their_colours(config_home):
    app = StripApp()
    async with app.run_test(size=SIZE) as pilot:
        assert app.theme == "effctx-dark"
        assert strip_runs(app) == expected_runs("effctx-dark")
        await pilot.press("f2")
        assert app.theme == "effctx-high-contrast"
        assert strip_runs(app) == expected_runs("effctx-high-contrast")
        await pilot.press("f2")
        assert app.theme == "effctx-light"
        assert strip_runs(app) == expected_runs("effctx-light")
        await pilot.press("f2")
        assert app.theme == "effctx-dark"


async def test_the_open_residency_screen_takes_the_colours_of_the_theme_switched_to(config_home):
    app = ThemedResidencyApp()
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("f2")
        assert app.theme == "effctx-high-contrast"
        hc = theme_vars("effctx-high-contrast")
        assert legend_swatches(app) == [(hc[f"residency-{cls}"], hc[f"residency-{cls}-mark"]) for cls in LEGEND_CLASSES]
        assert view_row(app) == [(cells, hc[f"residency-{cls}"]) for cells, cls in VIEW_ROW]
        assert set(inspector_labels(app).values()) == {"#ffffff on #000000"}


async def test_high_contrast_shows_secondary_text_at_full_strength(config_home):
    app = ThemedResidencyApp(theme="effctx-high-contrast")
    async with app.run_test(size=SIZE):
        # the block inspector's labels: its muted foreground (white), not dimmed
        assert inspector_labels(app) == {
            label: "#ffffff on #000000"
            for label in ("tokens", "position", "segment", "class", "flags", "last use", "score", "why")}
        # the header's subtitle, on the panel
        title = painted(app.screen.query_one("HeaderTitle"))[0]
        assert [(s.text, str(s.style)) for s in title if s.text.strip()] == [
            ("Residency", "#ffffff on #303030"), (" — policy streaming", "#ffffff on #303030")]


async def test_the_snapshot_tree_facts_take_the_muted_colour_of_the_theme_switched_to(config_home):
    app = ThemedSnapshotsApp(theme="effctx-high-contrast")
    async with app.run_test(size=SIZE) as pilot:
        assert tree_facts(app) == expected_facts(app, "#ffffff")  # its muted foreground: full white
        await pilot.press("f2")
        assert app.theme == "effctx-light"
        assert tree_facts(app) == expected_facts(app, theme_vars("effctx-light")["foreground-muted"])
        await pilot.press("f2")
        assert app.theme == "effctx-dark"
        # no muted foreground of its own: Textual's, the foreground at 60%, over the tree
        foreground = Color.parse(app.current_theme.foreground).with_alpha(0.6)
        muted = app.screen.query_one(SnapshotTreeView).background_colors[1] + foreground
        assert tree_facts(app) == expected_facts(app, muted.hex.lower())


async def test_a_textual_theme_without_residency_variables_gets_the_default_hues(config_home):
    app = StripApp()
    async with app.run_test(size=SIZE) as pilot:
        app.theme = "textual-light"
        await pilot.pause()
        assert strip_runs(app) == expected_runs("effctx-dark")


async def test_the_palette_has_an_entry_per_theme(config_home):
    app = StripApp()
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("ctrl+p", *"Theme: effctx-light")
        await wait_for(pilot, lambda: bool(app.screen.query(CommandList)) and app.screen.query_one(CommandList).option_count > 0, 5)
        assert str(app.screen.query_one(CommandList).get_option_at_index(0).prompt).startswith("Theme: effctx-light")
        await pilot.press("enter")
        await wait_for(pilot, lambda: app.theme == "effctx-light", 5)
        titles = [command.title for command in app.get_system_commands(app.screen)]
        assert [t for t in titles if t.startswith("Theme: ")] == [
            "Theme: effctx-dark", "Theme: effctx-high-contrast", "Theme: effctx-light"]


# ---------------------------------------------------------------------- remembering


async def test_the_choice_is_remembered_and_the_next_start_uses_it(config_home):
    first = StripApp()
    async with first.run_test(size=SIZE) as pilot:
        await pilot.press("f2")
    assert (config_home / "settings.toml").read_text() == 'theme = "effctx-high-contrast"\n'
    second = StripApp()
    async with second.run_test(size=SIZE):
        assert second.theme == "effctx-high-contrast"
        assert strip_runs(second) == expected_runs("effctx-high-contrast")
        assert notifications(second) == []


async def test_starting_with_a_given_theme_does_not_overwrite_the_remembered_one(config_home):
    app = StripApp(theme="effctx-light")
    async with app.run_test(size=SIZE):
        assert app.theme == "effctx-light"
    assert not (config_home / "settings.toml").exists()


async def test_a_remembered_theme_that_is_gone_falls_back_to_dark_with_a_warning(config_home):
    config_home.mkdir()
    (config_home / "settings.toml").write_text('theme = "my-own"\n')
    app = StripApp()
    async with app.run_test(size=SIZE):
        assert app.theme == "effctx-dark"
        assert notifications(app) == [("warning", "Theme 'my-own' is not available; using effctx-dark")]


# ---------------------------------------------------------------------- user themes


async def test_user_themes_are_added_and_a_broken_one_is_skipped_with_a_warning(config_home):
    themes = config_home / "themes"
    themes.mkdir(parents=True)
    (themes / "mine.toml").write_text('name = "mine"\nprimary = "#ff8800"\n[variables]\nresidency-sink = "#123456"\n')
    (themes / "broken.toml").write_text('name = "broken"\nprimary = "#ff8800"\nbackground = "nope"\n')
    app = StripApp()
    async with app.run_test(size=SIZE) as pilot:
        assert notifications(app) == [
            ("warning", f"Theme file {themes / 'broken.toml'} skipped: background = 'nope' is not a colour")]
        assert app.effctx_themes == ["effctx-dark", "effctx-high-contrast", "effctx-light", "mine"]
        await pilot.press("f2", "f2", "f2")
        assert app.theme == "mine"
        # its own sink colour, the default hues for what it leaves out
        assert strip_runs(app)[:2] == [(2, "#123456"), (12, theme_variables()["residency-hot"])]


# ---------------------------------------------------------------------- snapshots


@pytest.mark.parametrize("theme", ["effctx-light", "effctx-high-contrast"])
def test_snapshot_the_residency_screen_in_theme(snap_compare, config_home, theme):
    # token zoom on the shifted user block, as in test_residency_screen: every class, the
    # cursor and the evicted list are on screen
    assert snap_compare(ThemedResidencyApp(theme=theme), press=["right"] * 62 + ["z"], terminal_size=SIZE)
