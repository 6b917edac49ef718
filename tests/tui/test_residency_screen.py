"""The residency screen and its widgets, driven with Textual's Pilot on a fixed tape
(tests/helpers/residency_tape.py says what it holds)."""

from __future__ import annotations

from textual.app import App, ComposeResult
from textual.geometry import Region
from textual.widget import Widget
from textual.widgets import OptionList

from effctx_core.residency.blocks import BlockClass, BlockTable, Segment
from effctx_core.residency.report import OBSERVED, UNKNOWN, ResidencyReport
from effctx_tui.screens.residency import ResidencyScreen, legend_summary
from effctx_tui.widgets.block_inspector import BlockInspector
from effctx_tui.widgets.residency_palette import CLASS_COLOURS
from effctx_tui.widgets.residency_strip import ResidencyStrip
from effctx_tui.widgets.residency_tape import Zoom, squeeze_classes
from effctx_tui.widgets.residency_view import ResidencyView
from tests.helpers.residency_tape import ROW, SIZE, planned_tape, segments


class ResidencyApp(App):
    def __init__(self, table: BlockTable | None = None) -> None:
        super().__init__()
        self.table = table if table is not None else planned_tape()
        self.selected: list[int] = []

    def on_mount(self) -> None:
        self.push_screen(ResidencyScreen(self.table, "streaming", source=OBSERVED, budget=800))

    def on_residency_view_block_selected(self, message: ResidencyView.BlockSelected) -> None:
        self.selected.append(message.block.index)


def shown(widget: Widget) -> list[str]:
    """The widget's lines as drawn, inside its border, right-trimmed."""
    lines = [strip.text for strip in widget.render_lines(Region(0, 0, *widget.outer_size))]
    if widget.styles.border_top[0]:
        lines = [line[1:-1] for line in lines[1:-1]]
    return [line.rstrip() for line in lines]


def inspector(app: App) -> list[str]:
    return [line.strip() for line in shown(app.screen.query_one(BlockInspector))]


def legend(app: App) -> list[str]:
    return [line.strip() for line in shown(app.screen.query_one("#residency-legend"))]


def evicted_list(app: App) -> list[str]:
    options = app.screen.query_one("#evicted-ranges", OptionList)
    return [str(option.prompt) for option in options.options]


def view(app: App) -> ResidencyView:
    return app.screen.query_one(ResidencyView)


# ---------------------------------------------------------------------- cursor and inspector


async def test_the_cursor_starts_on_the_sink_block():
    app = ResidencyApp()
    async with app.run_test(size=SIZE):
        assert inspector(app) == [
            "Block #0 of 72",
            "tokens   0–15 (16)",
            "position 0–15",
            "segment  system",
            "class    sink",
            "flags    sink",
            "last use 0",
            "score    none",
            "why      inside the attention-sink",
            "tokens at the start of",
            "the tape",
        ]


async def test_right_moves_one_block_and_the_inspector_says_why_it_was_evicted():
    app = ResidencyApp()
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press(*["right"] * 10)
        assert inspector(app) == [
            "Block #10 of 72",
            "tokens   160–175 (16)",
            "position not resident",
            "segment  document",
            "class    evicted",
            "flags    none",
            "last use 0",
            "score    0.125",
            "why      over budget: lowest",
            "attention score",
        ]
        assert app.selected == list(range(1, 11))


async def test_down_moves_one_row_and_shows_the_shifted_position():
    app = ResidencyApp()
    async with app.run_test(size=SIZE) as pilot:
        assert view(app).cells_per_row == ROW
        await pilot.press("l", "down")  # block 1, then one row of 59 blocks further
        assert inspector(app)[:6] == [
            "Block #60 of 72",
            "tokens   960–963 (4)",
            # 240 evicted and 80 cold tokens before it are out of the cache
            "position 640–643 (shifted -320)",
            "segment  document",
            "class    hot",
            "flags    none",
        ]
        assert inspector(app)[-1] == "why      fits the token budget"


