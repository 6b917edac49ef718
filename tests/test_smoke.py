"""`effctx smoke passkey` on the default model: both outcomes, told apart."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

EFFCTX = str(Path(sys.executable).with_name("effctx"))

STREAMING_512 = """
n_ctx = 1024
[residency]
policy = "streaming"
sink_tokens = 4
recent_tokens = 508
budget = 512
block_size = 4
"""


def smoke(*args: str) -> dict:
    out = subprocess.run([EFFCTX, "smoke", "passkey", *args, "--json"], capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def test_a_streaming_window_that_misses_the_needle_fails_and_says_so(tmp_path, default_model):
    profile = tmp_path / "stream512.toml"
    profile.write_text(STREAMING_512)
    data = smoke("--profile", str(profile), "--lengths", "1024", "--depths", "0.3,0.85")
    missed, kept = data["trials"]
    assert data["policy"] == "streaming" and data["trials_run"] == 2
    assert (missed["depth"], missed["correct"], missed["needle_resident"], missed["verdict"]) == (0.3, False, False, "needle evicted")
    assert (kept["depth"], kept["correct"], kept["needle_resident"], kept["verdict"]) == (0.85, True, True, "found")
    assert missed["evicted_tokens"] > 0
    assert missed["key"] == kept["key"] and kept["answer"].startswith(kept["key"])


def test_without_eviction_the_key_is_found_and_resident(default_model):
    data = smoke("--lengths", "512", "--depths", "0.5")
    (trial,) = data["trials"]
    assert set(trial) >= {"length", "depth", "answer", "correct", "needle_resident"}
    assert (trial["length"], trial["correct"], trial["needle_resident"], trial["evicted_tokens"]) == (512, True, True, 0)
    assert 400 < trial["prompt_tokens"] <= 520


def test_bad_smoke_arguments_are_one_line_errors():
    out = subprocess.run([EFFCTX, "smoke", "passkey", "--depths", "1.5"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 2
    assert out.stderr.strip() == "effctx: error: --depths must hold numbers from 0.0 to 1.0, not '1.5'"
