"""Cells and live swap on the real default model."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from effctx_core.backends.profile_loader import load_profile
from effctx_core.contract import DecodeConfig
from effctx_core.engine import SessionEngine, SwapCancelled

EFFCTX = str(Path(sys.executable).with_name("effctx"))


def test_cells_lists_every_profile_on_every_backend(default_model):
    out = subprocess.run([EFFCTX, "cells", "--json"], capture_output=True, text=True, timeout=120)
    cells = {(c["backend"], c["profile"]): c for c in json.loads(out.stdout)["cells"]}
    assert {("llama", "exact"), ("llama", "fast-long"), ("llama", "q8"), ("llama", "streaming")} <= set(cells)
    assert cells[("llama", "fast-long")]["capabilities"]["position_shift"] is False
    assert cells[("llama", "streaming")]["reason"] == "the streaming policy keeps at most 1024 tokens resident and evicts the rest"
    assert {("openvino", "ov-exact"), ("openvino", "ov-prefix-cache"), ("openvino", "ov-evict")} <= set(cells)
    assert cells[("openvino", "ov-exact")]["capabilities"]["exact_snapshot"] is True
    assert cells[("openvino", "ov-prefix-cache")]["capabilities"]["state_snapshot"] is False
    assert cells[("openvino", "ov-evict")]["capabilities"]["residency_map"] == "modeled"
    assert cells[("openvino", "ov-evict")]["capabilities"]["reasons"]["residency_map"] == (
        "openvino-genai's scheduler owns the paged cache and reports its usage, not which blocks it kept")
    assert all(c["limits"] for c in cells.values() if c["runnable"])


@pytest.fixture
def engine(default_model):
    eng = SessionEngine(default_model, load_profile("exact").with_changes(n_ctx=1024))
    eng.open()
    yield eng
    eng.close()


def test_a_swap_within_the_same_identity_carries_the_state_over(engine):
    engine.complete("The capital of France is", DecodeConfig(max_tokens=4))
    expected = engine.complete(" And", DecodeConfig(max_tokens=6)).text
    node = engine.tree.current
    tape = engine.tape
    engine.restore_node(engine.tree.node(node).parent)
    result = engine.swap(load_profile("exact").with_changes(n_ctx=2048))
    assert (result.mode, result.recomputed) == ("exact", 0)
    assert engine.info.n_ctx == 2048
    assert engine.complete(" And", DecodeConfig(max_tokens=6)).text == expected
    assert engine.tape == tape


def test_a_swap_to_another_kv_type_recomputes_and_says_why(engine):
    engine.complete("The capital of France is", DecodeConfig(max_tokens=4))
    tape = engine.tape
    result = engine.swap(load_profile("q8").with_changes(n_ctx=1024))
    assert result.mode == "recompute" and result.recomputed == len(tape)
    assert result.reason == "other KV settings"
    assert "kv_settings.kv_cache_type_k 'f16' -> 'q8_0'" in result.details
    assert engine.tape == tape and list(engine.session.tokens) == list(tape)
    assert engine.complete(" Then", DecodeConfig(max_tokens=2)).reused == len(tape)
    assert len(engine.tree) == 3  # nothing of the tree is lost


def test_a_stale_cancel_does_not_stop_a_swap_half_way(engine):
    engine.complete("The grass is green. " * 150, DecodeConfig(max_tokens=2))
    tape = engine.tape
    engine.cancel()  # pressed after the turn ended
    result = engine.swap(load_profile("q8").with_changes(n_ctx=1024))
    assert result.mode == "recompute" and engine.tape == tape
    assert list(engine.session.tokens) == list(tape)


def test_a_cancelled_swap_closes_the_new_cell_and_keeps_the_conversation(engine):
    engine.complete("The grass is green. " * 150, DecodeConfig(max_tokens=2))
    tape = engine.tape
    kinds = []

    def cancel_at_the_first_chunk(event):
        kinds.append(event.kind)
        if event.kind == "prefill_chunk":
            engine.cancel()

    engine.subscribe(cancel_at_the_first_chunk)
    with pytest.raises(SwapCancelled, match=rf"^swap to q8 cancelled after recomputing 512 of {len(tape)} tokens; still on exact$"):
        engine.swap(load_profile("q8").with_changes(n_ctx=1024))
    assert kinds == ["prefill_chunk", "swap_cancelled"]
    assert engine.profile.name == "exact" and engine.info.identity.setting("kv_cache_type_k") == "f16"
    assert engine.tape == tape and list(engine.session.tokens) == list(tape)
    assert engine.complete(" Then", DecodeConfig(max_tokens=2)).reused == len(tape)


def test_a_conversation_swaps_llama_to_openvino_and_back_with_its_tape_and_tree(engine):
    engine.complete("The capital of France is", DecodeConfig(max_tokens=4))
    tape, nodes = engine.tape, len(engine.tree)
    to_openvino = engine.swap(load_profile("ov-exact").with_changes(n_ctx=1024))
    assert (to_openvino.mode, to_openvino.recomputed, engine.info.backend) == ("recompute", len(tape), "openvino")
    assert to_openvino.reason == "another backend"
    assert "backend 'llama' -> 'openvino'" in to_openvino.details
    assert engine.tape == tape and list(engine.session.tokens) == list(tape)
    turn = engine.complete(" Then", DecodeConfig(max_tokens=3))
    assert turn.reused == len(tape)
    longer = engine.tape
    back = engine.swap(load_profile("exact").with_changes(n_ctx=1024))
    assert (back.mode, back.recomputed, engine.info.backend) == ("recompute", len(longer), "llama")
    assert engine.tape == longer and len(engine.tree) == nodes + 1


def test_a_node_made_on_llama_is_recomputed_from_its_tokens_on_openvino(engine):
    engine.complete("The capital of France is", DecodeConfig(max_tokens=4))
    node = engine.tree.current
    engine.complete(" And", DecodeConfig(max_tokens=2))
    engine.reset()
    engine.complete("Something else entirely", DecodeConfig(max_tokens=2))
    engine.swap(load_profile("ov-exact").with_changes(n_ctx=1024))
    restore = engine.restore_node(node)
    # Both tapes start with the same BOS, which the cache keeps; the rest is recomputed.
    assert (restore.mode, restore.recomputed) == ("recompute", engine.tree.tape_length(node) - 1)
    assert restore.reason == "it was made by another runtime identity"
    assert engine.tape == engine.tree.tape(node)
