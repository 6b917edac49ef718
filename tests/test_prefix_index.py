"""The prefix index as specifications, the store's use of it, and the pure eviction policy."""

from __future__ import annotations

import json
from types import MappingProxyType

from hypothesis import given, settings
from hypothesis import strategies as st

from effctx_core.snapshots import SnapshotStore, key_for, token_hash
from effctx_core.snapshots.eviction import EvictionPlan, plan_eviction
from effctx_core.snapshots.index import IndexRecord
from effctx_core.snapshots.prefix_index import PrefixIndex
from effctx_core.snapshots.stored_prefixes import StoredPrefixes
from tests.helpers.identities import identity

ID = identity().digest()
OTHER_ID = identity(n_batch=64).digest()
B = 4  # a small block, so lists cross many block boundaries


def truth(stored: dict[str, tuple[int, ...]]):
    """The owner's check: does `value` hold exactly tokens[:n]?"""
    def check(tokens):
        return lambda value, n: stored[value] == tuple(tokens[:n])
    return check


def indexed(lists: dict[str, tuple[int, ...]], block_size: int = B, block_hash=None, space: str = "s"):
    index: PrefixIndex[str] = PrefixIndex(block_size) if block_hash is None else PrefixIndex(block_size, block_hash)
    for value, tokens in lists.items():
        index.add(space, tokens, value)
    return index


def longest(index: PrefixIndex, lists: dict, tokens, space: str = "s", **kw):
    return index.longest(space, tokens, truth(lists)(tokens), **kw)


# --------------------------------------------------------------------------- the index


def test_the_longest_stored_prefix_wins_whatever_the_lengths():
    seq = tuple(range(100, 140))
    lists = {"a": seq[:3], "b": seq[:8], "c": seq[:13], "d": seq[:21], "x": seq[:17] + (9, 9)}
    index = indexed(lists)
    assert longest(index, lists, seq) == ("d", 21)
    assert longest(index, lists, seq[:20]) == ("c", 13)  # d is longer than the prompt
    assert longest(index, lists, seq[:13]) == ("c", 13)  # a whole prompt counts
    assert longest(index, lists, seq[:12]) == ("b", 8)  # ends on a block boundary
    assert longest(index, lists, seq[:5]) == ("a", 3)
    assert longest(index, lists, seq[:2]) is None
    assert longest(index, lists, seq[:17] + (9, 9, 1)) == ("x", 19)  # the branch diverging in a tail
    assert [n for n, _ in index.candidates("s", seq)] == [21, 13, 8, 3]


def test_a_list_shorter_than_a_block_is_found_by_its_tail():
    lists = {"one": (7,), "two": (7, 8), "empty": ()}
    index = indexed(lists, block_size=64)
    assert longest(index, lists, (7, 8, 9)) == ("two", 2)
    assert longest(index, lists, (7, 5)) == ("one", 1)
    assert longest(index, lists, (5,)) == ("empty", 0)
    assert longest(index, lists, (5,), min_tokens=1) is None


def test_a_changed_token_is_not_matched_in_a_full_block_or_in_a_tail():
    lists = {"a": tuple(range(10))}
    index = indexed(lists)
    for at in (0, 5, 9):  # first block, a later block, the tail
        prompt = list(range(12))
        prompt[at] = 99
        assert longest(index, lists, prompt) is None


def test_a_block_hash_collision_is_not_trusted_the_tokens_decide():
    # Every block hashes alike at one depth: any two lists of as many blocks collide.
    by_depth = lambda parent, block: parent + 1  # noqa: E731
    lists = {"a": (1, 2, 3, 4, 5, 6, 7, 8, 0), "b": (9, 9, 9, 9, 8, 8, 8, 8, 0)}
    index = indexed(lists, block_hash=by_depth)
    assert longest(index, lists, (5, 5, 5, 5, 6, 6, 6, 6, 0)) is None  # hashes like both, is neither
    assert longest(index, lists, lists["b"] + (1,)) == ("b", 9)
    assert longest(index, lists, lists["a"]) == ("a", 9)
    # Without the owner's check the walk alone would have named them:
    assert [n for n, _ in index.candidates("s", (5, 5, 5, 5, 6, 6, 6, 6, 0))] == [9]


