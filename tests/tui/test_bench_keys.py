"""`effctx bench keys` without a model: its options reach the run, and its table says
which mode ran (the real runs are in the README)."""

from __future__ import annotations

import json

from effctx_core.backends.profile_loader import load_profile
from effctx_tui.bench import keys

RESULT = {
    "mode": "api-traffic", "keys": {"n": 30, "median_ms": 15.4, "p95_ms": 24.7, "max_ms": 72.2}, "keys_sent": 30,
    "keys_sent_during_prefill": 30, "keys_never_shown": 0, "prompt_tokens_prefilled": 8191, "prefill_ms": 146218.6,
    "turn_ms": 146914.7, "profile": "fast-long", "n_ctx": 10240, "threads": 2,
}


def test_api_traffic_and_the_prompt_size_reach_the_run(monkeypatch, capsys):
    runs = []
    monkeypatch.setattr(keys, "run_keys_benchmark", lambda *args: runs.append(args) or RESULT)
    assert keys.main(["--api-traffic", "--prompt-tokens", "64", "--profile", "fast-long", "--json"]) == 0
    assert runs == [(64, True, load_profile("fast-long"))]
    assert json.loads(capsys.readouterr().out) == RESULT


def test_without_api_traffic_the_console_types_the_prompt(monkeypatch):
    runs = []
    monkeypatch.setattr(keys, "run_keys_benchmark", lambda *args: runs.append(args) or {**RESULT, "mode": "console"})
    assert keys.main(["--json"]) == 0
    assert runs == [(8192, False, load_profile(None))]


def test_the_table_says_which_mode_ran_and_times_the_clients_request():
    assert keys._table(RESULT) == [
        "mode: api-traffic (the prompt sent by an openai client through the console's endpoint)",
        "prefill: 8,191 tokens in 146 s (fast-long, n_ctx 10,240, 2 threads; whole request 147 s)",
        "keys: 30 sent 100 ms apart, 30 of them while the request ran, 0 never shown",
        "key -> on screen: median 15 ms   p95 25 ms   max 72 ms   (target < 100 ms)",
    ]
