"""The headless CLI as a user runs it: real processes, JSON contracts, exit codes."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers.cli import interruptible

EFFCTX = str(Path(sys.executable).with_name("effctx"))


def effctx(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([EFFCTX, *args], capture_output=True, text=True, timeout=timeout)


def test_info_json_has_the_model_facts_scripts_rely_on(default_model):
    out = effctx("info", "--json")
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    assert data["model"]["global_layers"] == [5, 11, 17]
    assert data["model"]["sliding_window"] == 512
    assert data["model"]["chat_template"] is None
    assert data["backend"]["name"] == "llama"
    assert {lim["name"] for lim in data["limits"]} == {"trained", "n_ctx"}
    assert all(lim["reason"] for lim in data["limits"])
    assert data["capabilities"]["position_shift"] is True


def test_info_text_lists_capabilities_and_limits(default_model):
    out = effctx("info")
    assert out.returncode == 0, out.stderr
    assert "global layers [5, 11, 17]" in out.stdout
    assert "context limits" in out.stdout


def test_run_json_reports_text_timings_and_token_accounting(default_model):
    out = effctx("run", "--prompt", "The capital of France is", "--max-tokens", "5", "--json")
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    assert set(data) >= {"text", "ttft_ms", "prefill_tps", "decode_tps", "tokens"}
    # The reply's last token is on the tape, pending: the cache holds the other 10.
    assert data["tokens"] == {"reused": 0, "prefilled": 6, "generated": 5, "resident": 10, "pending": 1, "n_ctx": 4096}
    assert data["text"].strip()
    assert data["ttft_ms"] > 0 and data["prefill_tps"] > 0 and data["decode_tps"] > 0


def test_run_reports_a_figure_only_for_what_it_timed(default_model):
    # asked for no token: none arrived, so there is no TTFT, only the prefill's rate
    out = effctx("run", "--prompt", "The capital of France is", "--max-tokens", "0")
    assert out.returncode == 0, out.stderr
    line = out.stderr.splitlines()[-1]
    assert re.fullmatch(r"-- 6 prefilled, 0 reused, 0 generated \(max_tokens\); prefill [\d,.]+ tok/s", line), line
    out = effctx("run", "--prompt", "The capital of France is", "--max-tokens", "0", "--json")
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    assert (data["ttft_ms"], data["decode_tps"], data["tokens"]["generated"]) == (None, 0.0, 0)


def test_run_reads_a_prompt_file_and_writes_a_trace(default_model, tmp_path):
    prompt = tmp_path / "prompt.txt"
    prompt.write_text("Notes:\nThe sky is blue.\n\nOnce upon a time", encoding="utf-8")
    trace = tmp_path / "run.jsonl"
    out = effctx("run", "--prompt-file", str(prompt), "--max-tokens", "3", "--trace", str(trace))
    assert out.returncode == 0, out.stderr
    events = [json.loads(line) for line in trace.read_text().splitlines()]
    kinds = [event["kind"] for event in events]
    assert kinds[0] == "session_opened" and kinds[-2:] == ["turn_finished", "node"]
    assert kinds.count("token") == 3
    assert [e["input_text"] for e in events if e["kind"] == "turn_started"] == ["Notes:\nThe sky is blue.\n\nOnce upon a time"]


@pytest.fixture
def bad_files(tmp_path):
    empty = tmp_path / "empty.gguf"
    empty.write_bytes(b"")
    text = tmp_path / "notes.gguf"
    text.write_text("this is not a model")
    binary = tmp_path / "bad.txt"
    binary.write_bytes(b"\xff\xfe\x00bad")
    long = tmp_path / "long.txt"
    long.write_text("word " * 600)
    nul = tmp_path / "nul.txt"
    nul.write_bytes(b"GGUF\0\0\0\3")
    huge = tmp_path / "huge.txt"
    huge.write_text("word " * 210_000)
    return {"empty": empty, "text": text, "binary": binary, "long": long, "nul": nul, "huge": huge, "dir": tmp_path}


BAD_INPUTS = {
    "missing model": (["run", "--model", "{dir}/absent.gguf", "--prompt", "hi"], "model file not found"),
    "empty model": (["run", "--model", "{empty}", "--prompt", "hi"], "model file is empty"),
    "non-GGUF model": (["info", "--model", "{text}"], "not a GGUF model file"),
    "missing prompt file": (["run", "--prompt-file", "{dir}/absent.txt"], "prompt file not found"),
    "prompt file is a directory": (["run", "--prompt-file", "{dir}"], "prompt file is a directory, not a file"),
    "prompt file not text": (["run", "--prompt-file", "{binary}"], "prompt file is not UTF-8 text"),
    "prompt file binary": (["run", "--prompt-file", "{nul}"], "prompt file is binary (it holds NUL bytes), not text"),
    "prompt file too large": (["run", "--prompt-file", "{huge}"], "prompt file is larger than 1 MiB (1,050,000 bytes)"),
    "prompt longer than n_ctx": (["run", "--prompt-file", "{long}", "--n-ctx", "256"], "context overflow in prefill"),
    "unknown option": (["run", "--prompt", "hi", "--bogus"], "unrecognized arguments"),
    "bench residency on no tokens": (["bench", "residency", "--tokens", "0"], "--tokens must be positive"),
    "bench cell without rounds": (["bench", "cell", "--rounds", "0"], "argument --rounds: 0 is out of range: it must be at least 1"),
    "bench cell depth past the end": (["bench", "cell", "--depths", "0.5,2"], "--depths must hold numbers from 0.0 to 1.0"),
    "bench keys on a tiny prompt": (["bench", "keys", "--prompt-tokens", "3"], "--prompt-tokens must be at least 16"),
    "bench keys of API traffic on a tiny prompt": (["bench", "keys", "--api-traffic", "--prompt-tokens", "3"],
                                                   "--prompt-tokens must be at least 16"),
    "bench keys unknown option": (["bench", "keys", "--bogus"], "unrecognized arguments: --bogus"),
    "bench keys of an unknown profile": (["bench", "keys", "--profile", "no-such-cell"], "unknown profile 'no-such-cell'"),
}


@pytest.mark.parametrize("case", list(BAD_INPUTS))
def test_bad_input_is_one_line_and_exit_2(case, bad_files, default_model):
    args, message = BAD_INPUTS[case]
    out = effctx(*[a.format(**bad_files) for a in args])
    assert out.returncode == 2
    assert out.stdout == ""
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1, out.stderr
    assert lines[0].startswith("effctx: error: ") and message in lines[0]
    assert "Traceback" not in out.stderr


def test_bench_overhead_holds_the_engine_against_the_raw_loop_and_the_library(default_model):
    out = effctx("bench", "overhead", "--prompt-tokens", "64", "--decode-tokens", "4", "--rounds", "3", "--json")
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    assert data["prompt_tokens"] >= 48 and data["rounds"] == 3
    assert data["library"]["name"] == "Llama.create_completion (llama-cpp-python)"
    assert data["raw"]["name"].startswith("llama_decode loop")
    engine = data["engine"]["per_round"]
    for side, prefix in (("raw", ""), ("library", "library_")):
        rounds = data[side]["per_round"]
        assert len(rounds) == 3 and all(r["prefill_tps"] > 0 and r["decode_tps"] > 0 for r in rounds)
        for rate in ("prefill", "decode"):
            # the median of the per-round ratios, not the ratio of the medians
            per_round = sorted(e[f"{rate}_tps"] / r[f"{rate}_tps"] for e, r in zip(engine, rounds))
            assert data[f"{prefix}{rate}_ratio"] == pytest.approx(per_round[1], rel=1e-3)


def test_bench_residency_prints_the_same_result_as_a_table_or_as_json():
    data = json.loads(effctx("bench", "residency", "--tokens", "4096", "--json").stdout)
    assert (data["n_tokens"], data["n_blocks"], data["width"], data["height"]) == (4096, 257, 120, 40)
    out = effctx("bench", "residency", "--tokens", "4096")
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert [line.split()[0] for line in lines] == list(data)
    assert lines[0] == "n_tokens                     4096"
    assert re.fullmatch(r"set_table {19} median +\d+\.\d{3} ms   p95 +\d+\.\d{3} ms", lines[6])


def test_info_json_has_the_layer_profile_and_a_capacity_table(default_model):
    out = effctx("info", "--json", "--memory", "512MiB")
    data = json.loads(out.stdout)
    layers = data["layer_profile"]
    assert (layers["global_layers"], layers["window"], layers["bytes_per_token_all_layers"]) == ([5, 11, 17], 512, 18432)
    assert layers["cache_bytes"] == 18432 * 4096
    rows = {(r["kv_cache_type_k"], r["kv_cache_type_v"]): r for r in data["capacity"]["rows"]}
    assert data["capacity"]["memory_bytes"] == 512 << 20
    assert rows[("f16", "f16")]["max_hot_tokens"] == 28928 and rows[("f16", "f16")]["binding"] == "memory"
    assert rows[("q8_0", "q8_0")]["needs_flash_attn"] and rows[("q8_0", "q8_0")]["binding"] == "model"


def test_ctrl_c_during_model_preparation_exits_130_and_leaves_no_file(tmp_path):
    env = {**os.environ, "XDG_DATA_HOME": str(tmp_path / "data"), "XDG_CACHE_HOME": str(tmp_path / "cache")}
    proc = interruptible("model", "prepare", stderr=subprocess.PIPE, env=env)
    assert proc.stderr.readline() == "assembling default model: 1%\n"
    proc.send_signal(signal.SIGINT)
    assert proc.wait(timeout=60) == 130
    assert proc.stderr.read().splitlines()[-1] == "effctx: interrupted"
    assert [p for p in (tmp_path / "data").rglob("*") if p.is_file()] == []


def test_bench_cell_reports_throughput_beside_the_passkey_smoke(default_model):
    out = subprocess.run([EFFCTX, "bench", "cell", "--prompt-tokens", "128", "--decode-tokens", "8", "--rounds", "1",
                          "--passkey-tokens", "384", "--depths", "0.5", "--json"], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    assert data["profile"] == "exact" and data["throughput"]["rounds"] == 1
    assert data["throughput"]["decode_tokens"] == 8 and data["throughput"]["prefill_ratio"] > 0
    assert (data["passkey"]["found"], data["passkey"]["trials_run"]) == (1, 1)
    assert data["passkey"]["trials"][0]["verdict"] == "found"
    assert data["summary"].endswith("passkey 1/1 found at 384 tokens")


def test_bench_help_lists_every_bench_command_and_each_runs_its_own_help():
    listed = effctx("bench", "--help").stdout
    names = ("residency", "keys", "overhead", "cell", "ttft", "run", "api", "verdict", "planner", "prefix-index")
    assert all(f"    {name} " in listed for name in names), listed
    for name in names:
        out = effctx("bench", name, "--help")
        assert out.returncode == 0 and out.stdout.startswith(f"usage: effctx bench {name}"), out.stderr

