"""The snapshot tree: tapes, branches, deletes, diffs, lookups and session files."""

from __future__ import annotations

import json
import shutil
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from effctx_core import models
from effctx_core.errors import EffctxError
from effctx_core.snapshots import tree as tree_mod
from effctx_core.snapshots.tree import (
    SessionFileError,
    SessionNameError,
    SnapshotTree,
    SnapshotTreeError,
    TurnText,
)
from effctx_core.snapshots.tree_file import (
    encode_tree,
    list_sessions,
    load_tree,
    read_tree_file,
    save_tree,
    write_tree_file,
)

D = "digest"


def chain() -> tuple[SnapshotTree, list[str]]:
    """root [1,2] -> a [3] -> b [4,5]"""
    t = SnapshotTree(clock=lambda: 100.0)
    root = t.add(None, [1, 2], "prefix", D, label="system")
    a = t.add(root.id, [3], "turn", D)
    b = t.add(a.id, [4, 5], "turn", D)
    return t, [root.id, a.id, b.id]


# ---------------------------------------------------------------------- building


def test_tapes_accumulate_own_tokens_down_the_chain():
    t, (r, a, b) = chain()
    assert (t.tape(r), t.tape(a), t.tape(b)) == ((1, 2), (1, 2, 3), (1, 2, 3, 4, 5))


def test_node_stores_only_its_own_tokens():
    t, (r, a, b) = chain()
    assert t[b].own_tokens == (4, 5)
    assert t[b].parent == a
    assert t.tape_length(b) == 5


def test_add_records_every_field():
    t = SnapshotTree()
    n = t.add(
        None, [7], "prefix", "abc", label="L", residency={"n_tokens": 1}, metrics={"ttft_ms": 2.5},
        blob="1" * 64, turn=TurnText("hello", " hi"), created=42.0,
    )
    assert (n.id, n.parent, n.label, n.created, n.kind, n.identity_digest) == ("n0", None, "L", 42.0, "prefix", "abc")
    assert (n.residency, n.metrics, n.blob, n.turn) == ({"n_tokens": 1}, {"ttft_ms": 2.5}, "1" * 64, TurnText("hello", " hi"))


def test_add_makes_the_new_node_current():
    t, (r, a, b) = chain()
    assert t.current == b


def test_add_without_make_current_leaves_current():
    t, (r, a, b) = chain()
    t.add(r, [9], "manual", D, make_current=False)
    assert t.current == b


def test_empty_tree_has_no_root_and_no_current():
    t = SnapshotTree()
    assert (len(t), t.root, t.current) == (0, None, None)


def test_second_root_is_refused():
    t, _ = chain()
    with pytest.raises(SnapshotTreeError, match="already has a root"):
        t.add(None, [1], "prefix", D)


def test_unknown_parent_is_refused():
    t, _ = chain()
    with pytest.raises(SnapshotTreeError, match="no node 'n99'"):
        t.add("n99", [1], "turn", D)


def test_tree_errors_are_effctx_errors():
    assert issubclass(SnapshotTreeError, EffctxError)
    assert issubclass(SessionFileError, EffctxError)
    assert issubclass(SessionNameError, EffctxError)


def test_tokens_out_of_int32_range_are_refused():
    t = SnapshotTree()
    with pytest.raises(SnapshotTreeError, match="out of range"):
        t.add(None, [2**31], "prefix", D)


def test_float_tokens_are_refused():
    t = SnapshotTree()
    with pytest.raises(SnapshotTreeError, match="integers"):
        t.add(None, [1.5], "prefix", D)


def test_metrics_are_stored_as_their_json_round_trip():
    t = SnapshotTree()
    n = t.add(None, [], "prefix", D, metrics={"range": (1, 2), 3: "x"})
    assert n.metrics == {"range": [1, 2], "3": "x"}


def test_unserializable_metrics_are_refused_at_add():
    t = SnapshotTree()
    with pytest.raises(SnapshotTreeError, match="metrics is not JSON-serializable"):
        t.add(None, [], "prefix", D, metrics={"x": object()})