async def test_end_home_and_vi_keys():
    app = ResidencyApp()
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("end")
        assert view(app).cursor_index == 71
        assert inspector(app)[1:6] == [
            "tokens   1,116–1,123 (8)",
            "position 796–803 (shifted -320)",
            "segment  assistant",
            "class    recent",
            "flags    recent",
        ]
        await pilot.press("h", "h", "k")
        assert view(app).cursor_index == 69 - ROW
        await pilot.press("home")
        assert view(app).cursor_index == 0
        await pilot.press("left", "up")  # nothing before the first block
        assert view(app).cursor_index == 0


async def test_a_pinned_block_says_so():
    app = ResidencyApp()
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press(*["right"] * 50)
        assert inspector(app)[5] == "flags    pinned"
        assert inspector(app)[-1] == "why      pinned by the user"


async def test_clicking_a_cell_selects_its_block():
    app = ResidencyApp()
    async with app.run_test(size=SIZE) as pilot:
        # the view's border is one cell wide: content cell (12, 1) is block 59 + 12
        await pilot.click(ResidencyView, offset=(1 + 12, 1 + 1))
        assert view(app).cursor_index == ROW + 12
        assert app.selected == [ROW + 12]


# ---------------------------------------------------------------------- zoom


async def test_zoom_switches_between_one_cell_per_block_and_one_per_token():
    app = ResidencyApp()
    async with app.run_test(size=SIZE) as pilot:
        tape = view(app)
        assert (tape.zoom, tape.cell_count, tape.row_count) == (Zoom.BLOCK, 72, 2)
        assert tape.border_title == "Tape · 1 cell = 1 block"
        await pilot.press("z")
        assert (tape.zoom, tape.cell_count, tape.row_count) == (Zoom.TOKEN, 1124, 20)
        assert tape.border_title == "Tape · 1 cell = 1 token"
        await pilot.press("z")
        assert tape.zoom is Zoom.BLOCK
        await pilot.press("plus")
        assert tape.zoom is Zoom.TOKEN
        await pilot.press("minus")
        assert tape.zoom is Zoom.BLOCK


async def test_in_token_zoom_up_and_down_move_one_row_of_tokens_and_keep_the_column():
    app = ResidencyApp()
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("z", "right", "right", "right")  # block 3, tokens 48–63
        await pilot.press("down")  # token 48 + 59 = 107: block 6 (96–111)
        assert view(app).cursor_index == 6
        await pilot.press("down")  # token 166 stays in column 48, not 96 + 59: block 10
        assert view(app).cursor_index == 10
        await pilot.press("up", "up")
        assert view(app).cursor_index == 3


async def test_zoom_keeps_the_cursor_block_and_page_down_scrolls_to_it():
    app = ResidencyApp(BlockTable.from_segments(segments() * 8, 16))  # 8,992 tokens
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("end", "z")
        tape = view(app)
        assert tape.cursor_index == 575
        last_row = tape.row_count - 1
        assert tape.scroll_offset.y == last_row - tape.scrollable_content_region.height + 1
        await pilot.press("home", "pagedown")
        assert tape.scroll_offset.y == tape.scrollable_content_region.height  # a page
        assert tape.cursor_index == tape.table.block_at(ROW * tape.scrollable_content_region.height)


class RestyledApp(ResidencyApp):
    CSS = "ResidencyView > .residency-view--evicted { background: #ff0000; }"


async def test_the_app_stylesheet_can_recolour_a_class():
    app = RestyledApp()
    async with app.run_test(size=SIZE):
        sink, hot, cold = (CLASS_COLOURS[c][0] for c in (BlockClass.SINK, BlockClass.HOT, BlockClass.COLD))
        painted = [(segment.text, segment.style.bgcolor.triplet.hex) for segment in view(app).render_line(0)]
        assert painted[:-1] == [  # the last cell is the scrollbar's gutter
            ("◆", sink),  # block 0 under the cursor
            (" " * 9, hot),
            (" " * 10, "#ff0000"),  # blocks 10–19
            (" " * 10, hot),
            (" " * 5, "#ff0000"),  # blocks 30–34
            (" " * 5, hot),
            (" " * 5, cold),
            (" " * 14, hot),  # up to block 58, the end of the first row
        ]


