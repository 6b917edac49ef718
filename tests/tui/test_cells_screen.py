"""The cells screen on the real default model: listed cells and a live swap."""

from __future__ import annotations

import pytest
from textual.widgets import DataTable, Input, ProgressBar, Static

from effctx_tui.app import EffctxApp
from effctx_tui.screens.cells import CellsScreen
from tests.helpers.pilot_wait import session_when_ready, wait_for

pytestmark = pytest.mark.model


async def _cells_after_one_turn(pilot, app: EffctxApp) -> tuple[CellsScreen, tuple[int, ...]]:
    """One reply ("Hello"), then the cells screen with its cells described; the tape."""
    screen = app.session_screen
    await wait_for(pilot, lambda: screen.ready)
    await pilot.press(*"Hello", "enter")
    await wait_for(pilot, lambda: screen.turns_done == 1)
    tape = app.engine.tape
    await pilot.press("ctrl+o")
    cells = app.screen
    assert isinstance(cells, CellsScreen)
    await wait_for(pilot, lambda: len(cells.cells) > 0)
    return cells, tape


async def test_the_cells_screen_lists_cells_and_swaps_the_conversation(default_model):
    app = EffctxApp(max_tokens=2, checkpoints=None)
    async with app.run_test(size=(140, 30)) as pilot:
        screen = app.session_screen
        cells, tape = await _cells_after_one_turn(pilot, app)
        profiles = [c.profile for c in cells.cells]
        assert profiles == ["exact", "fast-long", "q8", "streaming", "ov-evict", "ov-exact", "ov-prefix-cache", "llama-server"]
        assert cells.query_one(DataTable).row_count == len(cells.cells)
        await _swap_to(pilot, cells, "q8")
        note = cells.query_one("#cells-note", Static)
        await wait_for(pilot, lambda: str(note.render()).startswith("now on q8: recomputed"))
        assert app.engine.tape == tape
        await pilot.press("escape")
        assert "q8" in screen.sub_title


async def test_escape_during_a_swap_recompute_cancels_it_and_stays_on_the_running_cell(default_model, gate):
    app = EffctxApp(max_tokens=1, checkpoints=None)
    async with session_when_ready(app, (140, 30)) as (pilot, screen):
        screen.query_one(Input).value = "The grass is green. " * 150  # a recompute of two chunks
        await pilot.press("enter")
        await wait_for(pilot, lambda: screen.turns_done == 1)
        tape, running = app.engine.tape, app.engine.profile.name
        await pilot.press("ctrl+o")
        cells = app.screen
        await wait_for(pilot, lambda: len(cells.cells) > 0)
        # The recompute waits after its first chunk, so Esc lands while it runs (after
        # the cells screen's subscriber, which shows the chunk).
        app.engine.subscribe(gate.at_event("prefill_chunk"))
        cells.query_one(DataTable).move_cursor(row=[c.profile for c in cells.cells].index("q8"))
        await pilot.press("enter", "enter")
        bar = cells.query_one("#swap-progress", ProgressBar)
        await wait_for(pilot, lambda: gate.reached.is_set() and bar.total == len(tape))
        await pilot.press("escape")
        assert cells.swapping
        gate.release()
        await wait_for(pilot, lambda: not cells.swapping)
        note = str(cells.query_one("#cells-note", Static).render())
        assert note.startswith("swap to q8 cancelled after recomputing ") and note.endswith(f"still on {running}")
        assert app.screen is cells and app.engine.profile.name == running
        assert app.engine.tape == tape and list(app.engine.session.tokens) == list(tape)


async def _swap_to(pilot, cells: CellsScreen, profile: str) -> None:
    """Select a cell, press Enter (it asks) and Enter again."""
    app = cells.app
    cells.query_one(DataTable).move_cursor(row=[c.profile for c in cells.cells].index(profile))
    await pilot.press("enter")
    assert str(cells.query_one("#cells-note", Static).render()).startswith(f"Swap the conversation to {profile}")
    await pilot.press("enter")
    await wait_for(pilot, lambda: app.engine.profile.name == profile and not cells.swapping, seconds=120)


async def test_a_conversation_swaps_llama_to_openvino_to_llama_with_its_tape(default_model):
    app = EffctxApp(max_tokens=2, checkpoints=None)
    async with app.run_test(size=(140, 30)) as pilot:
        screen = app.session_screen
        cells, tape = await _cells_after_one_turn(pilot, app)
        await _swap_to(pilot, cells, "ov-exact")
        note = cells.query_one("#cells-note", Static)
        assert str(note.render()).startswith(f"now on ov-exact: recomputed {len(tape)} tokens")
        assert (app.engine.info.backend, app.engine.tape) == ("openvino", tape)
        await pilot.press("escape")
        await pilot.press(*" Again", "enter")
        await wait_for(pilot, lambda: screen.turns_done == 2)
        assert screen.last_result.reused == len(tape)
        longer = app.engine.tape
        await pilot.press("ctrl+o")
        cells = app.screen
        await wait_for(pilot, lambda: len(cells.cells) > 0)
        await _swap_to(pilot, cells, "exact")
        assert (app.engine.info.backend, app.engine.tape) == ("llama", longer)


