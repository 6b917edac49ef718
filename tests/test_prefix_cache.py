"""The prefix snapshot cache across processes: `effctx run --prefix-file` twice."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from effctx_core.backends.profile_loader import load_profile
from effctx_core.contract import DecodeConfig
from effctx_core.engine import PrefillCancelled, SessionEngine
from effctx_core.snapshots import SnapshotStore

EFFCTX = str(Path(sys.executable).with_name("effctx"))
QUESTION = " What colour is the grass?"


@pytest.fixture
def prefix_file(tmp_path) -> Path:
    f = tmp_path / "doc.txt"
    f.write_text("Notes. " + "The grass is green. The sky is blue. " * 60, encoding="utf-8")
    return f


@pytest.fixture
def cache_home(tmp_path, default_model) -> dict:
    env = dict(os.environ, XDG_CACHE_HOME=str(tmp_path / "cache"))
    return env


def run(env: dict, *args: str) -> tuple[dict, str]:
    out = subprocess.run([EFFCTX, "run", "--max-tokens", "4", "--json", *args], capture_output=True, text=True,
                         timeout=300, env=env)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout), out.stderr


def blob_files(env: dict) -> list[Path]:
    return sorted((Path(env["XDG_CACHE_HOME"]) / "effctx" / "snapshots" / "blobs").glob("*"))


def test_the_second_run_restores_the_prefix_instead_of_prefilling_it(cache_home, prefix_file):
    first, _ = run(cache_home, "--prefix-file", str(prefix_file), "--prompt", QUESTION)
    second, _ = run(cache_home, "--prefix-file", str(prefix_file), "--prompt", QUESTION)
    prefix_tokens = first["prefix"]["tokens"]
    question_tokens = 6
    assert (first["cache"], first["tokens"]["reused"]) == ("miss", 0)
    assert first["tokens"]["prefilled"] == prefix_tokens + question_tokens
    assert (second["cache"], second["tokens"]["reused"], second["tokens"]["prefilled"]) == (
        "hit", prefix_tokens, question_tokens)
    assert second["prefix"]["key"] == first["prefix"]["key"]
    assert second["text"] == first["text"]  # the restored state continues exactly


def test_a_prefix_file_grown_at_its_end_restores_the_stored_part_and_prefills_the_rest(cache_home, prefix_file):
    prefix_file.write_text(prefix_file.read_text(encoding="utf-8") + "\n", encoding="utf-8")
    first, _ = run(cache_home, "--prefix-file", str(prefix_file), "--prompt", QUESTION)
    prefix_file.write_text(prefix_file.read_text(encoding="utf-8") + "More notes follow.\n", encoding="utf-8")
    grown, _ = run(cache_home, "--prefix-file", str(prefix_file), "--prompt", QUESTION)
    again, _ = run(cache_home, "--prefix-file", str(prefix_file), "--prompt", QUESTION)
    stored, added, question_tokens = first["prefix"]["tokens"], grown["prefix"]["tokens"] - first["prefix"]["tokens"], 6
    assert added > 0
    assert (grown["cache"], grown["prefix"]["restored"]) == ("partial", stored)
    assert (grown["tokens"]["reused"], grown["tokens"]["prefilled"]) == (stored, added + question_tokens)
    assert grown["prefix"]["key"] != first["prefix"]["key"]  # the whole grown prefix is stored too
    assert (again["cache"], again["prefix"]["key"], again["tokens"]["reused"]) == (
        "hit", grown["prefix"]["key"], grown["prefix"]["tokens"])
    assert again["text"] == grown["text"]  # restoring part and prefilling the rest continues exactly


def test_no_prefix_cache_prefills_and_stores_nothing(cache_home, prefix_file):
    data, _ = run(cache_home, "--prefix-file", str(prefix_file), "--prompt", QUESTION, "--no-prefix-cache")
    assert data["cache"] == "off" and data["tokens"]["reused"] == 0
    assert blob_files(cache_home) == []


def test_another_profile_misses_the_cache(cache_home, prefix_file):
    run(cache_home, "--prefix-file", str(prefix_file), "--prompt", QUESTION)
    data, _ = run(cache_home, "--prefix-file", str(prefix_file), "--prompt", QUESTION, "--profile", "q8")
    assert data["cache"] == "miss"


def test_a_corrupt_entry_is_never_restored(cache_home, prefix_file):
    run(cache_home, "--prefix-file", str(prefix_file), "--prompt", QUESTION)
    (blob,) = blob_files(cache_home)
    raw = bytearray(blob.read_bytes())
    raw[len(raw) // 2] ^= 0xFF
    blob.write_bytes(bytes(raw))
    data, stderr = run(cache_home, "--prefix-file", str(prefix_file), "--prompt", QUESTION)
    assert data["cache"] == "miss"
    lines = stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("effctx: prefix cache entry not used (snapshot ")
    assert "is corrupt" in lines[0] and lines[0].endswith("prefilling instead")
    quarantine = Path(cache_home["XDG_CACHE_HOME"]) / "effctx" / "snapshots" / "quarantine"
    assert len(list(quarantine.iterdir())) >= 1
    again, _ = run(cache_home, "--prefix-file", str(prefix_file), "--prompt", QUESTION)
    assert again["cache"] == "hit"  # the miss stored a fresh entry


def test_an_unwritable_cache_is_one_line_and_the_run_goes_on(tmp_path, prefix_file, default_model):
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("a file where the cache dir should be")
    env = dict(os.environ, XDG_CACHE_HOME=str(blocker))
    data, stderr = run(env, "--prefix-file", str(prefix_file), "--prompt", QUESTION)
    assert data["cache"] == "miss" and data["text"]
    warnings = [line for line in stderr.splitlines() if line.startswith("effctx: prefix cache not written")]
    assert len(warnings) == 1 and warnings[0].endswith("running without it")


def test_a_cancelled_prefix_load_leaves_an_empty_session_and_stores_nothing(default_model, tmp_path):
    store = SnapshotStore(tmp_path / "store")
    engine = SessionEngine(default_model, load_profile("exact").with_changes(n_ctx=2048), prefix_cache=store)
    engine.open()
    engine.subscribe(lambda e: engine.cancel() if e.kind == "prefill_chunk" else None)
    try:
        with pytest.raises(PrefillCancelled, match=r"^prefill cancelled after 512 of \d+ tokens$"):
            engine.load_prefix("The grass is green. " * 150)
        assert engine.tape == () and engine.residency_report().n_tokens == 0
        assert store.ls() == []
        result = engine.complete("Hello", DecodeConfig(max_tokens=1))
        assert result.reused == 0 and result.dropped == 512
    finally:
        engine.close()
