"""The persistent snapshot store: real files in a temp dir, exact expectations.

Fault injection (crashes, damage, concurrent writers, full disks) is in
test_snapshot_faults.py.
"""

from __future__ import annotations

import hashlib
import json
import os
import struct
import time

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from effctx_core.cli import snapshots as snapshots_command
from effctx_core.cli.options import OneLineParser
from effctx_core.contract import SessionSnapshot
from effctx_core.errors import EffctxError
from effctx_core.snapshots import (
    BUDGET_ENV,
    AmbiguousSnapshotIdError,
    SnapshotBudgetError,
    SnapshotError,
    SnapshotInUseError,
    SnapshotNotFoundError,
    SnapshotStore,
    SnapshotStoreError,
    decode,
    encode,
    key_for,
    load_snapshot,
    save_snapshot,
    snapshot_key,
    token_hash,
)
from effctx_core.snapshots.blobfile import HEADER_BYTES
from effctx_core.snapshots.budget import BUDGET_CAP, BUDGET_FLOOR, default_budget
from tests.helpers.identities import identity

T0 = 1_700_000_000.0  # 2023-11-14 22:13:20 UTC


ID = identity().digest()
OTHER_ID = identity(n_batch=64).digest()


class Clock:
    """One minute per call, from T0: deterministic created/last-used times."""

    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> float:
        self.now += 60
        return self.now


def blob_size(n_tokens: int, payload: int, meta: dict | None = None) -> int:
    meta_bytes = len(json.dumps(meta, sort_keys=True, separators=(",", ":"))) if meta else 2
    return HEADER_BYTES + 4 * n_tokens + meta_bytes + payload


def make_store(tmp_path, budget: int | None = 1 << 30) -> SnapshotStore:
    return SnapshotStore(tmp_path / "store", budget, clock=Clock())


# --------------------------------------------------------------------------- codec + store round trip


@pytest.mark.parametrize("logits", [None, b"", np.arange(8, dtype=np.float32).tobytes()], ids=["none", "empty", "floats"])
def test_session_snapshot_round_trips_exactly_through_codec_and_store(tmp_path, logits):
    store = make_store(tmp_path)
    snap = SessionSnapshot(identity(), (2, 0, 262143, 2**31 - 1, 7), bytes(range(256)) * 40, logits)
    entry = save_snapshot(store, snap, meta={"label": "turn 3"})
    back = load_snapshot(SnapshotStore(tmp_path / "store"), entry.key, identity())
    assert back == snap
    assert back.logits is None if logits is None else back.logits == logits


@settings(max_examples=60, deadline=None)
@given(tokens=st.lists(st.integers(-(2**31), 2**31 - 1), max_size=64),
       state=st.binary(max_size=300), logits=st.none() | st.binary(max_size=40),
       pending=st.lists(st.integers(0, 2**31 - 1), max_size=2))
def test_codec_decodes_what_it_encodes(tokens, state, logits, pending):
    snap = SessionSnapshot(identity(), tuple(tokens), state, logits, tuple(pending))
    assert decode(encode(snap), identity()) == snap


def test_a_snapshot_with_a_pending_token_is_stored_under_its_whole_tape(tmp_path):
    store = make_store(tmp_path)
    snap = SessionSnapshot(identity(), (2, 5, 9), b"S" * 64, None, pending=(11,))
    entry = save_snapshot(store, snap)
    assert (entry.key, entry.n_tokens) == (snapshot_key(snap), 4)
    assert store.longest_prefix(identity().digest(), [2, 5, 9, 11, 3]) == (entry.key, 4)
    back = load_snapshot(store, entry.key, identity())
    assert (back.tokens, back.pending, back) == ((2, 5, 9), (11,), snap)


def test_a_version_1_payload_from_before_pending_tokens_is_still_read():
    tokens, state = struct.pack("<2i", 2, 7), b"S" * 16
    v1 = struct.pack("<4sHHQQQ", b"EFSS", 1, 0, 2, len(state), 0) + tokens + state
    assert decode(v1, identity()) == SessionSnapshot(identity(), (2, 7), state, None)


