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
from textual.widgets import Footer, Input, Label
from textual.widgets._footer import FooterKey

from effctx_core.snapshots import CorruptSnapshotError, SnapshotStore
from effctx_core.snapshots.tree import SnapshotTree
from effctx_tui.app import EffctxApp
from effctx_tui.screens.snapshot_dialogs import ConfirmDialog, RenameDialog
from effctx_tui.screens.snapshot_diff import SHARED_CONTEXT, DiffScreen, describe_diff
from effctx_tui.screens.snapshots import SnapshotsScreen
from effctx_tui.widgets.snapshot_details import SnapshotDetails, node_details
from effctx_tui.widgets.snapshot_tree import SnapshotTreeView, state_size
from effctx_tui.widgets.status_line import StatusLine
from effctx_tui.widgets.transcript import Transcript
from tests.helpers.pilot_wait import wait_for
from tests.helpers.snapshot_fixtures import IDENTITY, T0, SnapshotsApp, fake_detokenize, fixed_tree

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
        assert status_bar(screen).startswith(f"3 nodes · at n1 '{HELLO}'\nrestored n1: exact in ")
        # the session screen, still underneath, shows the conversation as it was at n1
        await wait_for(pilot, lambda: len(transcript_lines(app)) == 2)
        assert transcript_lines(app) == [HELLO, "Hello"]
        status = str(app.session_screen.query_one(StatusLine).render())
        assert status.startswith(f"resident 11 / 4,096 · available 4,085  │  at '{HELLO}': exact in ")
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
        assert tree_lines(screen)[1].startswith(f"  ● {HELLO}  turn · 11 tokens · no state · 0 shared · cut back to its 11 tokens in ")
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
        assert report.summary() == "n3 and n2 share 11 tokens, then part: n3 has 11 more, n2 13 more"
        assert (report.diff.a, report.diff.b) == ("n3", "n2")
        assert report.shared_text == app.engine.detokenize(app.engine.tree.tape("n1"))
        assert report.shared_text.endswith("\nUser:")
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
        assert str(app.screen.query_one(Label).render()) == (
            f"Delete n1 '{HELLO}' and its 1 descendant? Their saved states leave the store when the session is "
            "saved, unless another session or the prefix cache keeps them.")
        await pilot.press("y")
        assert len(app.engine.tree) == 1
        assert tree_lines(screen) == ["● start  root · 0 tokens · no state"]
        assert screen.selected == "n0"
        assert status_bar(screen) == "1 node · at n0 'start'\ndeleted 2 nodes"


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
        assert app.screen.report.diff.common_prefix == 11


def two_conversations() -> SnapshotTree:
    """The endpoint's requests as their nodes are labelled (api/serving.py): c1 two, c2 one."""
    tree = SnapshotTree()
    root = tree.add(None, (), "root", IDENTITY, label="start", created=T0)
    first = tree.add(root.id, (1, 2), "turn", IDENTITY, label="c1 · user: Plan Rome", metrics={"conversation": "c1"},
                     created=T0 + 1)
    tree.add(root.id, (7,), "turn", IDENTITY, label="c2 · user: Fix the loop", metrics={"conversation": "c2"},
             created=T0 + 2)
    tree.add(first.id, (3,), "turn", IDENTITY, label="c1 · user: And Paris?", metrics={"conversation": "c1"},
             created=T0 + 3)
    return tree


async def test_n_names_the_conversation_shown_by_renaming_its_first_node():
    app = SnapshotsApp(two_conversations())
    async with app.run_test(size=(120, 30)) as pilot:
        screen = app.screen_under_test
        await pilot.press("n")  # the whole tree is shown: no conversation to name
        assert app.screen is screen
        assert footer(app) == ["Rename", "Delete", "Mark", "Conversation", "Back"]
        await pilot.press("v")
        assert footer(app) == ["Rename", "Delete", "Mark", "Conversation", "Name conversation", "Back"]
        await pilot.press("n")
        assert isinstance(app.screen, RenameDialog)
        assert str(app.screen.query_one(Label).render()) == \
            "New name for conversation c1 (Enter saves, Escape cancels)"
        assert app.screen.query_one(Input).value == "user: Plan Rome"
        await pilot.press("ctrl+u", *"Rome trip", "enter")
        assert app.screen is screen
        assert app.snapshot_tree.node("n1").label == "c1 · Rome trip"
        assert tree_lines(screen)[1] == "  c1 · Rome trip  turn · 2 tokens · no state · 0 shared"
        assert status_bar(screen) == \
            "4 nodes · conversation c1 'Rome trip': 2 requests · at n3 'c1 · user: And Paris?'\nnamed conversation c1"