def test_branch_is_a_second_child_of_an_earlier_node():
    t, (r, a, b) = chain()
    c = t.add(a, [6], "turn", D)
    assert [n.id for n in t.children(a)] == [b, c.id]
    assert t.tape(c.id) == (1, 2, 3, 6)
    assert t.tape(b) == (1, 2, 3, 4, 5)


def test_path_runs_from_root_to_node():
    t, (r, a, b) = chain()
    assert [n.id for n in t.path(b)] == [r, a, b]


def test_iteration_puts_parents_before_children():
    t, (r, a, b) = chain()
    c = t.add(r, [8], "turn", D)
    assert [n.id for n in t] == [r, a, b, c.id]


def test_add_tape_computes_own_tokens():
    t, (r, a, b) = chain()
    n = t.add_tape(a, [1, 2, 3, 7, 8], "turn", D, label="x")
    assert (n.own_tokens, n.label, t.tape(n.id)) == ((7, 8), "x", (1, 2, 3, 7, 8))


def test_add_tape_refuses_a_tape_that_diverges_from_the_parent():
    t, (r, a, b) = chain()
    with pytest.raises(SnapshotTreeError, match=r"node n1: they differ at token 2 \(9 != 3\)"):
        t.add_tape(a, [1, 2, 9, 4], "turn", D)


def test_add_tape_refuses_a_tape_shorter_than_the_parent():
    t, (r, a, b) = chain()
    with pytest.raises(SnapshotTreeError, match=r"shorter \(2 < 3 tokens\)"):
        t.add_tape(a, [1, 2], "turn", D)


def test_add_tape_without_parent_makes_the_root():
    t = SnapshotTree()
    n = t.add_tape(None, [5, 6], "prefix", D)
    assert (n.parent, n.own_tokens) == (None, (5, 6))


def test_shared_prefix_is_the_parents_tape_length():
    t, (r, a, b) = chain()
    assert (t.shared_prefix(r), t.shared_prefix(a), t.shared_prefix(b)) == (0, 2, 3)


def test_tapes_stay_right_beyond_the_tape_cache():
    t = SnapshotTree()
    ids = [t.add(None, [0], "prefix", D).id]
    for i in range(1, 3 * tree_mod.TAPE_CACHE_SIZE):
        ids.append(t.add(ids[-1], [i, i], "turn", D).id)
    for i in reversed(range(len(ids))):
        assert t.tape(ids[i]) == (0,) + tuple(x for j in range(1, i + 1) for x in (j, j))


def test_rename_changes_only_the_label():
    t, (r, a, b) = chain()
    before = t[a]
    after = t.rename(a, "question 1")
    assert after.label == "question 1"
    assert after == type(before)(**{**before.__dict__, "label": "question 1"})
    assert t[a] == after


def test_set_current_moves_the_pointer():
    t, (r, a, b) = chain()
    t.set_current(a)
    assert t.current == a


def test_set_current_to_unknown_node_is_refused():
    t, _ = chain()
    with pytest.raises(SnapshotTreeError):
        t.set_current("n42")


# ---------------------------------------------------------------------- delete


def test_delete_subtree_returns_node_then_descendants():
    t, (r, a, b) = chain()
    c = t.add(a, [6], "turn", D).id
    d = t.add(c, [7], "turn", D).id
    assert t.delete_subtree(a) == [a, b, c, d]
    assert [n.id for n in t] == [r]
    assert t.children(r) == []


def test_delete_subtree_moves_current_to_the_parent_when_inside():
    t, (r, a, b) = chain()
    t.delete_subtree(a)
    assert t.current == r


def test_delete_subtree_keeps_current_when_outside():
    t, (r, a, b) = chain()
    c = t.add(r, [6], "turn", D).id
    t.delete_subtree(a)
    assert t.current == c


def test_delete_root_is_refused():
    t, (r, a, b) = chain()
    with pytest.raises(SnapshotTreeError, match="root .* cannot be deleted"):
        t.delete_subtree(r)
    assert len(t) == 3


def test_deleted_ids_are_not_reused():
    t, (r, a, b) = chain()
    t.delete_subtree(b)
    assert t.add(a, [4], "turn", D).id == "n3"


def test_deleted_node_is_gone():
    t, (r, a, b) = chain()
    t.delete_subtree(b)
    assert b not in t
    with pytest.raises(SnapshotTreeError):
        t.tape(b)