def test_blob_file_has_the_documented_byte_layout(tmp_path):
    store = make_store(tmp_path)
    tokens, payload, meta = [5, 6, 7], b"P" * 10, {"a": 1}
    entry = store.put(ID, tokens, payload, meta)
    raw = store.blob_path(entry.key).read_bytes()
    meta_raw = b'{"a":1}'
    tok_raw = struct.pack("<3i", 5, 6, 7)
    assert raw[:8] == b"EFFCTXS1"
    assert struct.unpack_from("<HHI", raw, 8) == (1, 0, 232)
    assert raw[16:80] == ID.encode()
    assert struct.unpack_from("<Q", raw, 80) == (3,)
    assert raw[88:120] == hashlib.sha256(tok_raw).digest()
    assert struct.unpack_from("<II", raw, 120) == (len(meta_raw), 0)
    assert raw[128:160] == hashlib.sha256(meta_raw).digest()
    assert struct.unpack_from("<Q", raw, 160) == (10,)
    assert raw[168:200] == hashlib.sha256(payload).digest()
    assert raw[200:232] == hashlib.sha256(raw[:200]).digest()
    assert raw[232:] == tok_raw + meta_raw + payload
    assert entry.bytes == len(raw) == 232 + 12 + 7 + 10


def test_key_is_sha256_of_identity_digest_and_int32_token_hash():
    tokens = [1, 2, 300000]
    expected_token_hash = hashlib.sha256(np.array(tokens, dtype="<i4").tobytes()).hexdigest()
    assert token_hash(tokens) == expected_token_hash
    assert key_for(ID, tokens) == hashlib.sha256((ID + expected_token_hash).encode()).hexdigest()


def test_tokens_that_are_not_int32_ids_are_refused(tmp_path):
    store = make_store(tmp_path)
    with pytest.raises(SnapshotError, match="fit in int32"):
        store.put(ID, [2**31], b"x")
    with pytest.raises(SnapshotError, match="flat sequence of integers"):
        store.put(ID, [1.5], b"x")
    assert not (tmp_path / "store").exists()


def test_same_identity_and_tokens_replace_one_entry(tmp_path):
    store = make_store(tmp_path)
    first = store.put(ID, [1, 2], b"old")
    second = store.put(ID, [1, 2], b"newer")
    assert first.key == second.key
    assert [e.key for e in store.ls()] == [first.key]
    assert store.get(first.key, ID).payload == b"newer"


# --------------------------------------------------------------------------- lookups


def test_find_matches_exact_tokens_under_the_same_identity_only(tmp_path):
    store = make_store(tmp_path)
    key = store.put(ID, [1, 2, 3], b"s").key
    assert store.find(ID, (1, 2, 3)) == key
    assert store.find(ID, [1, 2]) is None
    assert store.find(OTHER_ID, [1, 2, 3]) is None


def test_longest_prefix_is_the_longest_stored_prefix_under_the_identity(tmp_path):
    store = make_store(tmp_path)
    seq = list(range(100, 140))
    k10 = store.put(ID, seq[:10], b"a").key
    store.put(ID, seq[:20], b"b")
    k30 = store.put(ID, seq[:30], b"c").key
    store.put(ID, seq[:34] + [9, 9], b"diverges at 34")
    other = store.put(OTHER_ID, seq[:32], b"other identity").key
    assert store.longest_prefix(ID, seq[:35]) == (k30, 30)
    assert store.longest_prefix(ID, seq[:30]) == (k30, 30)
    assert store.longest_prefix(ID, seq[:15]) == (k10, 10)
    assert store.longest_prefix(ID, seq[:9]) is None
    assert store.longest_prefix(ID, [100, 5] + seq[2:]) is None
    assert store.longest_prefix(OTHER_ID, seq) == (other, 32)


def test_unique_id_prefixes_resolve_like_git(tmp_path):
    store = make_store(tmp_path)
    keys = [store.put(ID, [i], b"x").key for i in range(17)]  # 17 keys: two share a first hex digit
    first = {}
    for key in keys:
        first.setdefault(key[0], []).append(key)
    shared = next(group for group in first.values() if len(group) > 1)
    for key in keys:
        assert store.resolve(key[: store.unique_prefix_length(minimum=1)]) == key
        assert store.resolve(key.upper()) == key
    with pytest.raises(AmbiguousSnapshotIdError, match=f"snapshot ID {shared[0][0]} is ambiguous: {len(shared)} snapshots"):
        store.resolve(shared[0][0])
    absent = key_for(ID, [999])
    with pytest.raises(SnapshotNotFoundError, match=f"^no snapshot matches ID {absent}$"):
        store.resolve(absent)
    with pytest.raises(SnapshotNotFoundError, match="expected hex digits"):
        store.resolve("xyz")