def test_a_collision_with_a_link_of_another_prefix_is_left_out_never_misread():
    constant = lambda parent, block: 42  # noqa: E731  every link collides with every other
    lists = {"short": (1, 2, 3, 4), "long": (1, 2, 3, 4, 5, 6, 7, 8, 9)}
    index = indexed(lists, block_hash=constant)
    assert "long" in index and len(index) == 2
    assert longest(index, lists, lists["long"]) == ("short", 4)  # long is out of the chain: a miss, not a lie
    index.remove("long")
    index.remove("short")
    assert index.links() == 0


def test_spaces_are_kept_apart():
    lists = {"mine": (1, 2, 3, 4, 5)}
    index = indexed(lists, space=ID)
    assert longest(index, lists, (1, 2, 3, 4, 5, 6), space=ID) == ("mine", 5)
    assert longest(index, lists, (1, 2, 3, 4, 5, 6), space=OTHER_ID) is None
    index.add(OTHER_ID, (1, 2), "theirs")
    lists["theirs"] = (1, 2)
    assert longest(index, lists, (1, 2, 3, 4, 5, 6), space=OTHER_ID) == ("theirs", 2)
    assert longest(index, lists, (1, 2, 3), space=ID) is None


def test_removal_forgets_a_list_and_frees_the_links_nobody_else_holds():
    seq = tuple(range(30))
    lists = {"a": seq[:10], "b": seq[:25], "c": seq[:6]}
    index = indexed(lists)
    assert index.links() == 6  # b's 6 full blocks; a and c share the first ones
    index.remove("b")
    assert longest(index, lists, seq) == ("a", 10)
    assert index.links() == 2
    index.remove("a")
    index.remove("c")
    index.remove("c")  # removing what is not there is no error
    assert len(index) == 0 and index.links() == 0
    assert longest(index, lists, seq) is None


def test_adding_a_value_again_replaces_what_it_held():
    index: PrefixIndex[str] = PrefixIndex(B)
    index.add("s", (1, 2, 3, 4, 5), "v")
    index.add("s", (6, 7), "v")
    lists = {"v": (6, 7)}
    assert longest(index, lists, (1, 2, 3, 4, 5)) is None
    assert longest(index, lists, (6, 7, 8)) == ("v", 2)


def test_extend_chains_a_child_after_its_parent_and_outlives_it():
    index: PrefixIndex[str] = PrefixIndex(B)
    index.add("s", (1, 2, 3), "root")
    index.extend("root", (4, 5, 6), "child")
    index.extend("child", (), "same")
    index.extend("child", tuple(range(7, 20)), "grandchild")
    lists = {"root": (1, 2, 3), "child": (1, 2, 3, 4, 5, 6), "same": (1, 2, 3, 4, 5, 6),
             "grandchild": (1, 2, 3, 4, 5, 6) + tuple(range(7, 20))}
    assert index.n_tokens("grandchild") == 19
    assert [(n, set(v)) for n, v in index.candidates("s", lists["grandchild"])] == [
        (19, {"grandchild"}), (6, {"child", "same"}), (3, {"root"})]
    index.remove("child")
    assert longest(index, lists, lists["grandchild"] + (0,)) == ("grandchild", 19)
    assert longest(index, lists, (1, 2, 3, 4, 5, 6, 0)) == ("same", 6)


@settings(max_examples=80, deadline=None)
@given(lists=st.lists(st.lists(st.integers(0, 2), max_size=14), min_size=1, max_size=12),
       prompt=st.lists(st.integers(0, 2), max_size=16), gone=st.sets(st.integers(0, 11)),
       block_size=st.integers(1, 5))
def test_the_index_agrees_with_a_scan_of_every_stored_list(lists, prompt, gone, block_size):
    stored = {f"v{i}": tuple(tokens) for i, tokens in enumerate(lists)}
    index = indexed(stored, block_size=block_size)
    for i in gone:
        index.remove(f"v{i}")
        stored.pop(f"v{i}", None)
    fits = [len(t) for t in stored.values() if tuple(prompt[: len(t)]) == t]
    found = longest(index, stored, prompt)
    if not fits:
        assert found is None
    else:
        assert found is not None and found.n_tokens == max(fits) and stored[found.value] == tuple(prompt[: max(fits)])


# --------------------------------------------------------------------------- the store's prefix index


