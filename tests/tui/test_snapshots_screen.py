"""The snapshots screen (ctrl+t), driven with Pilot: on the real default model for restore,
branch, rename, delete and diff, and on a hand-made tree (snapshot_fixtures) for what
must not depend on timings: the diff of known tapes, and the SVG baseline.

The real conversation: "Hello" (11 tokens, reply " Hello" ending on the next turn's
opening "\\nUser:", which the tape keeps) then "What is two plus two?" (24 tokens, reply
" Two plus two\\n"), each reply 4 tokens at most.
"""

from __future__ import annotations

import pytest
from textual.command import CommandList
from textual.widgets import Footer, Input
from textual.widgets._footer import FooterKey

from effctx_core.snapshots import SnapshotStore
from effctx_tui.app import EffctxApp
from effctx_tui.screens.snapshot_dialogs import ConfirmDialog, RenameDialog
from effctx_tui.screens.snapshot_diff import DiffScreen
from effctx_tui.screens.snapshots import SnapshotsScreen
from effctx_tui.widgets.snapshot_tree import SnapshotTreeView, state_size
from effctx_tui.widgets.status_line import StatusLine
from effctx_tui.widgets.transcript import Transcript
from tests.helpers.pilot_wait import wait_for
from tests.helpers.snapshot_fixtures import SnapshotsApp

HELLO, TWO_PLUS_TWO, JOKE = "Hello", "What is two plus two?", "Tell me a joke"



def tree_lines(screen: SnapshotsScreen) -> list[str]:
    """The tree as drawn, two spaces of indent per level."""
    out: list[str] = []

    def walk(node, depth: int) -> None:
        out.append("  " * depth + node.label.plain)
        for child in node.children:
            walk(child, depth + 1)

    walk(screen.query_one(SnapshotTreeView).root, 0)
    return out


def transcript_lines(app: EffctxApp) -> list[str]:
    return [str(w.render()) for w in app.session_screen.query_one(Transcript).children]


def status_bar(screen: SnapshotsScreen) -> str:
    return str(screen.query_one("#snapshots-status").render())


def notifications(app) -> list[str]:
    return [n.message for n in app._notifications]  # Textual keeps no public list


def footer(app) -> list[str]:
    """The screen's own keys the footer offers (not the app's, nor the palette)."""
    return [key.description for key in app.screen.query_one(Footer).query(FooterKey)
            if key.description not in ("Help", "Theme", "palette")]


def state(app: EffctxApp, node_id: str) -> str:
    return state_size(app.engine.tree.node(node_id))


@pytest.fixture
def make_app(tmp_path):
    # A store of its own, so restores are exact and nothing lands in the user's cache.
    return lambda: EffctxApp(max_tokens=4, checkpoints=SnapshotStore(tmp_path / "store"))


async def say(pilot, app: EffctxApp, text: str) -> None:
    done = app.session_screen.turns_done
    await pilot.press(*text, "enter")
    await wait_for(pilot, lambda: app.session_screen.turns_done == done + 1)


async def two_turns(pilot, app: EffctxApp) -> None:
    await wait_for(pilot, lambda: app.session_screen.ready)
    await say(pilot, app, HELLO)
    await say(pilot, app, TWO_PLUS_TWO)


async def open_snapshots(pilot, app: EffctxApp) -> SnapshotsScreen:
    await pilot.press("ctrl+t")
    assert isinstance(app.screen, SnapshotsScreen)
    return app.screen


async def restore(pilot, screen: SnapshotsScreen, key: str = "enter") -> None:
    await pilot.press(key)
    await wait_for(pilot, lambda: screen.restoring is None)


# ---------------------------------------------------------------------- real model


async def test_two_turns_are_the_root_and_two_nodes_with_the_current_one_marked(default_model, make_app):
    app = make_app()
    async with app.run_test(size=(120, 30)) as pilot:
        await two_turns(pilot, app)
        screen = await open_snapshots(pilot, app)
        assert tree_lines(screen) == [
            "start  root · 0 tokens · no state",
            # each reply ends on the next turn's opening ("\nUser:"), which its node keeps
            f"  {HELLO}  turn · 11 tokens · {state(app, 'n1')} · 0 shared",
            f"    ● {TWO_PLUS_TWO}  turn · 24 tokens · {state(app, 'n2')} · 11 shared",
        ]
        assert state(app, "n2").endswith(" KiB")
        assert screen.selected == "n2"  # the cursor starts at the current node
        assert status_bar(screen) == f"3 nodes · at n2 '{TWO_PLUS_TWO}'"
        await pilot.press("escape")
        assert app.screen is app.session_screen