# --------------------------------------------------------------------------- budget, LRU, refs


def test_lru_eviction_removes_the_least_recently_used_first(tmp_path):
    size = blob_size(1, 1000)
    store = make_store(tmp_path, budget=3 * size)
    a, b, c = (store.put(ID, [i], b"x" * 1000).key for i in range(3))
    store.get(a, ID)  # a is now more recent than b and c
    d = store.put(ID, [3], b"x" * 1000).key
    assert [e.key for e in store.ls()] == [d, a, c]
    assert not store.blob_path(b).exists()
    e = store.put(ID, [4], b"x" * 1000).key
    assert [x.key for x in store.ls()] == [e, d, a]


def test_lru_order_is_shared_through_the_index_not_file_atimes(tmp_path):
    size = blob_size(1, 1000)
    one = make_store(tmp_path, budget=2 * size)
    a, b = (one.put(ID, [i], b"x" * 1000).key for i in range(2))
    one.get(a, ID)
    two = make_store(tmp_path, budget=2 * size)
    two.put(ID, [2], b"x" * 1000)
    assert {e.key for e in one.ls()} == {a, key_for(ID, [2])}
    assert b not in {e.key for e in two.ls()}


def test_referenced_entry_survives_eviction_even_when_least_recently_used(tmp_path):
    size = blob_size(1, 1000)
    store = make_store(tmp_path, budget=3 * size)
    kept = store.put(ID, [0], b"x" * 1000, owner="tree-1").key
    b, c = (store.put(ID, [i], b"x" * 1000).key for i in (1, 2))
    d = store.put(ID, [3], b"x" * 1000).key
    assert {e.key for e in store.ls()} == {kept, c, d}
    assert store.info(kept).refs == ("tree-1",)
    assert store.find(ID, [1]) is None
    assert not store.blob_path(b).exists()


def test_referenced_entries_survive_gc_when_the_budget_shrinks(tmp_path):
    size = blob_size(1, 1000)
    big = make_store(tmp_path, budget=10 * size)
    keys = [big.put(ID, [i], b"x" * 1000).key for i in range(5)]
    big.add_ref(keys[0], "tree-a")
    big.add_ref(keys[3], "tree-b")
    small = make_store(tmp_path, budget=3 * size)
    report = small.gc()
    assert report.evicted == (keys[1], keys[2])
    assert report.freed_bytes == 2 * size
    assert {e.key for e in small.ls()} == {keys[0], keys[3], keys[4]}
    tiny = make_store(tmp_path, budget=size)
    report = tiny.gc()
    assert report.evicted == (keys[4],)
    assert report.usage.over_budget_bytes == size  # the two referenced blobs alone exceed it
    assert report.usage.referenced_bytes == 2 * size


def test_put_fails_clearly_instead_of_evicting_referenced_entries(tmp_path):
    size = blob_size(1, 1000)
    store = make_store(tmp_path, budget=2 * size)
    refd = [store.put(ID, [i], b"x" * 1000, owner="tree").key for i in range(2)]
    with pytest.raises(SnapshotBudgetError) as err:
        store.put(ID, [9], b"x" * 1000)
    assert size == 1238
    assert str(err.value) == (
        "a 1.21 KiB snapshot does not fit: saved snapshot trees reference 2.42 KiB of the 2.42 KiB snapshot "
        f"budget (set by the caller); raise {BUDGET_ENV} or delete saved trees"
    )
    assert {e.key for e in store.ls()} == set(refd)
    assert sorted(p.name for p in store.blobs_dir.iterdir()) == sorted(f"{k}.snap" for k in refd)


def test_a_blob_larger_than_the_budget_is_refused_before_writing(tmp_path):
    store = make_store(tmp_path, budget=1000)
    with pytest.raises(SnapshotBudgetError, match=r"a 1.21 KiB snapshot does not fit the 1000 B snapshot budget"):
        store.put(ID, [1], b"x" * 1000)
    assert not store.blobs_dir.exists()


