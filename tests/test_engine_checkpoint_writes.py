"""Checkpoint states written in the background, on the tiny model: a turn (and a prefix
load that missed the prefix cache) returns before its state is on disk; everything that
reads the store waits for the writes; a failed write leaves its node without a state; a
crash loses only the states not yet written.

The writer is held with a seam the test controls (HeldWriter): each write waits until
the engine waits for the writes (a restore, a save, a close: Checkpointer.settle) or the
test lets it go, so no test waits on time for something to happen (the queue bound's
test gives a turn that must not return half a second to show it does not).
"""

from __future__ import annotations

import errno
import os
import subprocess
import sys
import threading
from concurrent.futures import wait as futures_wait
from pathlib import Path

import pytest

from effctx_core.contract import DecodeConfig
from effctx_core.engine import SessionEngine, session_owner, state_writer
from effctx_core.events.trace import Event, NodeUnsaved, TurnFinished
from effctx_core.profiles import Profile
from effctx_core.snapshots import SnapshotStore, save_snapshot
from effctx_core.snapshots import store as store_module
from effctx_core.snapshots.tree_file import read_tree_file
from tests.helpers.engines import opened_engine
from tests.helpers.tiny_gguf import write_tiny_llama_gguf

pytestmark = pytest.mark.model

PROFILE = Profile(name="background-writes-test", n_ctx=1024)
REPLY = DecodeConfig(max_tokens=4)
HELD_AT_MOST = 30.0  # a write left held this long fails (a broken test must not hang the suite)
REPO = Path(__file__).resolve().parents[1]


class HeldWriter:
    """Holds every write at its start until someone waits for the writes, or `release`."""

    def __init__(self) -> None:
        self.released = threading.Event()
        self.finished = 0  # writes that ended

    def save(self, store: SnapshotStore, snapshot, meta: dict):
        if not self.released.wait(HELD_AT_MOST):
            raise TimeoutError("a held checkpoint write was never waited for")
        try:
            return save_snapshot(store, snapshot, meta)
        finally:
            self.finished += 1

    def wait(self, futures):
        if futures:  # a wait with nothing in flight (a settle before a prefix load) holds on
            self.released.set()
        return futures_wait(futures)


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory) -> Path:
    return write_tiny_llama_gguf(tmp_path_factory.mktemp("tiny") / "tiny.gguf")