async def test_restoring_the_first_node_is_exact_and_the_session_follows_it(default_model, make_app):
    app = make_app()
    async with app.run_test(size=(120, 30)) as pilot:
        await two_turns(pilot, app)
        screen = await open_snapshots(pilot, app)
        await pilot.press("up")
        await restore(pilot, screen)
        done = screen.restores["n1"]
        assert (done.mode, done.tokens, done.recomputed) == ("exact", 11, 0)
        assert tree_lines(screen)[1].startswith(f"  ● {HELLO}  turn · 11 tokens · {state(app, 'n1')} · 0 shared · exact in ")
        assert tree_lines(screen)[2] == f"    {TWO_PLUS_TWO}  turn · 24 tokens · {state(app, 'n2')} · 11 shared"
        assert status_bar(screen).startswith(f"3 nodes · at n1 '{HELLO}'  │  restored n1: exact in ")
        # the session screen, still underneath, shows the conversation as it was at n1
        await wait_for(pilot, lambda: len(transcript_lines(app)) == 2)
        assert transcript_lines(app) == [HELLO, "Hello"]
        status = str(app.session_screen.query_one(StatusLine).render())
        assert status.startswith(f"resident 11 / 4096 · available 4085  │  at '{HELLO}': exact in ")
        assert status.endswith("; the next turn branches from here")
        await pilot.press("escape")
        assert app.screen is app.session_screen


async def test_without_saved_states_a_restore_recomputes_what_the_cache_lacks(default_model):
    app = EffctxApp(max_tokens=4, checkpoints=None)
    async with app.run_test(size=(120, 30)) as pilot:
        await two_turns(pilot, app)
        screen = await open_snapshots(pilot, app)
        await pilot.press("up")
        await restore(pilot, screen)
        # n1's tokens were still in the cache: it was only cut back
        assert tree_lines(screen)[1].startswith(f"  ● {HELLO}  turn · 11 tokens · no state · 0 shared · recompute 0 tokens in ")
        await pilot.press("down")
        await restore(pilot, screen)
        assert tree_lines(screen)[2].startswith(
            f"    ● {TWO_PLUS_TWO}  turn · 24 tokens · no state · 11 shared · recompute 13 tokens in "
        )
        assert screen.restores["n2"].reason == "the node has no saved state"
        await wait_for(pilot, lambda: len(transcript_lines(app)) == 4)  # the session screen has its own queue
        assert transcript_lines(app) == [HELLO, "Hello", TWO_PLUS_TWO, "Two plus two\n"]


async def test_a_branch_adds_a_second_child_and_the_siblings_diff_after_their_turn_header(default_model, make_app):
    app = make_app()
    async with app.run_test(size=(120, 30)) as pilot:
        await two_turns(pilot, app)
        screen = await open_snapshots(pilot, app)
        await pilot.press("up")
        await restore(pilot, screen, "b")
        await wait_for(pilot, lambda: app.screen is app.session_screen)
        assert app.session_screen.focused is app.session_screen.query_one(Input)
        await say(pilot, app, JOKE)
        tree = app.engine.tree
        assert [n.label for n in tree.children("n1")] == [TWO_PLUS_TWO, JOKE]
        screen = await open_snapshots(pilot, app)
        assert tree_lines(screen)[2:] == [
            f"    {TWO_PLUS_TWO}  turn · 24 tokens · {state(app, 'n2')} · 11 shared",
            f"    ● {JOKE}  turn · 22 tokens · {state(app, 'n3')} · 11 shared",
        ]
        await pilot.press("m", "up", "D")  # mark n3, compare it with n2
        await wait_for(pilot, lambda: isinstance(app.screen, DiffScreen))
        report = app.screen.report
        # n1's 11 tokens, the last 3 the opening of a user turn
        assert report.summary().startswith("common prefix 11 tokens · first divergent token 11 (n3: id ")
        assert (report.diff.a, report.diff.b) == ("n3", "n2")
        assert report.text_a == " Tell me a joke\nAssistant: I'm a"
        assert report.text_b == " What is two plus two?\nAssistant: Two plus two\n"
        await pilot.press("escape")
        assert app.screen is screen