# ---------------------------------------------------------------------- diff


def test_diff_of_siblings_finds_tokens_shared_past_the_ancestor():
    t, (r, a, b) = chain()  # b: 1 2 3 4 5
    c = t.add(a, [4, 9, 10], "turn", D).id  # 1 2 3 4 9 10
    d = t.diff(b, c)
    assert (d.ancestor, d.common_prefix, d.divergence, d.token_a, d.token_b) == (a, 4, 4, 5, 9)
    assert (d.tail_a, d.tail_b) == ((5,), (9, 10))
    assert not d.identical


def test_diff_of_placeholder_tapes_parts_where_the_tree_branches():
    t, (r, a, b) = chain()  # b: 1 2 3 4 5
    c = t.add(a, [4, 9, 10], "turn", D).id  # 1 2 3 4 9 10
    d = t.diff(b, c, by_tokens=False)
    assert (d.ancestor, d.common_prefix, d.divergence, d.tail_a, d.tail_b) == (a, 3, 3, (4, 5), (4, 9, 10))


def test_the_turns_below_an_ancestor_are_what_was_said_after_it():
    t = SnapshotTree()
    r = t.add(None, [], "root", D).id
    n1 = t.add(r, [1], "turn", D, turn=TurnText("What is the capital of France?", " Paris.")).id
    n2 = t.add(n1, [2], "turn", D, turn=TurnText("And of Italy?", " Rome.")).id
    assert t.turns(n2, after=n1) == [TurnText("And of Italy?", " Rome.")]
    assert t.turns(n2, after=n2) == []
    assert [turn.input for turn in t.turns(n2)] == ["What is the capital of France?", "And of Italy?"]


def test_diff_with_an_ancestor_diverges_where_the_ancestor_ends():
    t, (r, a, b) = chain()
    d = t.diff(a, b)
    assert (d.ancestor, d.common_prefix, d.divergence, d.token_a, d.token_b) == (a, 3, 3, None, 4)
    assert (d.tail_a, d.tail_b) == ((), (4, 5))


def test_diff_of_equal_tapes_has_no_divergence():
    t, (r, a, b) = chain()
    e = t.add(a, [], "manual", D).id
    d = t.diff(a, e)
    assert (d.common_prefix, d.divergence, d.token_a, d.token_b, d.tail_a, d.tail_b) == (3, None, None, None, (), ())
    assert d.identical


def test_common_ancestor_of_two_branches():
    t, (r, a, b) = chain()
    c = t.add(a, [6], "turn", D).id
    x = t.add(r, [7], "turn", D).id
    assert (t.common_ancestor(b, c).id, t.common_ancestor(b, x).id, t.common_ancestor(a, b).id) == (a, r, a)


# ---------------------------------------------------------------------- find_by_tape


def test_find_by_tape_returns_the_deepest_prefix_node():
    t, (r, a, b) = chain()
    assert t.find_by_tape([1, 2, 3, 4, 5, 6]).id == b


def test_find_by_tape_stops_before_a_partly_matching_node():
    t, (r, a, b) = chain()
    assert t.find_by_tape([1, 2, 3, 4, 7]).id == a


def test_find_by_tape_follows_the_matching_branch():
    t, (r, a, b) = chain()
    c = t.add(a, [6], "turn", D).id
    assert t.find_by_tape([1, 2, 3, 6, 0]).id == c


def test_find_by_tape_returns_none_when_the_root_does_not_match():
    t, _ = chain()
    assert t.find_by_tape([2, 1, 3]) is None


def test_find_by_tape_prefers_the_later_of_equal_siblings():
    t, (r, a, b) = chain()
    c = t.add(a, [4, 5], "turn", D).id
    assert t.find_by_tape([1, 2, 3, 4, 5]).id == c


def test_find_by_tape_with_blob_skips_nodes_without_state():
    t, (r, a, b) = chain()
    t.set_blob(a, "ka")
    assert t.find_by_tape([1, 2, 3, 4, 5], with_blob=True).id == a


# ---------------------------------------------------------------------- blobs