@pytest.fixture(scope="module")
def store_root(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("checkpoints")


@pytest.fixture(scope="module")
def prefix_root(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("prefix-cache")


@pytest.fixture(scope="module")
def module_engine(tiny_model, store_root, prefix_root):
    """One model load for the module; each test starts a conversation of its own."""
    with opened_engine(tiny_model, PROFILE, checkpoints=SnapshotStore(store_root),
                       prefix_cache=SnapshotStore(prefix_root)) as engine:
        yield engine


@pytest.fixture
def engine(module_engine: SessionEngine) -> SessionEngine:
    module_engine.settle()
    module_engine.reset()
    return module_engine


@pytest.fixture
def held(engine, monkeypatch):
    writer = HeldWriter()
    monkeypatch.setattr(state_writer, "save_snapshot", writer.save)
    monkeypatch.setattr(state_writer, "wait", writer.wait)
    yield writer
    writer.released.set()  # whatever the test left held goes on


@pytest.fixture
def events(engine: SessionEngine):
    seen: list[Event] = []
    stop = engine.subscribe(seen.append)
    yield seen
    stop()


def current_node(engine: SessionEngine):
    current = engine.tree.current
    assert current is not None
    return engine.tree.node(current)


def test_a_turn_returns_before_its_state_is_on_disk_and_settle_writes_it(engine, held, store_root):
    engine.complete("Held writes wait for a settle.", REPLY)
    key = current_node(engine).blob
    assert key is not None  # the node names its state at once
    store = SnapshotStore(store_root)
    assert store.missing_states([key]) == {key: "not in the store"} and not store.blob_path(key).exists()
    engine.settle()
    assert store.blob_path(key).exists()
    assert store.info(key).meta == {"kind": "turn"}


def test_restoring_a_node_whose_state_is_on_its_way_waits_for_it_and_is_exact(engine, held):
    engine.complete("Restores wait for the state they need.", REPLY)
    node = current_node(engine)
    continued = engine.complete(" And then", DecodeConfig(max_tokens=8)).text
    assert not held.released.is_set()  # both states are still held
    restore = engine.restore_node(node.id)
    assert (restore.mode, restore.recomputed) == ("exact", 0)
    assert engine.tape == engine.tree.tape(node.id)
    again = engine.complete(" And then", DecodeConfig(max_tokens=8))
    assert (again.text, again.reused) == (continued, len(engine.tree.tape(node.id)))


def test_a_saved_session_references_only_states_on_disk(engine, held, store_root):
    engine.complete("Sessions are saved after the writes.", REPLY)
    key = current_node(engine).blob
    path = engine.save_session("background-writes")
    store = SnapshotStore(store_root)
    saved = read_tree_file(path).blobs()
    assert key in saved
    assert all(store.blob_path(k).exists() and session_owner("background-writes") in store.info(k).refs
               for k in saved)


def test_a_failed_write_leaves_its_node_without_a_state_and_a_restore_recomputes(engine, events, monkeypatch,
                                                                                store_root):
    def disk_full(fd, parts):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(store_module, "_write_parts", disk_full)
    engine.complete("A full disk takes this state.", REPLY)
    node = current_node(engine)
    assert node.blob is not None  # named at once, before the write failed
    engine.settle()
    monkeypatch.undo()
    [unsaved] = [e for e in events if isinstance(e, NodeUnsaved)]
    assert (unsaved.node, unsaved.blob) == (node.id, node.blob)
    assert "No space left on device" in unsaved.message
    assert unsaved.message.endswith("; restoring this node will recompute it")
    assert engine.tree.node(node.id).blob is None
    store = SnapshotStore(store_root)
    assert not store.blob_path(node.blob).exists()
    assert not [p for p in store.blobs_dir.iterdir() if p.name.endswith(".tmp")]  # nothing half-written
    restore = engine.restore_node(node.id)
    assert (restore.mode, restore.reason) == ("recompute", "the node has no saved state")
    assert engine.tape == engine.tree.tape(node.id)
    engine.complete(" The disk has room again.", REPLY)
    engine.settle()
    assert store.blob_path(current_node(engine).blob).exists()


def test_a_prefix_miss_returns_before_its_state_is_stored_and_the_next_load_waits_for_it(engine, held,
                                                                                       prefix_root):
    document = "A stable prefix, stored in the background. " * 8
    loaded = engine.load_prefix(document)
    assert loaded.cache == "miss" and loaded.key is not None and loaded.message is None
    assert current_node(engine).blob == loaded.key  # the prefix node names its state at once
    store = SnapshotStore(prefix_root)
    assert not store.blob_path(loaded.key).exists() and not held.released.is_set()
    engine.reset()
    again = engine.load_prefix(document)
    assert (again.cache, again.key, again.restored) == ("hit", loaded.key, loaded.tokens)
    assert store.info(loaded.key).meta == {"kind": "prefix", "text_chars": len(document)}


def test_a_prefix_whose_write_fails_says_the_prefix_cache_was_not_written(engine, events, monkeypatch,
                                                                           prefix_root):
    def disk_full(fd, parts):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    document = "A stable prefix that a full disk takes. " * 8
    monkeypatch.setattr(store_module, "_write_parts", disk_full)
    loaded = engine.load_prefix(document)
    assert loaded.cache == "miss" and loaded.message is None  # the failure is not known yet
    node = current_node(engine)
    engine.settle()
    monkeypatch.undo()
    [unsaved] = [e for e in events if isinstance(e, NodeUnsaved)]
    assert (unsaved.node, unsaved.blob) == (node.id, loaded.key)
    assert unsaved.message.startswith("prefix cache not written (")
    assert "No space left on device" in unsaved.message and unsaved.message.endswith("; running without it")
    assert engine.tree.node(node.id).blob is None
    assert not SnapshotStore(prefix_root).blob_path(loaded.key).exists()
    engine.reset()
    assert engine.load_prefix(document).cache == "miss"  # nothing half-stored is taken for a hit


def test_with_two_states_held_the_third_turn_waits_for_room(engine, held):
    engine.complete("The first state is being written.", REPLY)
    engine.complete(" The second waits its turn.", REPLY)
    finished_at_return: list[int] = []
    third_done = threading.Event()
    third_finished = threading.Event()
    stop = engine.subscribe(lambda e: isinstance(e, TurnFinished) and third_finished.set())

    def third_turn() -> None:
        engine.complete(" The third waits for room.", REPLY)
        finished_at_return.append(held.finished)
        third_done.set()

    thread = threading.Thread(target=third_turn)
    thread.start()
    assert third_finished.wait(HELD_AT_MOST)  # the turn itself ran...
    assert not third_done.wait(0.5)  # ...and its checkpoint waits while two states are held
    held.released.set()
    thread.join(HELD_AT_MOST)
    stop()
    assert third_done.is_set() and finished_at_return[0] >= 1  # it went on once the first was written


# A process that runs a turn and writes its tree as the endpoint does after every request
# (no settle: the endpoint's conversations file may name a state on its way). With
# "crash" it is then killed while the state's blob is half-written; with "exit" its write
# is let go as the interpreter exits, with no close.
ENDING = """
import os, sys, threading
from pathlib import Path
from effctx_core.contract import DecodeConfig
from effctx_core.engine import SessionEngine, state_writer
from effctx_core.profiles import Profile
from effctx_core.snapshots import SnapshotStore, store
from effctx_core.snapshots.tree_file import write_tree_file

model, root, tree_path, n_ctx, how = sys.argv[1:]
gate = threading.Event()
half_written = threading.Event()
def half_then_killed(fd, parts):
    os.write(fd, bytes(parts[0])[:64])
    half_written.set()
    threading.Event().wait()  # the test kills the process here
def held(*args):
    gate.wait()
    return save_snapshot(*args)
if how == "crash":
    store._write_parts = half_then_killed
else:
    save_snapshot, state_writer.save_snapshot = state_writer.save_snapshot, held
engine = SessionEngine(model, Profile(name="background-writes-test", n_ctx=int(n_ctx)),
                       checkpoints=SnapshotStore(Path(root)))
engine.open()
engine.complete(f"The process ends by {how} with a state on its way.", DecodeConfig(max_tokens=4))
write_tree_file(engine.tree, Path(tree_path))
if how == "crash":
    half_written.wait()  # the writer thread runs on its own time: kill only once the blob is half on disk
print(engine.tree.current, flush=True)
if how == "crash":
    threading.Event().wait()  # killed here
gate.set()
"""


def ended_process(how: str, model: Path, root: Path, tree_path: Path) -> tuple[str, str]:
    """(node, its state's key) of a process that ENDING ended by `how`."""
    proc = subprocess.Popen([sys.executable, "-c", ENDING, str(model), str(root), str(tree_path), str(PROFILE.n_ctx),
                             how], cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)},
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        node_id = proc.stdout.readline().strip()
        assert node_id, proc.stderr.read() if proc.poll() is not None else "no node"
        if how == "crash":
            proc.kill()
        _, err = proc.communicate(timeout=HELD_AT_MOST)
        assert how == "crash" or proc.returncode == 0, err
    finally:
        if proc.poll() is None:
            proc.kill()
    key = read_tree_file(tree_path).node(node_id).blob
    assert key is not None
    return node_id, key


def test_a_crash_loses_only_the_states_on_their_way_and_their_nodes_recompute(engine, tiny_model, store_root,
                                                                              tmp_path):
    tree_path = tmp_path / "conversations.json"
    node_id, key = ended_process("crash", tiny_model, store_root, tree_path)
    tree = read_tree_file(tree_path)
    engine.set_tree(tree)
    assert engine.missing_states([key]) == {key: "not in the store"}
    restore = engine.restore_node(node_id)
    assert restore.mode == "recompute" and restore.reason.startswith("its saved state is unusable (no snapshot")
    assert engine.tape == tree.tape(node_id)
    store = SnapshotStore(store_root)
    assert store.gc(stale_after=0).temp_removed  # the dead writer's half-written blob
    assert not store.blob_path(key).exists()


def test_an_exit_without_a_close_writes_the_states_on_their_way(engine, tiny_model, store_root, tmp_path):
    node_id, key = ended_process("exit", tiny_model, store_root, tmp_path / "conversations.json")
    assert engine.missing_states([key]) == {}
    assert SnapshotStore(store_root).info(key).meta == {"kind": "turn"}


def test_close_writes_the_states_on_their_way(module_engine, held, store_root):
    # Last in the module: it closes the module's engine.
    module_engine.reset()
    module_engine.complete("Closing waits for the writes.", REPLY)
    key = current_node(module_engine).blob
    assert key is not None
    module_engine.close()
    assert SnapshotStore(store_root).blob_path(key).exists()
