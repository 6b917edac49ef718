"""The OpenVINO backend beyond the conformance suite: its profile table, the conversion on
first use, exact snapshots of the stateful cache, the paged cache's size, the command line."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from effctx_core.backends.openvino.backend import OpenVINOBackend
from effctx_core.backends.openvino.capacity import block_bytes
from effctx_core.backends.openvino.convert import MANIFEST
from effctx_core.backends.openvino.paged import OpenVINOPagedSession
from effctx_core.backends.openvino.runtime import converted
from effctx_core.backends.openvino.settings import OpenVINOOptions, options_of
from effctx_core.backends.profile_loader import load_profile, profile_from_toml
from effctx_core.contract import DecodeConfig
from effctx_core.events.reader import read_trace
from effctx_core.events.trace import RuntimeCounted
from effctx_core.profiles import Profile, ProfileError
from tests.helpers.tiny_gguf import write_tiny_llama_gguf

EFFCTX = str(Path(sys.executable).with_name("effctx"))
BACKEND = OpenVINOBackend()
OV = 'backend = "openvino"\n'


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> Path:
    return write_tiny_llama_gguf(tmp_path_factory.mktemp("tiny") / "tiny.gguf")


def ov_profile(**options: object) -> Profile:
    return Profile(name="t", backend="openvino", n_ctx=256, n_batch=64, backend_options=OpenVINOOptions(**options))


@pytest.mark.parametrize("toml, message", [
    ('[openvino]\npipeline = "paged"', "[openvino] settings on a llama profile (set backend = 'openvino' or remove the table)"),
    (OV + "flash_attn = true", "flash_attn is a setting the openvino backend does not read"),
    (OV + 'kv_cache_type_k = "q8_0"', "unknown KV cache type 'q8_0' for K on openvino (known: f32, f16, bf16, u8, u4)"),
    (OV + "[openvino]\nnum_kv_blocks = 64",
     "openvino.num_kv_blocks configure the paged pipeline's scheduler; set openvino.pipeline = \"paged\" to use them"),
    (OV + 'kv_cache_type_v = "u4"', "a u4 cache crashes OpenVINO 2026.4's stateful path (segmentation fault at the "
                                    "first request, measured); use u8, or openvino.pipeline = \"paged\""),
    (OV + '[openvino]\npipeline = "paged"\nstart_size = 32\nrecent_size = 100\nmax_cache_size = 512',
     "openvino.recent_size 100 must be a multiple of 32 (openvino-genai evicts whole 32-token blocks)"),
    (OV + '[openvino]\npipeline = "paged"\nenable_prefix_caching = true\nstart_size = 32\nrecent_size = 64\n'
          'max_cache_size = 256',
     "openvino.enable_prefix_caching together with eviction leaks cache blocks in openvino-genai 2026.4 "
     "(\"BlockAllocator leaked blocks\"); use one or the other"),
    (OV + 'kv_cache_type_k = "u8"\n[openvino]\npipeline = "paged"',
     "the paged pipeline quantizes K and V together or not at all "
     "(openvino-genai: \"key_cache_type u8 with value_cache_type f16 is not support\")"),
    (OV + 'kv_cache_type_k = "f32"\nkv_cache_type_v = "f32"\n[openvino]\npipeline = "paged"',
     "the paged pipeline's CPU cache takes f16, bf16, u8 or u4, not f32"),
    (OV + '[openvino]\npipeline = "gpu"', "openvino.pipeline 'gpu' is not one of stateful, paged"),
    (OV + "[openvino]\nprefix = true", "unknown key openvino.prefix (known: pipeline, weights, inference_precision, "
                                       "num_kv_blocks, cache_size, enable_prefix_caching, start_size, recent_size, "
                                       "max_cache_size, aggregation_mode, sparse_prefill)"),
    (OV + "[openvino]\nnum_kv_blocks = true", "openvino.num_kv_blocks must be int, not bool"),
])
def test_invalid_openvino_profiles_are_refused_with_the_reason(toml, message):
    with pytest.raises(ProfileError) as err:
        profile_from_toml(toml, "bad", "profile 'bad'")
    assert str(err.value) == f"profile 'bad': {message}"


def test_the_built_in_openvino_profiles_are_valid():
    exact, cache, evict = (load_profile(n) for n in ("ov-exact", "ov-prefix-cache", "ov-evict"))
    exact_o, cache_o, evict_o = (options_of(p) for p in (exact, cache, evict))
    assert (exact.backend, exact_o.pipeline, exact.kv_cache_type_k) == ("openvino", "stateful", "f16")
    assert (cache_o.pipeline, cache_o.enable_prefix_caching) == ("paged", True)
    assert (evict_o.max_cache_size, evict_o.start_size) == (1024, 32)


def test_describe_converts_nothing_and_says_what_the_first_open_costs(tiny, tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    profile = ov_profile()
    info = BACKEND.describe(tiny, profile)
    assert info.capabilities.notes["model"].startswith("not converted yet: the first open converts the GGUF")
    assert not (tmp_path / "data" / "effctx" / "openvino").exists()
    assert BACKEND.pending_preparation(tiny, profile) is not None
    stages = []
    BACKEND.prepare(tiny, profile, lambda stage, done, total: stages.append(stage))
    assert "writing the IR" in stages and BACKEND.pending_preparation(tiny, profile) is None


@pytest.mark.parametrize("damage, problem", [
    ("deleted", "has no openvino_model.bin"),
    ("truncated", "is damaged: openvino_model.bin has 100 bytes, its manifest says {size}"),
    ("unrecorded", "has no record of its files' sizes (an older effctx wrote it)"),
])
def test_the_first_use_converts_a_damaged_ir_again_and_says_why(tiny, tmp_path, monkeypatch, damage, problem):
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    profile = ov_profile()
    ir = converted(tiny, profile)
    weights = ir.xml.with_suffix(".bin")
    size = weights.stat().st_size
    if damage == "deleted":
        weights.unlink()
    elif damage == "truncated":
        weights.write_bytes(weights.read_bytes()[:100])
    else:  # a manifest as effctx wrote them before it recorded the files
        manifest = json.loads((ir.path / MANIFEST).read_text())
        del manifest["files"]
        (ir.path / MANIFEST).write_text(json.dumps(manifest))
    assert BACKEND.pending_preparation(tiny, profile) == (
        f"converts the GGUF to OpenVINO IR again, since the converted model {ir.path} {problem.format(size=size)} "
        "(about 25 s and 3.5 GB of memory for the default model)")
    BACKEND.open(tiny, profile).close()
    assert weights.stat().st_size == size and BACKEND.pending_preparation(tiny, profile) is None


def test_a_restored_f16_state_gives_the_very_logits_of_the_original(tiny):
    session = BACKEND.open(tiny, ov_profile())
    try:
        session.ensure_prefix(session.tokenize("one two three four five six seven", True))
        snap = session.snapshot()
        first = [c.token for c in session.decode(DecodeConfig(max_tokens=8))]
        logits_after = session._logits.copy()
        session.restore(snap)
        assert [c.token for c in session.decode(DecodeConfig(max_tokens=8))] == first
        assert np.array_equal(session._logits, logits_after)
        # f16 in the cache, f16 in the snapshot: 2 bytes per element, not query_state's 4
        facts = session.info.facts
        elements = facts.n_layers * facts.n_head_kv * (facts.head_dim_k + facts.head_dim_v) * snap.n_tokens
        assert 2 * elements <= len(snap.state) < 2 * elements + 16_384
    finally:
        session.close()


@pytest.mark.parametrize("kind", ["u8", "f16"])
def test_the_paged_cache_size_is_the_modeled_one(tiny, kind):
    session = BACKEND.open(tiny, ov_profile(pipeline="paged", num_kv_blocks=16).with_changes(
        kv_cache_type_k=kind, kv_cache_type_v=kind))
    try:
        assert isinstance(session, OpenVINOPagedSession)
        session.ensure_prefix(session.tokenize("the cache is allocated at the first request", True))
        list(session.decode(DecodeConfig(max_tokens=1)))
        measured = session._pipeline.get_metrics().kv_cache_size_in_bytes
        assert measured == 16 * block_bytes(session.info, kind, kind)
    finally:
        session.close()


@pytest.fixture
def prefix_cached(tiny):
    """A paged session with the pipeline's prefix cache, a 192-token prompt prefilled in
    three 64-token scheduler steps."""
    session = BACKEND.open(tiny, ov_profile(pipeline="paged", enable_prefix_caching=True))
    assert isinstance(session, OpenVINOPagedSession)
    prompt = session.tokenize("the pipeline keeps whole blocks of an earlier prompt " * 20, True)[:192]
    assert len(prompt) == 192 and scheduler_steps(session, prompt) == 3
    try:
        yield session, prompt
    finally:
        session.close()


def scheduler_steps(session: OpenVINOPagedSession, prompt: list[int]) -> int:
    """How many scheduler steps ensure_prefix took to make `prompt` resident: one per
    prefill chunk the pipeline computed, none for the blocks its prefix cache served."""
    chunks: list[object] = []
    session.ensure_prefix(prompt, chunks.append)
    return len(chunks)


def test_a_paged_session_cut_back_to_a_shared_start_reuses_the_pipelines_blocks(prefix_cached):
    session, prompt = prefix_cached
    session.ensure_prefix(prompt[:1])
    assert scheduler_steps(session, prompt) == 1


def test_a_paged_session_emptied_starts_cold_with_nothing_of_the_pipelines_cache(prefix_cached):
    session, prompt = prefix_cached
    session.ensure_prefix([])
    assert scheduler_steps(session, prompt) == 3


def test_run_on_an_openvino_profile_answers_on_the_command_line(tiny):
    out = subprocess.run([EFFCTX, "run", "--profile", "ov-exact", "--model", str(tiny), "--n-ctx", "256",
                          "--max-tokens", "4", "--prompt", "Hello", "--json"], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    tokens = json.loads(out.stdout)["tokens"]
    assert (tokens["prefilled"], tokens["resident"] + tokens["pending"], tokens["n_ctx"]) == (2, 2 + tokens["generated"], 256)


def test_bench_ttft_reports_each_profile_with_the_answer_beside(tiny):
    out = subprocess.run([EFFCTX, "bench", "ttft", "--profile", "ov-exact,ov-prefix-cache", "--model", str(tiny),
                          "--n-ctx", "512", "--lengths", "128", "--json"], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    exact, paged = json.loads(out.stdout)
    assert (exact["profile"], paged["profile"]) == ("ov-exact", "ov-prefix-cache")
    assert exact["cold"]["prefilled"] == exact["prompt_tokens"] and isinstance(exact["cold"]["found"], bool)
    assert exact["warm_snapshot"]["reused"] > 0 and "restored" in exact["snapshot_note"]
    assert paged["warm_snapshot"] is None and "no KV state API" in paged["snapshot_note"]
    # A paged cache takes whole 32-token blocks as the prompt needs them.
    info = BACKEND.describe(tiny, load_profile("ov-prefix-cache").with_changes(n_ctx=512))
    assert paged["memory"]["kv_modeled"] == -(-paged["prompt_tokens"] // 32) * block_bytes(info, "u8", "u8")


def test_info_on_an_openvino_profile_prints_the_paged_block_size(tiny):
    out = subprocess.run([EFFCTX, "info", "--profile", "ov-prefix-cache", "--model", str(tiny), "--n-ctx", "512"],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    info = BACKEND.describe(tiny, load_profile("ov-prefix-cache").with_changes(n_ctx=512))
    assert f"KV cache     u8/u8: {block_bytes(info, 'u8', 'u8'):,} B per 32-token block" in out.stdout


def test_the_trace_shows_the_pipelines_own_counts_beside_effctxs(tiny, tmp_path):
    trace = tmp_path / "run.jsonl"
    out = subprocess.run([EFFCTX, "run", "--profile", "ov-prefix-cache", "--model", str(tiny), "--n-ctx", "512",
                          "--max-tokens", "5", "--prompt", "Once upon a time", "--trace", str(trace)],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    events = [json.loads(line) for line in trace.read_text().splitlines()]
    counted = [e for e in events if e["kind"] == "runtime_counted"]
    finished = next(e for e in events if e["kind"] == "turn_finished")["result"]
    assert len(counted) == 1 and counted[0]["agree"] is True
    counts = counted[0]["counts"]
    assert counts["generated_tokens"] == counts["counted_generated_tokens"] == finished["generated"]
    assert counts["input_tokens"] == finished["prefilled"]
    read = [e for e in read_trace(trace).events if isinstance(e, RuntimeCounted)]
    assert len(read) == 1 and read[0].counts.agree and read[0].counts.generated_tokens == finished["generated"]


@pytest.mark.parametrize("mode", ["trishape", "xattention"])
def test_sparse_prefill_runs_on_the_paged_pipeline(tiny, mode):
    session = BACKEND.open(tiny, ov_profile(pipeline="paged", sparse_prefill=mode).with_changes(n_batch=256))
    try:
        session.ensure_prefix(session.tokenize("word " * 200, True))
        chunks = list(session.decode(DecodeConfig(max_tokens=3)))
        assert len(chunks) == 3 and session.explain().runtime_counts.agree
    finally:
        session.close()