# ---------------------------------------------------------------------- evicted ranges and legend


async def test_the_evicted_ranges_are_listed_with_their_sizes():
    app = ResidencyApp()
    async with app.run_test(size=SIZE):
        assert evicted_list(app) == ["160–319 (160 tokens)", "480–559 (80 tokens)"]
        title = app.screen.query_one("#evicted-ranges").border_title
        assert title == "Evicted ranges · 2 (240 tokens)"


async def test_choosing_an_evicted_range_puts_the_cursor_on_its_first_block():
    app = ResidencyApp()
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("tab", "down", "enter")  # the second range
        assert view(app).cursor_index == 30
        assert view(app).has_focus


async def test_the_legend_counts_tokens_per_class_and_says_where_they_come_from():
    app = ResidencyApp()
    async with app.run_test(size=SIZE):
        assert legend(app) == [
            "sink 16      recent 120      hot 668      cold 80      evicted 240",
            "1,124 tokens · resident 804 / budget 800 (over budget) · policy streaming · observed",
        ]


async def test_a_cache_the_runtime_manages_itself_is_modeled_here_as_on_the_cells_screen(tmp_path):
    # ov-prefix-cache: openvino-genai's scheduler owns the paged cache and evicts nothing
    # itself, so the map is modeled although no eviction is modeled from settings.
    from effctx_core.backends.profile_loader import load_profile
    from effctx_tui.app import EffctxApp
    from tests.helpers.pilot_wait import wait_for
    from tests.helpers.tiny_gguf import write_tiny_llama_gguf

    tiny = write_tiny_llama_gguf(tmp_path / "tiny.gguf", n_ctx_train=8192)
    app = EffctxApp(model=tiny, profile=load_profile("ov-prefix-cache"), max_tokens=1, checkpoints=None)
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: app.session_screen.ready, seconds=120)
        await pilot.press("ctrl+r")
        assert isinstance(app.screen, ResidencyScreen)
        assert legend(app)[1] == "0 tokens · resident 0 / budget 4,096 · policy none · modeled"


async def test_update_table_refreshes_legend_list_and_inspector_and_keeps_the_token():
    app = ResidencyApp()
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press(*["right"] * 61)  # block 61: tokens 964–979
        recut = BlockTable.from_segments(segments(), 32)
        recut.cls[20:23] = BlockClass.EVICTED  # tokens 640–735
        recut.renumber_positions()
        report = ResidencyReport.from_table(recut, "h2o", "modeled", None)
        selections = len(app.selected)
        app.screen.update_table(recut, report)
        await pilot.pause()
        assert len(app.selected) == selections  # a live update is not a user's selection
        assert legend(app) == [
            "sink 0      recent 0      hot 1,028      cold 0      evicted 96",
            "1,124 tokens · resident 1,028 · policy h2o · modeled",
        ]
        assert evicted_list(app) == ["640–735 (96 tokens)"]
        assert view(app).cursor_index == 31  # 964–995 holds token 964
        assert inspector(app)[:3] == ["Block #31 of 37", "tokens   964–995 (32)", "position 868–899 (shifted -96)"]


async def test_an_update_before_the_screen_is_shown_is_not_lost():
    screen = ResidencyScreen(planned_tape(), "streaming")
    fresh = BlockTable.from_segments(segments(), 16)
    screen.update_table(fresh, ResidencyReport.from_table(fresh, "none", OBSERVED, None))
    app = App()
    async with app.run_test(size=SIZE) as pilot:
        await app.push_screen(screen)
        await pilot.pause()
        assert legend(app)[1] == "1,124 tokens · resident 1,124 · policy none · observed"
        assert view(app).table is fresh