def test_a_store_reopened_finds_prefixes_from_its_blobs_and_follows_other_writers(tmp_path):
    seq = list(range(1000, 1300))
    writer = SnapshotStore(tmp_path / "store", 1 << 30)
    k100 = writer.put(ID, seq[:100], b"a").key
    k250 = writer.put(ID, seq[:250], b"b").key
    reader = SnapshotStore(tmp_path / "store", 1 << 30)
    assert reader.longest_prefix(ID, seq) == (k250, 250)  # built from the blobs' token lists
    writer.rm(k250)
    k260 = writer.put(ID, seq[:260], b"c").key
    assert reader.longest_prefix(ID, seq) == (k260, 260)
    assert reader.longest_prefix(ID, seq[:259]) == (k100, 100)
    assert reader.longest_prefix(OTHER_ID, seq) is None


def test_a_blob_whose_tokens_do_not_check_out_is_never_a_prefix_match(tmp_path):
    seq = list(range(50))
    writer = SnapshotStore(tmp_path / "store", 1 << 30)
    k10 = writer.put(ID, seq[:10], b"a").key
    k40 = writer.put(ID, seq[:40], b"b").key
    path = writer.blob_path(k40)
    raw = bytearray(path.read_bytes())
    raw[232 + 4 * 20] ^= 0xFF  # a token of the blob, under the token hash
    path.write_bytes(bytes(raw))
    assert SnapshotStore(tmp_path / "store", 1 << 30).longest_prefix(ID, seq) == (k10, 10)


def test_the_store_trusts_a_candidate_only_by_its_token_hash():
    stored = (5,) * 9
    key = key_for(ID, stored)
    records = {key: IndexRecord(ID, 9, token_hash(stored), 300, 0.0, 0.0, 1, {})}
    prefixes = StoredPrefixes(lambda k: stored if k == key else None)
    prefixes.index = PrefixIndex(4, lambda parent, block: parent + 1)  # every block alike at a depth
    assert prefixes.longest(ID, (6,) * 9, records) is None
    assert prefixes.longest(ID, stored + (1,), records) == (key, 9)
    assert prefixes.longest(OTHER_ID, stored, records) is None


# --------------------------------------------------------------------------- the eviction policy


def record(n_bytes: int, use: int) -> IndexRecord:
    return IndexRecord(ID, 1, "0" * 64, n_bytes, 0.0, 0.0, use, {})


def test_the_eviction_policy_is_pure_typed_records_in_a_plan_out():
    records = MappingProxyType({"a": record(100, 3), "b": record(100, 1), "c": record(100, 2), "d": record(100, 4)})
    before = dict(records)
    plan = plan_eviction(records, referenced={"b", "d"}, incoming=150, budget=300)
    assert plan == EvictionPlan(("c", "a"), 200, 200, 150, 300) and not plan.fits  # b and d are referenced
    assert plan_eviction(records, {"b", "d"}, 150, 300) == plan  # the same input, the same plan
    assert dict(records) == before
    fits = plan_eviction(records, set(), incoming=150, budget=300)
    assert (fits.victims, fits.freed_bytes, fits.kept_bytes, fits.fits) == (("b", "c", "a"), 300, 100, True)
    assert plan_eviction(records, set(), 0, 400).victims == ()
    assert plan_eviction(records, set(), 100, 400, keep="d").victims == ()  # d replaces itself


def test_the_eviction_policy_breaks_ties_in_index_order():
    records = {f"k{i}": record(10, 1) for i in range(5)}
    assert plan_eviction(records, set(), 0, 30).victims == ("k0", "k1")


# --------------------------------------------------------------------------- effctx bench prefix-index


def test_bench_prefix_index_times_both_ways_in_memory_and_they_agree(tmp_path, monkeypatch, capsys):
    from effctx_core.cli import bench as bench_command
    from effctx_core.cli.options import OneLineParser

    monkeypatch.setenv("EFFCTX_MEASURING", str(tmp_path / "measuring"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    parser = OneLineParser(prog="effctx")
    bench_command.add_parser(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["bench", "prefix-index", "--states", "250", "--tokens", "3000", "--lookups", "8", "--json"])
    assert bench_command.run(args) == 0
    report = json.loads(capsys.readouterr().out)
    assert (report["states"], report["conversations"], report["tokens"], report["lookups"]) == (250, 3, 3000, 8)
    assert report["agree"] is True
    assert set(report["prefix_index"]) == {"median_ms", "p95_ms"}
    assert report["stored_lengths"]["distinct_lengths"] > 200
    assert not (tmp_path / "cache" / "effctx" / "snapshots").exists()  # nothing written to a store