def test_remove_refs_makes_entries_evictable_again(tmp_path):
    size = blob_size(1, 1000)
    store = make_store(tmp_path, budget=10 * size)
    key = store.put(ID, [1], b"x" * 1000, owner="tree").key
    store.add_ref(key, "other-tree")
    assert store.remove_refs("tree") == 1
    assert store.info(key).refs == ("other-tree",)
    assert store.remove_refs("other-tree") == 1
    assert make_store(tmp_path, budget=1).gc().evicted == (key,)


def test_refs_persist_in_their_own_file(tmp_path):
    store = make_store(tmp_path)
    key = store.put(ID, [1], b"x").key
    store.add_ref(key, "tree-a")
    assert json.loads((tmp_path / "store" / "refs.json").read_text()) == {"format": 1, "owners": {"tree-a": [key]}}
    assert SnapshotStore(tmp_path / "store").refs_of("tree-a") == (key,)
    with pytest.raises(SnapshotNotFoundError):
        store.add_ref(key_for(ID, [2]), "tree-a")


def test_rm_refuses_a_referenced_entry_unless_forced(tmp_path):
    store = make_store(tmp_path)
    key = store.put(ID, [1], b"x", owner="tree").key
    with pytest.raises(SnapshotInUseError, match=f"snapshot {key[:12]} is referenced by tree"):
        store.rm(key)
    removed = store.rm(key, force=True)
    assert removed.refs == ("tree",)
    assert store.ls() == [] and store.refs_of("tree") == ()
    assert not store.blob_path(key).exists()
    with pytest.raises(SnapshotNotFoundError):
        store.rm(key)


def test_budget_comes_from_the_environment(tmp_path, monkeypatch):
    monkeypatch.setenv(BUDGET_ENV, "2GiB")
    store = SnapshotStore(tmp_path)
    assert store.budget_bytes == 2 << 30
    assert store.budget.source == f"{BUDGET_ENV}=2GiB"
    assert SnapshotStore(tmp_path, budget_bytes=5).budget_bytes == 5
    monkeypatch.setenv(BUDGET_ENV, "lots")
    with pytest.raises(EffctxError, match=f"^{BUDGET_ENV}: cannot read memory size 'lots'"):
        SnapshotStore(tmp_path)


def test_default_budget_is_a_tenth_of_free_disk_within_floor_and_cap():
    assert default_budget(100 << 20) == BUDGET_FLOOR == 256 << 20
    assert default_budget(30 << 30) == 3 << 30
    assert default_budget(1 << 40) == BUDGET_CAP == 8 << 30


def test_default_budget_says_where_it_comes_from(tmp_path, monkeypatch):
    monkeypatch.delenv(BUDGET_ENV, raising=False)
    source = SnapshotStore(tmp_path).budget.source
    assert source.startswith("10% of ") and source.endswith(" free disk, between 256 MiB and 8 GiB")


# --------------------------------------------------------------------------- why a state is missing


def test_a_missing_state_says_whether_the_store_evicted_it_or_it_was_removed(tmp_path):
    store = make_store(tmp_path)
    keys = {name: store.put(ID, tokens, b"s" * 100).key
            for name, tokens in (("evicted", [1]), ("removed", [2]), ("kept", [3]))}
    store.rm(keys["removed"])
    # room for two states: the next put evicts the least recently used, "evicted"
    SnapshotStore(tmp_path / "store", budget_bytes=2 * blob_size(1, 100) + 50).put(ID, [4], b"s" * 100)
    never = key_for(ID, [5])
    assert make_store(tmp_path).missing_states([*keys.values(), never]) == {
        keys["evicted"]: "evicted (store limit)",
        keys["removed"]: "removed",
        never: "not in the store",
    }


def test_gc_that_evicts_to_the_limit_says_evicted(tmp_path):
    store = make_store(tmp_path)
    old, new = store.put(ID, [1], b"s" * 100).key, store.put(ID, [2], b"s" * 100).key
    assert SnapshotStore(tmp_path / "store", budget_bytes=blob_size(1, 100)).gc().evicted == (old,)
    assert store.missing_states([old, new]) == {old: "evicted (store limit)"}


