"""Saved sessions: the engine's tree on disk, the store keeping what it references, and a
long random walk of turns, branches, restores and deletes on the real default model."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule, run_state_machine_as_test

from effctx_core.backends.profile_loader import load_profile
from effctx_core.contract import DecodeConfig
from effctx_core.engine import SessionEngine, session_owner
from effctx_core.models import prepare_default_model
from effctx_core.snapshots import SnapshotStore

EFFCTX = str(Path(sys.executable).with_name("effctx"))
PROFILE = load_profile("exact").with_changes(n_ctx=1024)
ONE_TOKEN = DecodeConfig(max_tokens=1)


@pytest.fixture
def home(tmp_path, monkeypatch, default_model):
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    return tmp_path


def test_a_saved_session_keeps_its_states_and_reopens_at_its_current_node(home, default_model):
    store = SnapshotStore()
    engine = SessionEngine(default_model, PROFILE, checkpoints=store)
    engine.open()
    engine.complete("The capital of France is", ONE_TOKEN)
    engine.complete(" The capital of Italy is", ONE_TOKEN)
    tape = engine.tape
    engine.save_session("demo")
    engine.close()
    assert set(store.refs_of(session_owner("demo"))) == engine.tree.blobs()
    assert store.gc().evicted == ()
    other = SessionEngine(default_model, PROFILE, checkpoints=SnapshotStore())
    other.open()
    restore = other.load_session("demo")
    assert (restore.mode, other.tape) == ("exact", tape)
    other.close()


def test_saving_after_a_delete_gives_the_deleted_states_back_and_keeps_the_prefix_cache(home, default_model):
    store = SnapshotStore()
    engine = SessionEngine(default_model, PROFILE, checkpoints=store, prefix_cache=store)
    engine.open()
    engine.load_prefix("Notes. The grass is green.")
    prefix = engine.tree.current
    engine.complete(" The capital of France is", ONE_TOKEN)
    first = engine.tree.current
    engine.complete(" The capital of Italy is", ONE_TOKEN)
    second = engine.tree.current
    engine.save_session("s")
    blob = {n: engine.tree.node(n).blob for n in (prefix, first, second)}
    engine.tree.delete_subtree(first)
    engine.save_session("s")
    engine.close()
    left = {e.key for e in store.ls()}
    assert blob[prefix] in left and blob[first] not in left and blob[second] not in left
    assert store.refs_of(session_owner("s")) == (blob[prefix],)


def test_a_state_another_session_references_stays_when_one_deletes_its_node(home, default_model):
    store = SnapshotStore()
    engine = SessionEngine(default_model, PROFILE, checkpoints=store)
    engine.open()
    engine.complete("The capital of France is", ONE_TOKEN)
    node = engine.tree.current
    key = engine.tree.node(node).blob
    engine.save_session("a")
    engine.save_session("b")
    engine.tree.delete_subtree(node)
    engine.save_session("a")
    engine.close()
    assert store.info(key).refs == (session_owner("b"),)


def test_the_sessions_command_lists_exports_imports_and_removes(home, default_model, tmp_path):
    engine = SessionEngine(default_model, PROFILE, checkpoints=SnapshotStore())
    engine.open()
    engine.complete("Once upon a time", ONE_TOKEN)
    engine.save_session("story")
    engine.close()
    env = dict(os.environ)

    def effctx(*args):
        return subprocess.run([EFFCTX, "sessions", *args], capture_output=True, text=True, env=env, timeout=60)

    assert effctx("ls").stdout.startswith("story  ")
    out = tmp_path / "story.effctx.json"
    assert effctx("export", "story", str(out)).returncode == 0
    assert "exists already" in effctx("import", str(out), "--name", "story").stderr
    assert effctx("import", str(out), "--name", "copy").returncode == 0
    rm = effctx("rm", "story")
    assert rm.stdout.strip() == "removed session story; 1 saved state released to the store's budget"
    assert [line.split()[0] for line in effctx("ls").stdout.splitlines()] == ["copy"]


def test_sessions_count_only_the_states_the_store_still_holds(home, default_model):
    store = SnapshotStore()
    engine = SessionEngine(default_model, PROFILE, checkpoints=store)
    engine.open()
    engine.complete("Once upon a time", ONE_TOKEN)
    engine.save_session("story")
    (key,) = engine.tree.blobs()
    node = next(n for n in engine.tree if n.blob == key)
    engine.close()
    blob = store.blob_path(key)
    blob.write_bytes(blob.read_bytes()[:-1] + b"\x00")  # one byte of the state damaged
    env = dict(os.environ)

    def effctx(*args):
        return subprocess.run([EFFCTX, *args], capture_output=True, text=True, env=env, timeout=60)

    assert effctx("snapshots", "verify").returncode == 1  # it quarantined the state
    assert " 0 states (1 missing: quarantined) " in effctx("sessions", "ls").stdout
    show = effctx("sessions", "show", "story").stdout
    assert f"{node.id} {node.label!r} [{node.kind}] {engine.tree.tape_length(node.id)} tokens, state missing: quarantined" in show
    listed = json.loads(effctx("sessions", "ls", "--json").stdout)
    assert (listed[0]["states"], listed[0]["states_missing"]) == (0, {"quarantined": 1})


class TreeWalk(RuleBasedStateMachine):
    """Turns, branches, restores and deletes; the model is the tape each node must have."""

    engine: SessionEngine = None  # one model load for the whole walk

    def __init__(self):
        super().__init__()
        self.engine.reset()
        root = self.engine.tree.root.id
        self.engine.tree.set_current(root)
        for child in list(self.engine.tree.children(root)):
            self.engine.tree.delete_subtree(child.id)
        self.expected = {root: ()}

    @rule(word=st.sampled_from([" red", " green", " the sky", " a cat", " once more"]))
    def turn(self, word):
        if len(self.engine.tape) > 700:
            return
        self.engine.complete(word, ONE_TOKEN)
        self.expected[self.engine.tree.current] = self.engine.tape

    @precondition(lambda self: len(self.expected) > 1)
    @rule(data=st.data())
    def restore(self, data):
        node = data.draw(st.sampled_from(sorted(self.expected)))
        result = self.engine.restore_node(node)
        assert self.engine.tape == self.expected[node]
        assert result.mode in ("exact", "recompute")

    @precondition(lambda self: len(self.expected) > 2)
    @rule(data=st.data())
    def delete(self, data):
        root = self.engine.tree.root.id
        node = data.draw(st.sampled_from(sorted(n for n in self.expected if n != root)))
        for gone in self.engine.tree.delete_subtree(node):
            self.expected.pop(gone)
        if self.engine.tree.current not in self.expected:
            self.engine.restore_node(root)

    @invariant()
    def every_tape_extends_its_parent(self):
        tree = self.engine.tree
        for node in tree:
            if node.parent is not None:
                assert tree.tape(node.id) == tree.tape(node.parent) + node.own_tokens
            assert tree.tape(node.id) == self.expected[node.id]

    @invariant()
    def nothing_referenced_is_evicted(self):
        store = self.engine.checkpoints
        self.engine.save_session("walk")
        for key in self.engine.tree.blobs():
            assert session_owner("walk") in store.info(key).refs  # held by the session, not evictable


def test_random_walks_keep_the_tree_and_the_store_consistent(home):
    # A small budget makes the store evict: only unreferenced states may go.
    store = SnapshotStore(budget_bytes=8 << 20)
    engine = SessionEngine(prepare_default_model(), PROFILE, checkpoints=store)
    engine.open()
    TreeWalk.engine = engine
    try:
        run_state_machine_as_test(TreeWalk, settings=settings(
            max_examples=6, stateful_step_count=20, deadline=None, suppress_health_check=list(HealthCheck)))
    finally:
        engine.close()


def test_a_node_deleted_before_its_session_was_ever_saved_gives_its_state_back(home, default_model):
    store = SnapshotStore()
    engine = SessionEngine(default_model, PROFILE, checkpoints=store)
    engine.open()
    engine.complete("The capital of France is", ONE_TOKEN)
    node = engine.tree.current
    key = engine.tree.node(node).blob
    engine.tree.delete_subtree(node)
    engine.save_session("s")
    engine.close()
    assert key not in {e.key for e in store.ls()}
