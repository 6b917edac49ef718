"""The endpoint's conversations read from a snapshot tree's node metrics and named by
their first node's label, and what each node's tape shares with a prompt."""

from __future__ import annotations

from effctx_core.snapshots.conversations import conversation_label, conversations, with_ancestors
from effctx_core.snapshots.tree import SnapshotTree, TurnText
from effctx_core.snapshots.tree_file import load_tree, save_tree

DIGEST = "0" * 64


def tree_of_two_conversations() -> SnapshotTree:
    tree = SnapshotTree()
    root = tree.add(None, (), "root", DIGEST, created=0.0)
    # labelled as the endpoint labels a request's node (api/serving.py)
    a1 = tree.add(root.id, (1, 2), "turn", DIGEST, "c1 · user: Plan Rome", metrics={"conversation": "c1"},
                  turn=TurnText("Plan Rome", "ok"), created=1.0)
    tree.add(root.id, (7, 8), "turn", DIGEST, "c2 · user: Fix the loop", metrics={"conversation": "c2"},
             turn=TurnText("Fix the loop", "ok"), created=2.0)
    tree.add(a1.id, (3,), "turn", DIGEST, "c1 · user: And Paris", metrics={"conversation": "c1"},
             turn=TurnText("And Paris", "ok"), created=3.0)
    tree.add(root.id, (9,), "manual", DIGEST, "mark", created=4.0)  # a console node: no conversation
    return tree


def test_conversations_are_named_by_their_first_request_and_hold_their_nodes_in_order():
    found = conversations(tree_of_two_conversations())
    assert [(c.id, c.name, c.nodes) for c in found] == [("c1", "user: Plan Rome", ("n1", "n3")),
                                                        ("c2", "user: Fix the loop", ("n2",))]


def test_renaming_a_conversations_first_node_renames_the_conversation():
    tree = tree_of_two_conversations()
    tree.rename("n1", conversation_label("c1", "Rome trip"))
    tree.rename("n3", "c1 · not the first node")
    assert [c.name for c in conversations(tree)] == ["Rome trip", "user: Fix the loop"]
    assert tree.node("n1").label == "c1 · Rome trip"


def test_a_conversations_name_is_kept_with_the_saved_tree(tmp_path):
    tree = tree_of_two_conversations()
    tree.rename("n1", conversation_label("c1", "Rome trip"))
    save_tree(tree, "trips", tmp_path)
    assert [c.name for c in conversations(load_tree("trips", tmp_path))] == ["Rome trip", "user: Fix the loop"]


def test_a_first_node_renamed_without_its_conversation_names_it_whole():
    tree = tree_of_two_conversations()
    tree.rename("n2", "bug hunt")
    tree.rename("n1", "c2 · another conversation's")
    assert [c.name for c in conversations(tree)] == ["c2 · another conversation's", "bug hunt"]


def test_a_conversation_is_drawn_with_the_nodes_above_it():
    tree = tree_of_two_conversations()
    assert with_ancestors(tree, ("n3",)) == {"n0", "n1", "n3"}


def test_a_tree_without_requests_has_no_conversations():
    tree = SnapshotTree()
    tree.add(None, (), "root", DIGEST)
    assert conversations(tree) == []


def test_shared_with_gives_every_node_the_start_its_tape_shares_with_the_tokens():
    tree = tree_of_two_conversations()  # tapes: n0 (), n1 (1, 2), n2 (7, 8), n3 (1, 2, 3), n4 (9,)
    assert tree.shared_with((1, 2, 4, 5)) == {"n0": 0, "n1": 2, "n2": 0, "n3": 2, "n4": 0}
    assert tree.shared_with((1, 2, 3)) == {"n0": 0, "n1": 2, "n2": 0, "n3": 3, "n4": 0}
    assert tree.shared_with((1,)) == {"n0": 0, "n1": 1, "n2": 0, "n3": 1, "n4": 0}