def test_blobs_are_the_keys_of_live_nodes():
    t = SnapshotTree()
    r = t.add(None, [1], "prefix", D, blob="0" * 64).id
    a = t.add(r, [2], "turn", D, blob="1" * 64).id
    t.add(a, [3], "turn", D, blob="2" * 64)
    t.add(r, [4], "turn", D, blob="1" * 64)
    t.add(r, [5], "turn", D)
    assert t.blobs() == {"0" * 64, "1" * 64, "2" * 64}


def test_blobs_after_delete_keep_keys_still_referenced_elsewhere():
    t = SnapshotTree()
    r = t.add(None, [1], "prefix", D, blob="0" * 64).id
    a = t.add(r, [2], "turn", D, blob="1" * 64).id
    t.add(a, [3], "turn", D, blob="2" * 64)
    t.add(r, [4], "turn", D, blob="1" * 64)
    t.delete_subtree(a)
    assert t.blobs() == {"0" * 64, "1" * 64}


def test_set_blob_attaches_and_drops_state():
    t, (r, a, b) = chain()
    t.set_blob(b, "kb")
    assert t.blobs() == {"kb"}
    t.set_blob(b, None)
    assert t.blobs() == set()


# ---------------------------------------------------------------------- files


@pytest.fixture
def data_home(tmp_path, monkeypatch) -> Path:
    monkeypatch.setattr(models, "data_dir", lambda: tmp_path)
    return tmp_path


def rich_tree() -> SnapshotTree:
    t, (r, a, b) = chain()
    c = t.add(
        a, [2**31 - 1, 0, 262143], "turn", "other-digest", label="branch",
        residency={"policy": "streaming", "source": "observed", "n_tokens": 8, "sink_tokens": 0, "recent_tokens": 4,
                   "hot_tokens": 0, "cold_tokens": 0, "evicted_tokens": 4, "resident_tokens": 4, "budget": 4,
                   "over_budget": False, "evicted_ranges": [[0, 4]], "cold_ranges": []},
        metrics={"ttft_ms": 12.5, "reused": 3, "decode_tps": float("inf")}, blob="c" * 64,
        turn=TurnText("Summarise:\n\ndef f():\n    return 1\n", " It returns 1.\nThat is all."),
    ).id
    t.add(r, [], "manual", D)
    t.delete_subtree(b)
    t.set_current(c)
    return t


def test_save_writes_under_data_dir_sessions(data_home):
    path = save_tree(rich_tree(), "my-session")
    assert path == data_home / "sessions" / "my-session.json"
    assert json.loads(path.read_text())["version"] == 2


def test_a_turn_keeps_the_line_breaks_of_its_input_and_reply_through_a_file(data_home):
    save_tree(rich_tree(), "s1")
    u = load_tree("s1")
    assert u.turns(u.current) == [TurnText("Summarise:\n\ndef f():\n    return 1\n", " It returns 1.\nThat is all.")]


# A session saved before turns kept their input and reply apart: a one-line input, the
# reply after the first line break (which may hold more of them).
VERSION_1_FILE = r"""{
 "format": "effctx-session", "version": 1, "tokens": "int32le-base64", "current": "n2", "next_id": 3,
 "nodes": [
  {"id": "n0", "parent": null, "label": "start", "created": 100.0, "kind": "root", "identity": "d",
   "tokens": "", "residency": null, "metrics": null, "blob": null, "text": null},
  {"id": "n1", "parent": "n0", "label": "What is 2+2?", "created": 101.0, "kind": "turn", "identity": "d",
   "tokens": "AQAAAA==", "residency": null, "metrics": {"reused": 0}, "blob": null,
   "text": "What is 2+2?\n Four.\nUser: and 3+3?"},
  {"id": "n2", "parent": "n1", "label": "And 3+3?", "created": 102.0, "kind": "turn", "identity": "d",
   "tokens": "AgAAAA==", "residency": null, "metrics": null, "blob": null, "text": "And 3+3?\n"}
 ]
}
"""