async def test_a_cell_that_must_convert_first_says_what_it_costs_and_waits_for_a_second_enter(tmp_path, monkeypatch):
    from tests.helpers.tiny_gguf import write_tiny_llama_gguf

    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))  # nothing converted yet
    # trained for 8192 tokens: the built-in profiles hold 4096
    tiny = write_tiny_llama_gguf(tmp_path / "tiny.gguf", n_ctx_train=8192)
    app = EffctxApp(model=tiny, max_tokens=2, checkpoints=None)
    async with app.run_test(size=(140, 30)) as pilot:
        cells, tape = await _cells_after_one_turn(pilot, app)
        cell = next(c for c in cells.cells if c.profile == "ov-exact")
        assert cell.preparation is not None and cell.preparation.startswith("converts the GGUF to OpenVINO IR first")
        cells.query_one(DataTable).move_cursor(row=cells.cells.index(cell))
        await pilot.press("enter")
        note = cells.query_one("#cells-note", Static)
        assert str(note.render()).startswith("Swap the conversation to ov-exact (the first use converts the GGUF")
        assert app.engine.profile.name == "exact" and not cells.swapping  # nothing started yet
        await pilot.press("enter")
        await wait_for(pilot, lambda: app.engine.profile.name == "ov-exact" and not cells.swapping)
        assert app.engine.tape == tape and (tmp_path / "data" / "effctx" / "openvino").is_dir()


def _certificate_here(default_model, profile_name: str) -> dict:
    """A certificate of the example figures that counts here for `profile_name`."""
    from effctx_core.backends.profile_loader import load_profile
    from effctx_core.backends.registry import get_backend
    from effctx_core.certify.certificate import example_document
    from effctx_core.certify.hardware import this_machine
    from effctx_core.certify.runner import profile_digest

    profile = load_profile(profile_name)
    info = get_backend(profile.backend).describe(default_model, profile)
    doc = example_document()
    doc["hardware"] = this_machine().to_dict()
    doc["cell"].update(profile=profile_name, profile_digest=profile_digest(profile), backend_version=info.backend_version)
    doc["cell"]["model"]["sha256"] = info.identity.model_sha256
    return doc


async def test_the_cells_screen_shows_each_cells_standing_and_its_verdict(default_model, tmp_path, monkeypatch):
    from effctx_core.certify.store import CertificateStore

    CertificateStore(tmp_path).save(_certificate_here(default_model, "exact"))
    monkeypatch.setenv("EFFCTX_CERTIFICATES", str(tmp_path))
    app = EffctxApp(max_tokens=1, checkpoints=None)
    async with app.run_test(size=(160, 40)) as pilot:
        cells, _tape = await _cells_after_one_turn(pilot, app)
        standing = {r.cell.profile: r.advertised for r in cells.rows}
        assert standing["exact"] == "certified up to 1,024 tokens"
        assert {standing[p] for p in ("fast-long", "q8", "streaming", "ov-exact")} == {"uncertified"}
        assert {p: v.verdict for p, v in cells.verdicts.items() if p in ("exact", "q8")} == {
            "exact": "baseline", "q8": "no verdict"}
        table = cells.query_one(DataTable)
        assert [str(v) for v in table.get_row_at(0)[2:4]] == ["certified up to 1,024 tokens", "baseline"]
        table.move_cursor(row=1)
        table.move_cursor(row=0)
        await pilot.pause()
        detail = str(cells.query_one("#cells-detail", Static).render())
        assert "certified up to 1,024 tokens: every gate passed up to 1024 tokens" in detail
        assert "verdict: baseline" in detail


async def _cells_opened(pilot, app: EffctxApp) -> CellsScreen:
    """The cells screen, opened before any turn, with its cells described."""
    await wait_for(pilot, lambda: app.session_screen.ready)
    await pilot.press("ctrl+o")
    cells = app.screen
    assert isinstance(cells, CellsScreen)
    await wait_for(pilot, lambda: len(cells.cells) > 0)
    await pilot.pause()
    return cells


def _note(cells: CellsScreen) -> str:
    return str(cells.query_one("#cells-note", Static).render())