async def test_nothing_evicted_says_so():
    app = ResidencyApp(BlockTable.from_segments(segments(), 16))
    async with app.run_test(size=SIZE):
        assert evicted_list(app) == ["nothing evicted"]


async def test_escape_goes_back():
    app = ResidencyApp()
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("escape")
        assert not isinstance(app.screen, ResidencyScreen)


# ---------------------------------------------------------------------- the strip


def test_a_squeezed_cell_shows_the_most_telling_class_it_covers():
    # 1,124 tokens in 10 cells: 112 or 113 tokens a cell
    assert [BlockClass(c) for c in squeeze_classes(planned_tape(), 10)] == [
        BlockClass.SINK,  # 0–111: the 16 sink tokens win over 96 hot ones
        BlockClass.EVICTED,  # 112–223
        BlockClass.EVICTED,  # 224–336
        BlockClass.HOT,  # 337–448
        BlockClass.EVICTED,  # 449–561: 80 evicted among 113
        BlockClass.COLD,  # 562–673
        BlockClass.COLD,  # 674–786
        BlockClass.HOT,  # 787–898
        BlockClass.RECENT,  # 899–1010: the first recent tokens start at 1004
        BlockClass.RECENT,  # 1011–1123
    ]


def test_a_tape_shorter_than_the_strip_repeats_its_tokens():
    table = BlockTable.from_segments([(Segment.OTHER, 4)], 1)
    table.cls[:] = [BlockClass.SINK, BlockClass.HOT, BlockClass.COLD, BlockClass.EVICTED]
    assert [BlockClass(c).label for c in squeeze_classes(table, 8)] == [
        "sink", "sink", "hot", "hot", "cold", "cold", "evicted", "evicted",
    ]


class StripApp(App):
    CSS = "ResidencyStrip { width: 10; }"

    def compose(self) -> ComposeResult:
        yield ResidencyStrip(BlockTable.from_segments(segments(), 16))


async def test_the_strip_follows_set_table():
    app = StripApp()
    async with app.run_test(size=(40, 5)) as pilot:
        strip = app.query_one(ResidencyStrip)
        assert strip.cell_classes() == [BlockClass.HOT] * 10
        strip.set_table(planned_tape())
        await pilot.pause()
        # the cells as painted: runs of one background colour each
        painted = [(len(segment.text), segment.style.bgcolor.triplet.hex) for segment in strip.render_line(0)]
        assert painted == [
            (1, CLASS_COLOURS[BlockClass.SINK][0]),
            (2, CLASS_COLOURS[BlockClass.EVICTED][0]),
            (1, CLASS_COLOURS[BlockClass.HOT][0]),
            (1, CLASS_COLOURS[BlockClass.EVICTED][0]),
            (2, CLASS_COLOURS[BlockClass.COLD][0]),
            (1, CLASS_COLOURS[BlockClass.HOT][0]),
            (2, CLASS_COLOURS[BlockClass.RECENT][0]),
        ]


# ---------------------------------------------------------------------- snapshots


def test_snapshot_block_zoom_with_an_evicted_block_inspected(snap_compare):
    assert snap_compare(ResidencyApp(), press=["right"] * 12, terminal_size=SIZE)


def test_snapshot_token_zoom_with_a_shifted_user_block_inspected(snap_compare):
    assert snap_compare(ResidencyApp(), press=["right"] * 62 + ["z"], terminal_size=SIZE)


def test_snapshot_block_zoom_at_160x48(snap_compare):
    assert snap_compare(ResidencyApp(), press=["right"] * 12, terminal_size=(160, 48))


def test_the_legend_of_a_trace_that_did_not_record_the_map_source_says_so():
    table = BlockTable.from_segments([(Segment.USER, 40)], 32)
    report = ResidencyReport.from_table(table, UNKNOWN, UNKNOWN, 2048)
    assert legend_summary(report).plain == (
        "40 tokens · resident 40 / budget 2,048 · policy unknown · observed or modeled: not recorded")