def test_a_version_1_session_reads_as_it_did(data_home):
    (data_home / "sessions").mkdir()
    (data_home / "sessions" / "old.json").write_text(VERSION_1_FILE)
    tree = load_tree("old")
    assert [(n.id, n.label, n.turn) for n in tree] == [
        ("n0", "start", None),
        ("n1", "What is 2+2?", TurnText("What is 2+2?", " Four.\nUser: and 3+3?")),
        ("n2", "And 3+3?", TurnText("And 3+3?", "")),
    ]
    assert tree.turns("n2") == [TurnText("What is 2+2?", " Four.\nUser: and 3+3?"), TurnText("And 3+3?", "")]
    save_tree(tree, "old")  # written again in the current version, it reads the same
    assert json.loads((data_home / "sessions" / "old.json").read_text())["version"] == 2
    assert list(load_tree("old")) == list(tree)


def test_a_session_of_a_newer_version_is_refused_and_left_where_it_is(data_home):
    doc = good_doc()
    doc["version"] = 3
    path = data_home / "sessions" / "future.json"
    path.parent.mkdir()
    path.write_text(json.dumps(doc))
    with pytest.raises(SessionFileError, match=r"version 3 is newer than this effctx reads \(2\)$"):
        load_tree("future")
    assert path.exists() and not (data_home / "sessions" / "quarantine").exists()


@pytest.mark.parametrize(("said", "label"), [
    ("What is the capital of France?", "What is the capital of France?"),
    ("Summarise this:\nThe grass is green.", "Summarise this:…"),
    ("\n\n  indented first line  \n", "indented first line"),
    ("x" * 41, "x" * 40 + "…"),
    (" \n ", "turn"),
])
def test_a_turn_is_labelled_by_its_first_line(said, label):
    assert TurnText(said, "").label == label


def test_save_load_round_trip(data_home):
    t = rich_tree()
    save_tree(t, "s1")
    u = load_tree("s1")
    assert list(u) == list(t)
    assert (u.current, u.next_id, u.name) == (t.current, t.next_id, "s1")
    assert [u.tape(n.id) for n in u] == [t.tape(n.id) for n in t]


def test_loaded_tree_keeps_growing_with_fresh_ids(data_home):
    t = rich_tree()
    save_tree(t, "s1")
    u = load_tree("s1")
    assert u.add(u.current, [1], "turn", D).id == f"n{t.next_id}"


def test_empty_tree_round_trip(data_home):
    save_tree(SnapshotTree(), "empty")
    u = load_tree("empty")
    assert (len(u), u.current, u.root) == (0, None, None)


def test_list_sessions_is_sorted_and_skips_other_files(data_home):
    save_tree(rich_tree(), "b")
    save_tree(rich_tree(), "a")
    (data_home / "sessions" / "notes.txt").write_text("x")
    (data_home / "sessions" / ".a.json.123.tmp").write_text("x")
    assert list_sessions() == ["a", "b"]


def test_list_sessions_without_directory_is_empty(data_home):
    assert list_sessions() == []


def test_export_import_round_trip(tmp_path):
    t = rich_tree()
    write_tree_file(t, tmp_path / "out" / "tree.json")
    u = read_tree_file(tmp_path / "out" / "tree.json")
    assert (list(u), u.current, u.blobs()) == (list(t), t.current, {"c" * 64})


@pytest.mark.parametrize("name", ["", "../x", "a/b", "a\\b", ".hidden", "x" * 65, "a b", "é"])
def test_invalid_session_names_are_refused(data_home, name):
    with pytest.raises(SessionNameError, match="invalid session name"):
        save_tree(SnapshotTree(), name)


def test_load_missing_session_names_it(data_home):
    with pytest.raises(SessionFileError, match="no saved session 'nope'"):
        load_tree("nope")


def good_doc() -> dict:
    return json.loads(encode_tree(rich_tree()))


def _corrupt(doc: dict, change) -> bytes:
    change(doc)
    return json.dumps(doc).encode()