async def test_the_cursor_opens_on_the_running_cell_and_enter_there_swaps_nothing(default_model):
    from effctx_core.backends.profile_loader import load_profile

    app = EffctxApp(profile=load_profile("q8"), max_tokens=1, checkpoints=None)
    async with app.run_test(size=(100, 30)) as pilot:
        cells = await _cells_opened(pilot, app)
        assert cells.cells[cells.query_one(DataTable).cursor_row].profile == "q8"
        await pilot.press("enter")
        assert [n.message for n in app._notifications][-1] == "That is the running cell."
        assert app.engine.profile.name == "q8" and not cells.swapping


async def test_enter_on_another_cell_asks_and_moving_the_cursor_forgets_the_question(default_model):
    app = EffctxApp(max_tokens=1, checkpoints=None)
    async with app.run_test(size=(100, 30)) as pilot:
        cells = await _cells_opened(pilot, app)
        profiles = [c.profile for c in cells.cells]
        table = cells.query_one(DataTable)
        table.move_cursor(row=profiles.index("q8"))
        await pilot.press("enter")
        assert _note(cells) == "Swap the conversation to q8? Enter again to go ahead, or pick another cell."
        await pilot.press("down", "up", "enter")  # away and back: it asks again
        assert _note(cells) == "Swap the conversation to q8? Enter again to go ahead, or pick another cell."
        assert app.engine.profile.name == "exact" and not cells.swapping


async def test_home_and_end_go_to_the_first_and_last_cell(default_model):
    app = EffctxApp(max_tokens=1, checkpoints=None)
    async with app.run_test(size=(100, 30)) as pilot:
        cells = await _cells_opened(pilot, app)
        table = cells.query_one(DataTable)
        await pilot.press("end")
        assert table.cursor_row == len(cells.cells) - 1
        await pilot.press("home")
        assert table.cursor_row == 0


async def test_at_100x30_every_cell_its_certification_and_its_verdict_are_on_screen(default_model):
    app = EffctxApp(max_tokens=1, checkpoints=None)
    async with app.run_test(size=(100, 30)) as pilot:
        cells = await _cells_opened(pilot, app)
        table = cells.query_one(DataTable)
        assert table.max_scroll_y == 0 and table.scrollable_content_region.height >= 1 + len(cells.cells)
        shown = [column.label.plain for column in table.columns.values()]
        widths = [column.get_render_width(table) for column in table.columns.values()]
        assert shown[2:4] == ["certification", "verdict"] and sum(widths[:4]) <= table.scrollable_content_region.width
        detail = str(cells.query_one("#cells-detail", Static).render()).splitlines()
        row = cells.rows[table.cursor_row]
        assert detail[1] == f"{row.advertised}: {row.note}"
        assert detail[2].startswith(("verdict: ", "no keep/drop verdicts: "))
        assert cells.query_one("#cells-detail-box").scrollable_content_region.height >= 3


async def test_at_100x30_the_other_settings_scroll_into_view_and_the_detail_scrolls(default_model):
    app = EffctxApp(max_tokens=1, checkpoints=None)
    async with app.run_test(size=(100, 30)) as pilot:
        cells = await _cells_opened(pilot, app)
        table = cells.query_one(DataTable)
        await pilot.press(*["right"] * 40)
        await pilot.pause(0.5)  # the table scrolls with an animation
        assert 0 < table.max_scroll_x == table.scroll_x
        box = cells.query_one("#cells-detail-box")
        await pilot.press("tab", "down")
        await pilot.pause(0.5)
        assert box.has_focus and box.max_scroll_y > 0 and box.scroll_y == 1


async def test_the_residency_map_of_a_runtime_managed_cache_is_modeled_on_the_cells_screen(default_model):
    app = EffctxApp(max_tokens=1, checkpoints=None)
    async with app.run_test(size=(160, 48)) as pilot:
        cells = await _cells_opened(pilot, app)
        assert {c.profile: c.residency for c in cells.cells} == {
            "exact": "observed", "fast-long": "observed", "q8": "observed", "streaming": "observed",
            "ov-evict": "modeled", "ov-exact": "observed", "ov-prefix-cache": "modeled", "llama-server": "modeled"}
        cells.query_one(DataTable).move_cursor(row=[c.profile for c in cells.cells].index("ov-prefix-cache"))
        await pilot.pause()
        detail = str(cells.query_one("#cells-detail", Static).render())
        assert ("residency map: modeled (openvino-genai's scheduler owns the paged cache and reports its usage, "
                "not which blocks it kept)") in detail


@pytest.mark.parametrize("size", [(100, 30), (160, 48)], ids=["100x30", "160x48"])
def test_snapshot_of_the_cells_screen_at(snap_compare, default_model, size, tmp_path, monkeypatch):
    from tests.tui.test_visual_baselines import cells_described

    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))  # only the built-in cells
    app = EffctxApp(max_tokens=1, checkpoints=None, theme="effctx-dark")
    assert snap_compare(app, terminal_size=size, run_before=cells_described)