async def test_escape_or_an_empty_name_keeps_the_conversations_name():
    app = SnapshotsApp(two_conversations())
    async with app.run_test(size=(120, 30)) as pilot:
        await pilot.press("v", "v", "n", "ctrl+u", *"Bug hunt", "escape")  # c2
        await pilot.press("n", "ctrl+u", "enter")
        assert app.snapshot_tree.node("n2").label == "c2 · user: Fix the loop"
        assert status_bar(app.screen_under_test).startswith("4 nodes · conversation c2 'user: Fix the loop': 1 request")


async def test_renaming_a_conversations_first_node_renames_the_conversation_shown():
    app = SnapshotsApp(two_conversations())
    async with app.run_test(size=(120, 30)) as pilot:
        screen = app.screen_under_test
        await pilot.press("v")
        screen.query_one(SnapshotTreeView).select_id("n1")
        await pilot.press("r")
        app.screen.query_one(Input).value = "c1 · Rome trip"  # typed: the middle dot is no key
        await pilot.press("enter")
        assert screen.conversation is not None and screen.conversation.name == "Rome trip"
        assert status_bar(screen).startswith("4 nodes · conversation c1 'Rome trip': 2 requests")


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



def diff_text(screen: DiffScreen) -> dict[str, str]:
    return {part: str(screen.query_one(f"#diff-{part}").render()) for part in ("summary", "shared", "text-a", "text-b")}


async def open_diff(pilot, app: SnapshotsApp) -> DiffScreen:
    await pilot.press("up", "m", "down", "down", "D")  # mark n2, compare it with n4
    await wait_for(pilot, lambda: isinstance(app.screen, DiffScreen))
    assert isinstance(app.screen, DiffScreen)
    return app.screen


async def test_the_diff_says_in_text_where_two_nodes_part():
    app = SnapshotsApp()
    async with app.run_test(size=(100, 30)) as pilot:
        screen = await open_diff(pilot, app)
        # n2 and n4 share n1's 8 tokens and the turn header 20 21 22
        assert diff_text(screen) == {
            "summary": "n2 and n4 share 11 tokens, then part: n2 has 13 more, n4 19 more",
            "shared": "the shared tape ends: <1><2><3><4><5><6><7><8><20><21><22>",
            "text-a": "".join(f"<{t}>" for t in range(30, 43)),
            "text-b": "".join(f"<{t}>" for t in [*range(50, 61), *range(70, 78)]),
        }
        assert screen.query_one("#diff-tail-a").border_title == "n2 · 13 tokens after · What is two plus two?"


async def test_t_shows_the_diff_as_token_ids_and_t_again_as_text():
    app = SnapshotsApp()
    async with app.run_test(size=(100, 30)) as pilot:
        screen = await open_diff(pilot, app)
        text = diff_text(screen)
        await pilot.press("t")
        assert diff_text(screen) == {
            "summary": text["summary"],
            "shared": "the shared tape ends: 1 2 3 4 5 6 7 8 20 21 22",
            "text-a": " ".join(str(t) for t in range(30, 43)),
            "text-b": " ".join(str(t) for t in [*range(50, 61), *range(70, 78)]),
        }
        await pilot.press("t")
        assert diff_text(screen) == text