CORRUPT = {
    "invalid json": (b"{not json", "invalid JSON"),
    "not utf-8": (b"\xff\xfe", "not UTF-8"),
    "foreign json": (b'{"hello": 1}', "not an effctx session file"),
    "json list": (b"[1, 2]", "not an effctx session file"),
    "too new": (lambda d: d.update(version=3), "version 3 is newer than this effctx reads (2)"),
    "bad version": (lambda d: d.update(version="1"), "bad format version '1'"),
    "bad token encoding": (lambda d: d.update(tokens="text"), "unknown token encoding"),
    "bad base64": (lambda d: d["nodes"][0].update(tokens="!!!"), "bad token data"),
    "ragged tokens": (lambda d: d["nodes"][0].update(tokens="AQID"), "whole number of int32"),
    "missing field": (lambda d: d["nodes"][1].pop("kind"), "node 1 has no 'kind'"),
    "wrong type": (lambda d: d["nodes"][1].update(created="yesterday"), "node 1 'created' has the wrong type"),
    "turn without its input": (lambda d: d["nodes"][2]["turn"].pop("input"), "node 2 turn has no 'input'"),
    "turn as text": (lambda d: d["nodes"][2].update(turn="hi\nthere"), "node 2 'turn' has the wrong type"),
    "orphan": (lambda d: d["nodes"][1].update(parent="n77"), "comes before its parent 'n77'"),
    "duplicate id": (lambda d: d["nodes"][2].update(id=d["nodes"][1]["id"]), "duplicate node id"),
    "two roots": (lambda d: d["nodes"][1].update(parent=None), "second root"),
    "dangling current": (lambda d: d.update(current="n99"), "current node 'n99' does not exist"),
}


@pytest.mark.parametrize("case", list(CORRUPT))
def test_corrupt_session_file_raises_one_line_error_naming_file(tmp_path, case):
    content, message = CORRUPT[case]
    data = content if isinstance(content, bytes) else _corrupt(good_doc(), content)
    path = tmp_path / "bad.json"
    path.write_bytes(data)
    with pytest.raises(SessionFileError) as err:
        read_tree_file(path)
    text = str(err.value)
    assert message in text
    assert text.startswith(f"{path}: ")
    assert "\n" not in text


def test_unreadable_session_file_raises_session_file_error(tmp_path):
    with pytest.raises(SessionFileError, match="session file is a directory, not a file"):
        read_tree_file(tmp_path)  # a directory


# ---------------------------------------------------------------------- random sequences

TOKENS = st.lists(st.integers(0, 5), max_size=4)  # tiny alphabet: siblings often share tokens
BLOBS = st.sampled_from([None, None, "0" * 64, "1" * 64, "2" * 64, "3" * 64, "4" * 64])  # keys shared across nodes


