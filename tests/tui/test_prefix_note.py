"""The transcript's first line after a stable prefix was loaded: what the cache did."""

from __future__ import annotations

from effctx_core.events.trace import PrefixCacheLookup
from effctx_tui.screens.session import prefix_note


def lookup(result: str, restored: int, key: str = "k") -> PrefixCacheLookup:
    return PrefixCacheLookup(result=result, tokens=2_400, ms=41.6, key=key, message="", restored=restored, t_ms=0.0)


def test_a_hit_says_every_token_was_restored():
    assert prefix_note("doc.txt", lookup("hit", 2_400)) == "doc.txt: 2,400 tokens restored from the prefix cache in 42 ms"


def test_a_partial_hit_says_how_many_were_restored_and_how_many_prefilled():
    assert prefix_note("doc.txt", lookup("partial", 2_000)) == (
        "doc.txt: 2,000 of 2,400 tokens restored from the prefix cache, 400 prefilled, in 42 ms, "
        "stored in the prefix cache")


def test_a_miss_says_the_prefix_was_prefilled_and_stored():
    assert prefix_note("doc.txt", lookup("miss", 0)) == "doc.txt: 2,400 tokens prefilled in 42 ms, stored in the prefix cache"


def test_one_token_is_singular_and_a_second_or_more_is_in_seconds():
    event = PrefixCacheLookup(result="hit", tokens=1, ms=1_250.0, key="k", message="", restored=1, t_ms=0.0)
    assert prefix_note("doc.txt", event) == "doc.txt: 1 token restored from the prefix cache in 1.25 s"