def test_a_state_saved_again_after_it_was_removed_is_held_and_forgotten_as_removed(tmp_path):
    store = make_store(tmp_path)
    key = store.put(ID, [1], b"s").key
    store.rm(key)
    store.put(ID, [1], b"s")
    assert store.missing_states([key]) == {}
    assert json.loads((tmp_path / "store" / "index.json").read_text())["gone"] == []


def test_the_store_remembers_only_the_newest_gone_keys(tmp_path, monkeypatch):
    monkeypatch.setattr("effctx_core.snapshots.index.GONE_KEEP", 2)
    store = make_store(tmp_path)
    keys = [store.put(ID, [i], b"s").key for i in range(3)]
    for key in keys:
        store.rm(key)
    assert json.loads((tmp_path / "store" / "index.json").read_text())["gone"] == [
        [keys[1], "removed"], [keys[2], "removed"]]
    assert store.missing_states(keys) == {keys[0]: "not in the store", keys[1]: "removed", keys[2]: "removed"}


def test_an_index_written_before_it_remembered_gone_keys_still_reads(tmp_path):
    store = make_store(tmp_path)
    key = store.put(ID, [1], b"s").key
    path = tmp_path / "store" / "index.json"
    older = json.loads(path.read_text())
    del older["gone"]
    path.write_text(json.dumps(older))
    fresh = make_store(tmp_path)
    assert [e.key for e in fresh.ls()] == [key]
    assert fresh.missing_states([key, key_for(ID, [2])]) == {key_for(ID, [2]): "not in the store"}
    assert not (tmp_path / "store" / "quarantine").exists()


# --------------------------------------------------------------------------- index self-repair


def test_a_damaged_index_is_set_aside_and_rebuilt_from_the_blobs(tmp_path):
    store = make_store(tmp_path)
    keys = {store.put(ID, [i], b"x", {"i": i}).key for i in range(3)}
    (tmp_path / "store" / "index.json").write_text("{not json")
    fresh = make_store(tmp_path)
    assert {e.key: e.meta for e in fresh.ls()} == {key_for(ID, [i]): {"i": i} for i in range(3)}
    assert {e.key for e in fresh.ls()} == keys
    assert [p.name.split(".")[0] for p in (tmp_path / "store" / "quarantine").iterdir()] == ["index"]


def test_a_blob_without_an_index_entry_is_adopted_by_gc(tmp_path):
    donor = SnapshotStore(tmp_path / "donor", 1 << 20)
    key = donor.put(ID, [1, 2], b"orphan", {"from": "a writer that died before indexing"}).key
    store = make_store(tmp_path)
    store.put(ID, [3], b"indexed")
    store.blobs_dir.joinpath(f"{key}.snap").write_bytes(donor.blob_path(key).read_bytes())
    assert store.find(ID, [1, 2]) is None
    report = store.gc()
    assert report.adopted == (key,)
    assert store.get(key, ID) == ((1, 2), b"orphan", {"from": "a writer that died before indexing"})


def test_an_entry_whose_blob_vanished_is_dropped(tmp_path):
    store = make_store(tmp_path)
    key = store.put(ID, [1], b"x").key
    store.blob_path(key).unlink()
    with pytest.raises(SnapshotNotFoundError):
        store.get(key, ID)
    assert store.ls() == []


def test_a_damaged_refs_file_stops_eviction_until_verify_sets_it_aside(tmp_path):
    store = make_store(tmp_path)
    store.put(ID, [1], b"x", owner="tree")
    (tmp_path / "store" / "refs.json").write_text("[]")
    with pytest.raises(SnapshotStoreError, match="refs.json is damaged; `effctx snapshots verify` sets it aside"):
        store.gc()
    report = store.verify()
    assert [(q.name, q.reason) for q in report.quarantined] == [
        ("refs.json", "refs file damaged; saved trees no longer protect their snapshots")]
    assert store.gc().evicted == ()
    assert store.ls()[0].refs == ()


# --------------------------------------------------------------------------- CLI



def cli(*argv: str) -> int:
    parser = OneLineParser(prog="effctx")
    snapshots_command.add_parser(parser.add_subparsers(dest="command"))
    return snapshots_command.run(parser.parse_args(["snapshots", *argv]))