class TreeMachine(RuleBasedStateMachine):
    """A model (parent map, tapes, blobs, current) next to the real tree."""

    def __init__(self):
        super().__init__()
        self.dir = Path(tempfile.mkdtemp(prefix="effctx-tree-"))
        self.tree = SnapshotTree()
        self.parent: dict[str, str | None] = {}
        self.tapes: dict[str, tuple[int, ...]] = {}
        self.blob: dict[str, str | None] = {}
        self.labels: dict[str, str] = {}
        self.current: str | None = None

    def teardown(self):
        shutil.rmtree(self.dir, ignore_errors=True)

    def _record(self, node, parent, tape, blob):
        self.parent[node.id] = parent
        self.tapes[node.id] = tape
        self.blob[node.id] = blob
        self.labels[node.id] = node.label
        self.current = node.id

    @initialize(tokens=TOKENS, blob=BLOBS)
    def make_root(self, tokens, blob):
        node = self.tree.add(None, tokens, "prefix", D, blob=blob)
        self._record(node, None, tuple(tokens), blob)

    @rule(tokens=TOKENS, blob=BLOBS)
    def add_turn(self, tokens, blob):
        node = self.tree.add(self.current, tokens, "turn", D, blob=blob)
        self._record(node, self.current, self.tapes[self.current] + tuple(tokens), blob)

    @rule(data=st.data(), fanout=st.integers(1, 3), whole_tape=st.booleans())
    def branch(self, data, fanout, whole_tape):
        # Several children at once, so that deletes often cut wide subtrees.
        at = data.draw(st.sampled_from(sorted(self.tapes)))
        for _ in range(fanout):
            tokens, blob = data.draw(TOKENS), data.draw(BLOBS)
            tape = self.tapes[at] + tuple(tokens)
            if whole_tape:
                node = self.tree.add_tape(at, tape, "turn", D, blob=blob)
            else:
                node = self.tree.add(at, tokens, "turn", D, blob=blob)
            self._record(node, at, tape, blob)

    @rule(data=st.data())
    def restore(self, data):
        at = data.draw(st.sampled_from(sorted(self.tapes)))
        self.tree.set_current(at)
        self.current = at
        assert self.tree.tape(self.tree.current) == self.tapes[at]

    @precondition(lambda self: len(self.tapes) > 1)
    @rule(data=st.data())
    def delete(self, data):
        candidates = sorted(k for k, p in self.parent.items() if p is not None)
        inner = [k for k in candidates if k in self.parent.values()]
        if inner and data.draw(st.booleans()):  # leaves alone would be most of the picks
            candidates = inner
        at = data.draw(st.sampled_from(candidates))
        doomed = {at}
        grew = True
        while grew:
            more = {k for k, p in self.parent.items() if p in doomed} - doomed
            grew = bool(more)
            doomed |= more
        removed = self.tree.delete_subtree(at)
        assert removed[0] == at and set(removed) == doomed and len(removed) == len(doomed)
        if self.current in doomed:
            self.current = self.parent[at]
        for k in doomed:
            del self.parent[k], self.tapes[k], self.blob[k], self.labels[k]

    @rule()
    def delete_root_fails(self):
        root = next(k for k, p in self.parent.items() if p is None)
        with pytest.raises(SnapshotTreeError):
            self.tree.delete_subtree(root)

    @rule(data=st.data(), label=st.text(max_size=5))
    def rename(self, data, label):
        at = data.draw(st.sampled_from(sorted(self.tapes)))
        self.tree.rename(at, label)
        self.labels[at] = label

    @rule(via_export=st.booleans())
    def save_load(self, via_export):
        before = list(self.tree)
        if via_export:
            write_tree_file(self.tree, self.dir / "x.json")
            self.tree = read_tree_file(self.dir / "x.json")
        else:
            save_tree(self.tree, "machine", directory=self.dir)
            self.tree = load_tree("machine", directory=self.dir)
        assert list(self.tree) == before

    @rule(data=st.data(), extra=TOKENS, with_blob=st.booleans())
    def find(self, data, extra, with_blob):
        at = data.draw(st.sampled_from(sorted(self.tapes)))
        query = self.tapes[at] + tuple(extra)
        found = self.tree.find_by_tape(query, with_blob=with_blob)
        fits = [k for k, tp in self.tapes.items() if query[: len(tp)] == tp and (self.blob[k] or not with_blob)]
        if not fits:
            assert found is None
        else:
            assert found is not None and found.id in fits
            assert len(self.tapes[found.id]) == max(len(self.tapes[k]) for k in fits)

    @rule(data=st.data())
    def diff(self, data):
        a = data.draw(st.sampled_from(sorted(self.tapes)))
        b = data.draw(st.sampled_from(sorted(self.tapes)))
        ta, tb = self.tapes[a], self.tapes[b]
        n = 0
        while n < min(len(ta), len(tb)) and ta[n] == tb[n]:
            n += 1
        d = self.tree.diff(a, b)
        assert (d.common_prefix, d.tail_a, d.tail_b) == (n, ta[n:], tb[n:])
        assert d.divergence == (None if ta == tb else n)

    @invariant()
    def tapes_extend_their_parents(self):
        for node in self.tree:
            base = () if node.parent is None else self.tree.tape(node.parent)
            assert self.tree.tape(node.id) == base + node.own_tokens

    @invariant()
    def tree_matches_model(self):
        assert {n.id: n.parent for n in self.tree} == self.parent
        assert {n.id: self.tree.tape(n.id) for n in self.tree} == self.tapes
        assert {n.id: n.label for n in self.tree} == self.labels

    @invariant()
    def current_matches_model(self):
        assert self.tree.current == self.current
        assert self.tree.tape(self.tree.current) == self.tapes[self.current]

    @invariant()
    def blobs_are_exactly_the_live_keys(self):
        assert self.tree.blobs() == {b for b in self.blob.values() if b is not None}


TreeMachine.TestCase.settings = settings(
    max_examples=80, stateful_step_count=50, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
test_tree_state_machine = TreeMachine.TestCase