async def test_rename_and_delete_change_the_tree_and_the_root_stays(default_model, make_app):
    app = make_app()
    async with app.run_test(size=(120, 30)) as pilot:
        await two_turns(pilot, app)
        screen = await open_snapshots(pilot, app)
        await pilot.press("r")
        assert isinstance(app.screen, RenameDialog)
        assert app.screen.query_one(Input).value == TWO_PLUS_TWO
        await pilot.press("ctrl+u", *"arithmetic", "enter")
        assert app.screen is screen
        assert app.engine.tree.node("n2").label == "arithmetic"
        assert tree_lines(screen)[2].startswith("    ● arithmetic  turn · 24 tokens")

        await pilot.press("up", "up", "d")  # the root
        assert app.screen is screen
        assert notifications(app)[-1] == "The root cannot be deleted; delete its children instead."

        await pilot.press("down", "d", "n")  # n1, and then no
        assert len(app.engine.tree) == 3
        await pilot.press("d")
        assert isinstance(app.screen, ConfirmDialog)
        await pilot.press("y")
        assert len(app.engine.tree) == 1
        assert tree_lines(screen) == ["● start  root · 0 tokens · no state"]
        assert screen.selected == "n0"
        assert status_bar(screen) == "1 node · at n0 'start'  │  deleted 2 nodes"


async def test_a_turn_that_ends_while_the_screen_is_open_appears_in_it(default_model, make_app):
    app = make_app()
    async with app.run_test(size=(120, 30)) as pilot:
        session = app.session_screen
        await wait_for(pilot, lambda: session.ready)
        await say(pilot, app, HELLO)
        screen = await open_snapshots(pilot, app)
        session.busy = True  # as the prompt's submit does
        await pilot.press("enter")
        assert screen.restoring is None and "n1" not in screen.restores
        assert notifications(app)[-1] == "A reply is still running; restore when it is done."
        session.run_turn(TWO_PLUS_TWO)
        await wait_for(pilot, lambda: len(tree_lines(screen)) == 3)
        assert tree_lines(screen)[2] == f"    ● {TWO_PLUS_TWO}  turn · 24 tokens · {state(app, 'n2')} · 11 shared"
        assert status_bar(screen) == f"3 nodes · at n2 '{TWO_PLUS_TWO}'"


# ---------------------------------------------------------------------- hand-made tree


async def test_without_an_engine_the_screen_shows_and_compares_but_does_not_restore():
    app = SnapshotsApp()
    async with app.run_test(size=(120, 30)) as pilot:
        screen = app.screen_under_test
        assert screen.selected == "n3"
        # nothing to restore into, nothing marked: restore, branch and diff are not offered
        assert footer(app) == ["Rename", "Delete", "Mark", "Back"]
        await pilot.press("enter", "b")
        assert screen.restoring is None and notifications(app) == []
        await pilot.press("up", "m")  # mark n2
        assert footer(app) == ["Rename", "Delete", "Mark", "Diff with mark", "Back"]
        await pilot.press("down", "down", "x")  # compare n2 with n4
        await wait_for(pilot, lambda: isinstance(app.screen, DiffScreen))
        report = app.screen.report
        assert report.summary() == "common prefix 11 tokens · first divergent token 11 (n2: id 30, n4: id 50)"
        assert report.text_a == "".join(f"<{t}>" for t in range(30, 43))
        assert report.text_b == "".join(f"<{t}>" for t in [*range(50, 61), *range(70, 78)])


async def test_the_keys_are_also_commands_in_the_palette():
    app = SnapshotsApp()
    async with app.run_test(size=(120, 30)) as pilot:
        await pilot.press("ctrl+p", *"rename snapshot")
        # the palette searches in the background: wait for its first hit
        await wait_for(pilot, lambda: bool(app.screen.query(CommandList)) and app.screen.query_one(CommandList).option_count > 0, 5)
        assert str(app.screen.query_one(CommandList).get_option_at_index(0).prompt).startswith("Rename snapshot")
        await pilot.press("enter")
        await wait_for(pilot, lambda: isinstance(app.screen, RenameDialog), seconds=5)
        await pilot.press("ctrl+u", *"a knock-knock joke", "enter")
        assert app.snapshot_tree.node("n3").label == "a knock-knock joke"



def test_snapshot_a_branched_tree_with_restores_and_a_marked_node(snap_compare, utc):
    # n1 marked, the cursor back on n3: current, restored by recompute, no state.
    assert snap_compare(SnapshotsApp(), press=["up", "up", "m", "down", "down"], terminal_size=(120, 30))