@pytest.fixture
def cli_store(tmp_path, monkeypatch, utc):
    """Three entries with known keys, sizes and times; the CLI sees a 1 MiB budget.

    Sizes: 232-byte header + 4 B per token + meta JSON + payload, where a session
    payload is a 40-byte header + 4 B per token + state + logits:
    232 + 12 + 25 + (40 + 12 + 2048 + 16) = 2385;  232 + 2000 + 2 + 10000 = 12234;  232 + 4 + 2 = 238.
    """
    monkeypatch.setenv(BUDGET_ENV, "1MiB")
    store = make_store(tmp_path)
    snap = SessionSnapshot(identity(), (1, 2, 3), b"S" * 2048, b"L" * 16)
    save_snapshot(store, snap, {"label": "system prompt"}, owner="tree-1")  # T0 + 1 min
    store.put(ID, list(range(500)), b"x" * 10_000)  # T0 + 2 min
    store.put(OTHER_ID, [7], b"")  # T0 + 3 min
    return store


def test_cli_ls_prints_an_aligned_table_most_recent_first(cli_store, capsys):
    a, b, c = key_for(ID, [1, 2, 3]), key_for(ID, list(range(500))), key_for(OTHER_ID, [7])
    assert cli("ls", "--dir", str(cli_store.root)) == 0
    assert capsys.readouterr().out == (
        "ID            IDENTITY  TOKENS       SIZE  LAST USED            REFS\n"
        f"{c[:12]}  {OTHER_ID[:8]}       1      238 B  2023-11-14 22:16:20     0\n"
        f"{b[:12]}  {ID[:8]}     500  11.95 KiB  2023-11-14 22:15:20     0\n"
        f"{a[:12]}  {ID[:8]}       3   2.33 KiB  2023-11-14 22:14:20     1\n"
        f"3 snapshots, 14.51 KiB of 1 MiB budget ({BUDGET_ENV}=1MiB)\n"
    )


def test_cli_ls_json_has_stable_keys(cli_store, capsys):
    assert cli("ls", "--json", "--dir", str(cli_store.root)) == 0
    data = json.loads(capsys.readouterr().out)
    assert sorted(data) == ["budget_bytes", "budget_source", "entries", "over_budget_bytes", "referenced_bytes",
                            "root", "total_bytes"]
    first = data["entries"][2]
    assert first == {
        "key": key_for(ID, [1, 2, 3]), "identity": ID, "n_tokens": 3, "token_hash": token_hash([1, 2, 3]),
        "bytes": 2385, "created": T0 + 60, "last_used": T0 + 60, "refs": ["tree-1"], "meta": {"label": "system prompt"},
    }
    assert (data["total_bytes"], data["referenced_bytes"], data["budget_bytes"]) == (14857, 2385, 1 << 20)


def test_cli_show_accepts_a_unique_prefix_and_checks_the_blob(cli_store, capsys):
    key = key_for(ID, [1, 2, 3])
    assert cli("show", key[:6], "--dir", str(cli_store.root)) == 0
    assert capsys.readouterr().out == (
        f"key        {key}\n"
        f"identity   {ID}\n"
        f"tokens     3 (sha256 {token_hash([1, 2, 3])})\n"
        "size       2.33 KiB (2385 bytes)\n"
        "created    2023-11-14 22:14:20\n"
        "last used  2023-11-14 22:14:20\n"
        "refs       tree-1\n"
        'meta       {"label": "system prompt"}\n'
        "payload    session snapshot: state 2 KiB, logits 16 B\n"
        "integrity  ok (header, token, meta and payload checksums match)\n"
    )
    assert cli("show", key[:6], "--json", "--dir", str(cli_store.root)) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["payload"] == {"kind": "session", "n_tokens": 3, "pending_tokens": 0, "state_bytes": 2048, "logits_bytes": 16}
    assert data["integrity"] == "ok"


def test_cli_unknown_and_ambiguous_ids_are_one_line_errors(cli_store):
    with pytest.raises(SnapshotNotFoundError) as err:
        cli("show", "0" * 64, "--dir", str(cli_store.root))
    assert str(err.value) == f"no snapshot matches ID {'0' * 64}"
    for i in range(17):
        cli_store.put(ID, [1000 + i], b"")
    with pytest.raises(AmbiguousSnapshotIdError) as err:
        cli("rm", _shared_first_digit(cli_store), "--dir", str(cli_store.root))
    assert "\n" not in str(err.value) and " is ambiguous: " in str(err.value)