def test_a_diff_of_a_node_and_its_descendant_says_which_goes_on():
    tree = fixed_tree()
    report = describe_diff(tree, "n3", "n4", fake_detokenize)
    assert report.summary() == "n4 goes on where n3 ends: n3's 22 tokens, then 8 more"
    assert (report.text_a, report.text_b) == ("", "".join(f"<{t}>" for t in range(70, 78)))
    assert report.shared_tail == tree.tape("n3")  # all of it: 22 tokens


def test_a_diff_with_the_empty_root_says_what_the_other_holds():
    tree = fixed_tree()
    assert describe_diff(tree, "n1", "n0", fake_detokenize).summary() == "n1 holds 8 tokens, n0 none"


def test_a_diff_shows_only_the_end_of_a_long_shared_tape():
    tree = SnapshotTree()
    root = tree.add(None, (), "root", IDENTITY)
    common = tree.add(root.id, range(1, 41), "turn", IDENTITY)
    a = tree.add(common.id, (100,), "turn", IDENTITY)
    b = tree.add(common.id, (200,), "turn", IDENTITY)
    report = describe_diff(tree, a.id, b.id, fake_detokenize)
    assert SHARED_CONTEXT == 24
    assert report.shared_tail == tuple(range(17, 41))


def test_a_node_shows_its_turn_figures_in_units_and_only_those_measured():
    tree = fixed_tree()
    assert node_details(tree, "n1", None).plain.splitlines()[1:3] == [
        "tape 8 tokens: 0 shared with n0, 8 own · state 180.7 KiB · blob 5655251542",
        "reused 0 · prefilled 7 · generated 4 · TTFT 53 ms · prefill 180 tok/s · decode 77.1 tok/s",
    ]
    # a turn cancelled in its prefill: nothing generated, no token to time, no time taken
    cancelled = tree.add("n1", (9,), "turn", IDENTITY, metrics={
        "reused": 1_200, "prefilled": 1, "generated": 0, "ttft_ms": None, "prefill_tps": 0.0, "decode_tps": 0.0})
    assert node_details(tree, cancelled.id, None).plain.splitlines()[1:3] == [
        "tape 9 tokens: 8 shared with n1, 1 own · no saved state (a restore recomputes it)",
        "reused 1,200 · prefilled 1 · generated 0",
    ]
    # a replayed request: the trace gave its conversation and no figures, so none are shown
    replayed = tree.add("n1", (10,), "turn", IDENTITY, metrics={"conversation": "c1"})
    assert node_details(tree, replayed.id, None).plain.splitlines()[1:] == [
        "tape 9 tokens: 8 shared with n1, 1 own · no saved state (a restore recomputes it)",
    ]


LONG = "What is two plus two, and how would you explain the answer to a child of five?"


async def test_at_100_columns_a_long_label_is_shortened_and_every_row_keeps_its_facts():
    app = SnapshotsApp()
    app.snapshot_tree.rename("n2", LONG)
    async with app.run_test(size=(100, 30)) as pilot:
        await pilot.pause()
        screen = app.screen_under_test
        view = screen.query_one(SnapshotTreeView)
        room = view.scrollable_content_region.width
        assert room == 98  # 100 columns less the tree's border
        lines = tree_lines(screen)
        assert lines[2] == "    What is two plus two, and how would you explain t…  turn · 24 tokens · 433.02 KiB · 8 shared"
        for line in view._tree_lines:  # as Textual lays them out: guides, icon, label
            width = line._get_guide_width(view.guide_depth, view.show_root) + view.get_label_width(line.node)
            assert width <= room
        await pilot.resize_terminal(160, 48)
        await pilot.pause()
        assert tree_lines(screen)[2] == f"    {LONG}  turn · 24 tokens · 433.02 KiB · 8 shared"


@pytest.mark.parametrize("size", [(100, 30), (160, 48)], ids=["100x30", "160x48"])
def test_snapshot_a_branched_tree_with_restores_and_a_marked_node(snap_compare, utc, size):
    # n1 marked, the cursor back on n3: current, restored by recompute, no state; n2's
    # label longer than a 100-column row.
    async def long_label(pilot) -> None:
        pilot.app.snapshot_tree.rename("n2", LONG)
        pilot.app.screen_under_test.refresh_tree()
        await pilot.pause()

    assert snap_compare(SnapshotsApp(), press=["up", "up", "m", "down", "down"], terminal_size=size,
                        run_before=long_label)