def _shared_first_digit(store: SnapshotStore) -> str:
    firsts = [e.key[0] for e in store.ls()]
    return next(c for c in firsts if firsts.count(c) > 1)


def test_cli_rm_removes_by_prefix_and_refuses_referenced_without_force(cli_store, capsys):
    free, refd = key_for(ID, list(range(500))), key_for(ID, [1, 2, 3])
    assert cli("rm", free[:8], "--dir", str(cli_store.root)) == 0
    assert capsys.readouterr().out == f"removed {free[:12]} (500 tokens, 11.95 KiB)\n"
    with pytest.raises(SnapshotInUseError):
        cli("rm", refd[:8], "--dir", str(cli_store.root))
    assert cli("rm", refd[:8], "--force", "--json", "--dir", str(cli_store.root)) == 0
    assert json.loads(capsys.readouterr().out)["removed"]["refs"] == ["tree-1"]
    assert [e.key for e in cli_store.ls()] == [key_for(OTHER_ID, [7])]


def test_cli_gc_evicts_to_the_budget_and_reports(cli_store, capsys, monkeypatch):
    monkeypatch.setenv(BUDGET_ENV, "3KiB")
    assert cli("gc", "--dir", str(cli_store.root)) == 0
    assert capsys.readouterr().out == (
        "evicted 1 snapshot (11.95 KiB), removed 0 stale temp files, adopted 0, dropped 0 index entries, "
        "purged 0 from quarantine\n"
        f"2 snapshots, 2.56 KiB of 3 KiB budget ({BUDGET_ENV}=3KiB)\n"
    )


def test_cli_verify_exits_1_when_it_quarantined_and_0_when_clean(cli_store, capsys):
    key = key_for(ID, list(range(500)))
    path = cli_store.blob_path(key)
    raw = bytearray(path.read_bytes())
    raw[-1] ^= 0x01
    path.write_bytes(raw)
    assert cli("verify", "--dir", str(cli_store.root)) == 1
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "checked 3 files: 2 ok, 1 quarantined"
    assert out[1].startswith(f"quarantined {key}.snap: payload checksum mismatch -> {cli_store.quarantine_dir}/{key}.snap.")
    assert out[1].endswith(".checksum")
    assert len(out) == 2
    assert cli("verify", "--json", "--dir", str(cli_store.root)) == 0
    data = json.loads(capsys.readouterr().out)
    assert (data["checked"], data["ok"], data["quarantined"], data["clean"]) == (2, 2, [], True)


def test_cli_on_a_store_folder_that_does_not_exist_is_an_error_and_creates_nothing(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv(BUDGET_ENV, "1MiB")
    root = tmp_path / "never"
    for command in ("ls", "verify", "gc"):
        with pytest.raises(EffctxError) as caught:
            cli(command, "--dir", str(root))
        assert str(caught.value) == f"no snapshot store at {root} (the folder does not exist)"
    assert not root.exists()


def test_cli_default_dir_is_the_user_cache_dir(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setenv(BUDGET_ENV, "1MiB")
    SnapshotStore().put(ID, [1], b"x")
    assert (tmp_path / "cache" / "effctx" / "snapshots" / "blobs" / f"{key_for(ID, [1])}.snap").is_file()
    assert cli("ls", "--json") == 0
    assert json.loads(capsys.readouterr().out)["root"] == str(tmp_path / "cache" / "effctx" / "snapshots")


def test_gc_purges_quarantined_files_after_a_week(tmp_path):
    store = make_store(tmp_path)
    key = store.put(ID, [1], b"x").key
    store.blob_path(key).write_bytes(b"garbage")
    (old,) = (q.moved_to for q in store.verify().quarantined)
    fresh = store.quarantine_dir / "fresh.snap.checksum"
    fresh.write_bytes(b"")
    week_ago = time.time() - 7 * 86400 - 60
    os.utime(old, (week_ago, week_ago))
    assert store.gc().quarantine_purged == (os.path.basename(old),)
    assert [p.name for p in store.quarantine_dir.iterdir()] == ["fresh.snap.checksum"]