@pytest.mark.parametrize("size", [(100, 30), (160, 48)], ids=["100x30", "160x48"])
def test_snapshot_the_diff_of_two_siblings(snap_compare, utc, size):
    assert snap_compare(SnapshotsApp(), press=["up", "m", "down", "down", "D"], terminal_size=size,
                        run_before=lambda pilot: pilot.pause(0.3))


# ---------------------------------------------------------------------- what the store holds

DIGEST = "ab" * 32  # a runtime identity digest


def damage(store: SnapshotStore, key: str) -> None:
    """Flip bytes in the middle of a blob, as a bad disk would."""
    path = store.blob_path(key)
    raw = bytearray(path.read_bytes())
    raw[len(raw) // 2:len(raw) // 2 + 8] = bytes(8)
    path.write_bytes(bytes(raw))


async def test_the_tree_shows_a_state_present_evicted_or_quarantined_as_the_store_holds_it(tmp_path):
    store = SnapshotStore(tmp_path / "store")
    tree = SnapshotTree()
    root = tree.add(None, (), "root", DIGEST, label="start")
    keys = {}
    for label, tokens in (("evicted", range(1, 9)), ("kept", range(1, 13)), ("damaged", range(1, 17))):
        keys[label] = store.put(DIGEST, list(tokens), bytes(range(256)) * 8).key
        tree.add(root.id, tokens, "turn", DIGEST, label=label, blob=keys[label], metrics={"bytes": 2048})
    size = store.info(keys["kept"]).bytes
    # a store that holds three entries: one more evicts the least recently used, "evicted"
    SnapshotStore(tmp_path / "store", budget_bytes=3 * size + size // 2).put(DIGEST, [99], bytes(range(256)) * 8)
    damage(store, keys["damaged"])
    with pytest.raises(CorruptSnapshotError):
        store.get(keys["damaged"], DIGEST)  # the read that finds it damaged sets it aside
    app = SnapshotsApp(tree, missing_states=store.missing_states)
    async with app.run_test(size=(100, 30)) as pilot:
        screen = app.screen_under_test
        await wait_for(pilot, lambda: bool(screen.missing))
        assert tree_lines(screen)[1:] == [
            "  evicted  turn · 8 tokens · state evicted (store limit) · 0 shared",
            "  kept  turn · 12 tokens · 2 KiB · 0 shared",
            "  ● damaged  turn · 16 tokens · state quarantined · 0 shared",  # the last added is current
        ]
        assert screen.selected == "n3"
        details = str(screen.query_one(SnapshotDetails).render())
        assert details.splitlines()[1] == (
            f"tape 16 tokens: 0 shared with n0, 16 own · saved state quarantined (a restore recomputes it) "
            f"· blob {keys['damaged'][:10]}")


async def test_a_restore_that_finds_its_state_damaged_recomputes_and_the_tree_says_quarantined(default_model, tmp_path):
    store = SnapshotStore(tmp_path / "store")
    app = EffctxApp(max_tokens=4, checkpoints=store)
    async with app.run_test(size=(100, 30)) as pilot:
        await two_turns(pilot, app)
        screen = await open_snapshots(pilot, app)
        await wait_for(pilot, lambda: tree_lines(screen)[1].endswith(" KiB · 0 shared"))
        damage(store, app.engine.tree.node("n1").blob)
        await pilot.press("up")
        await restore(pilot, screen)
        assert screen.restores["n1"].mode == "recompute"
        assert screen.restores["n1"].reason.startswith("its saved state is unusable")
        await wait_for(pilot, lambda: "quarantined" in tree_lines(screen)[1])
        assert tree_lines(screen)[1].startswith(f"  ● {HELLO}  turn · 11 tokens · state quarantined · 0 shared · cut back to its 11 tokens in ")
