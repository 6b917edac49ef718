"""KV capacity: the byte arithmetic, and llama.cpp's own sizes on the default model."""

from __future__ import annotations

import ctypes
import json
import re
from contextlib import contextmanager
from typing import NamedTuple

import pytest

from effctx_core.backends.gguf import runtime as llama_runtime
from effctx_core.backends.gguf.binding import llama_cpp
from effctx_core.backends.gguf.capacity import (
    CACHE_TYPE_BLOCKS,
    CELL_META_BYTES,
    LayerKVProfile,
    capacity_table,
    hot_context,
    layer_profile_dict,
)
from effctx_core.backends.gguf.context import KV_CACHE_TYPES
from effctx_core.backends.llama.backend import LlamaBackend
from effctx_core.backends.llama.settings import LlamaOptions
from effctx_core.capacity import KVBytes
from effctx_core.contract import ModelFacts
from effctx_core.errors import EffctxError
from effctx_core.profiles import Profile
from effctx_core.units import parse_memory

MiB, GiB = 1 << 20, 1 << 30


def gemma_facts(**changes) -> ModelFacts:
    """Gemma 3 270M as the KV arithmetic sees it (checked against the real file below)."""
    fields = dict(
        path="gemma.gguf", name="gemma", architecture="gemma3", file_bytes=0, sha256="0" * 64,
        n_layers=18, n_head=4, n_head_kv=1, head_dim_k=256, head_dim_v=256, n_embd=640,
        context_length=32768, sliding_window=512, global_layers=(5, 11, 17),
        global_layers_rule="gemma3", vocab_size=262144, bos_token_id=2, eos_token_id=1,
        add_bos=True, chat_template=None,
    )
    fields.update(changes)
    return ModelFacts(**fields)


def gemma(k: str = "f16", v: str = "f16", **changes) -> LayerKVProfile:
    return LayerKVProfile.from_facts(gemma_facts(**changes), k, v)


# --------------------------------------------------------------------------- layer profile


@pytest.mark.parametrize(
    "cache_type, row",
    [("f32", 1024), ("f16", 512), ("bf16", 512), ("q8_0", 272), ("q4_0", 144),
     ("q4_1", 160), ("q5_0", 176), ("q5_1", 192), ("iq4_nl", 144)],
)
def test_a_256_wide_head_row_takes_the_ggml_block_bytes(cache_type, row):
    p = gemma(cache_type, cache_type)
    assert (p.k_bytes_per_token_layer, p.v_bytes_per_token_layer) == (row, row)


def test_every_cache_type_a_profile_accepts_has_a_block_size():
    assert set(CACHE_TYPE_BLOCKS) == set(KV_CACHE_TYPES)


def test_k_and_v_take_their_own_type_and_head_dim():
    p = gemma("q8_0", "f16", head_dim_v=128)
    assert (p.k_bytes_per_token_layer, p.v_bytes_per_token_layer) == (272, 256)


def test_bytes_per_token_layer_scale_with_the_kv_heads():
    assert gemma("q4_0", "q4_0", n_head_kv=4).k_bytes_per_token_layer == 4 * 144


def test_a_quantized_k_type_needs_a_head_dim_that_is_a_multiple_of_32():
    with pytest.raises(EffctxError, match=r"^KV cache type q4_0 packs 32 elements per block, but the model's K head dim 72 is not a multiple of 32$"):
        gemma("q4_0", "f16", head_dim_k=72)


def test_a_quantized_v_type_needs_a_head_dim_that_is_a_multiple_of_32():
    with pytest.raises(EffctxError, match=r"^KV cache type q8_0 packs 32 elements per block, but the model's V head dim 72 is not a multiple of 32$"):
        gemma("f16", "q8_0", head_dim_v=72)


def test_plain_types_take_any_head_dim():
    assert gemma("f32", "bf16", head_dim_k=72, head_dim_v=72).k_bytes_per_token_layer == 288


def test_an_unknown_cache_type_is_an_effctx_error():
    with pytest.raises(EffctxError, match="unknown KV cache type 'q3_k'"):
        gemma("q3_k", "f16")


def test_layers_split_into_three_global_and_fifteen_windowed():
    p = gemma()
    assert p.global_layers == (5, 11, 17)
    assert p.swa_layers == tuple(i for i in range(18) if i not in (5, 11, 17))
    assert (p.window, p.n_layers) == (512, 18)


def test_a_model_without_a_window_has_only_global_layers():
    p = gemma(sliding_window=None, global_layers=tuple(range(18)))
    assert (p.global_layers, p.swa_layers, p.window) == (tuple(range(18)), (), None)


def test_only_a_quantized_v_type_needs_flash_attention():
    assert [gemma(k, v).needs_flash_attn for k, v in [("q4_0", "f16"), ("bf16", "f32"), ("f16", "q8_0")]] == [
        False, False, True]


def test_layer_profile_dict_is_json_with_the_per_layer_bytes():
    d = json.loads(json.dumps(layer_profile_dict(gemma("q8_0", "f16"))))
    assert d["global_layers"] == [5, 11, 17]
    assert len(d["swa_layers"]) == 15
    assert (d["window"], d["n_head_kv"], d["head_dim_k"], d["head_dim_v"]) == (512, 1, 256, 256)
    assert (d["kv_cache_type_k"], d["kv_cache_type_v"]) == ("q8_0", "f16")
    assert (d["k_bytes_per_token_layer"], d["v_bytes_per_token_layer"]) == (272, 512)
    assert d["bytes_per_token_all_layers"] == 18 * 784
    assert d["needs_flash_attn"] is False


# --------------------------------------------------------------------------- allocated cache


@pytest.mark.parametrize(
    "n_ctx, n_ubatch, swa_full, cells",
    [
        (16, 512, True, (256, 256)),  # n_ctx is rounded up to 256 cells
        (600, 512, True, (768, 768)),
        (600, 512, False, (768, 768)),  # the window + ubatch cap is above n_ctx
        (1100, 512, False, (1280, 1024)),  # windowed layers: pad256(512 + 512)
        (2048, 64, False, (2048, 768)),  # pad256(512 + 64)
        (4096, 512, True, (4096, 4096)),
    ],
)
def test_allocated_cells_per_global_and_windowed_layer(n_ctx, n_ubatch, swa_full, cells):
    assert gemma().cache_cells(n_ctx, n_ubatch, swa_full) == cells


def test_allocated_f16_cache_for_4096_tokens_with_swa_full_is_36_mib_each_for_k_and_v():
    assert gemma().cache_bytes(4096, 512, swa_full=True) == KVBytes(36 * MiB, 36 * MiB)


def test_allocated_f16_cache_for_4096_tokens_without_swa_full_is_6_mib_global_plus_7_5_mib_windowed_each():
    assert gemma().cache_bytes(4096, 512, swa_full=False) == KVBytes(27 * MiB // 2, 27 * MiB // 2)


# --------------------------------------------------------------------------- sequence state


@pytest.mark.parametrize(
    "k, v, n_tokens, size",
    # llama_state_seq_get_size, measured on the default model (flash attention on and off,
    # swa_full on and off alike)
    [("f16", "f16", 0, 24), ("f16", "f16", 1, 18_928), ("f16", "f16", 100, 1_846_072),
     ("f16", "f16", 511, 9_431_488), ("f16", "f16", 512, 9_449_944), ("f16", "f16", 513, 9_453_028),
     ("f16", "f16", 1100, 11_263_336), ("q4_0", "q4_0", 100, 521_272), ("q4_0", "q4_0", 1100, 3_182_056)],
)
def test_sequence_state_size_is_llama_cpps_measured_bytes(k, v, n_tokens, size):
    assert gemma(k, v).seq_state_bytes(n_tokens).total == size


def test_sequence_state_of_600_tokens_holds_600_global_and_512_windowed_rows_of_k_and_v():
    rows = 600 * 3 + 512 * 15
    assert gemma().seq_state_bytes(600) == KVBytes(rows * 512, rows * 512, 13_816)


def test_a_model_without_a_window_serializes_one_cache():
    p = gemma(sliding_window=None, global_layers=tuple(range(18)))
    # header, cache frame, cell positions, V layout + layer count, per-layer types and rows
    assert p.seq_state_bytes(10).overhead == 8 + 8 + 10 * 12 + 8 + 18 * 24


# --------------------------------------------------------------------------- memory budget


def test_a_budget_below_the_model_context_binds_in_steps_of_256_tokens():
    hot = hot_context(gemma(), 256 * MiB, model_context=32768)
    assert (hot.tokens, hot.binding) == (14336, "memory")  # 268,435,456 / 18,432 = 14,563.6
    assert hot.reason == (
        "memory budget: 256 MiB / 18,432 B per token "
        "(rounded down to a multiple of 256, llama.cpp's n_ctx step)"
    )
    assert hot.cache_bytes == 14336 * 18432


def test_a_budget_above_the_model_context_is_bound_by_the_model_context_length():
    hot = hot_context(gemma(), 2 * GiB, model_context=32768)
    assert (hot.tokens, hot.binding, hot.reason) == (32768, "model", "model context length 32768")


def test_a_budget_above_n_ctx_is_bound_by_n_ctx():
    hot = hot_context(gemma(), 2 * GiB, model_context=32768, n_ctx_limit=4096)
    assert (hot.tokens, hot.binding, hot.reason) == (4096, "n_ctx", "n_ctx 4096")


def test_without_swa_full_windowed_layers_cost_a_fixed_15_mib_and_tokens_only_3_layers():
    hot = hot_context(gemma(), 64 * MiB, model_context=32768, swa_full=False)
    assert (hot.tokens, hot.binding) == (16640, "memory")  # (64 - 15) MiB / 3,072 B = 16,725
    assert hot.reason == (
        "memory budget: 64 MiB - 15 MiB for 1,024 sliding-window cells / 3,072 B per token "
        "(rounded down to a multiple of 256, llama.cpp's n_ctx step)"
    )


def test_without_swa_full_a_budget_below_the_windowed_cap_pays_every_layer_per_token():
    hot = hot_context(gemma(), 16 * MiB, model_context=32768, swa_full=False)
    assert hot.tokens == 768  # 16 MiB / 18,432 B = 910
    assert hot.reason.startswith("memory budget: 16 MiB / 18,432 B per token")


def test_a_budget_below_the_smallest_context_allows_no_tokens():
    hot = hot_context(gemma(), 4 * MiB, model_context=32768)
    assert (hot.tokens, hot.binding, hot.cache_bytes) == (0, "memory", 0)
    assert hot.reason == (
        "memory budget: 4 MiB is less than the 4.5 MiB of llama.cpp's smallest context (256 cells)"
    )


@pytest.mark.parametrize("swa_full", [True, False])
@pytest.mark.parametrize("types", [("f16", "f16"), ("q4_0", "q4_0"), ("q8_0", "f32")])
@pytest.mark.parametrize("budget", [5 * MiB, 17 * MiB, 19 * MiB, 100 * MiB, 333_333_333])
def test_the_memory_bound_is_the_largest_256_step_whose_cache_fits(budget, types, swa_full):
    p = gemma(*types)
    hot = hot_context(p, budget, model_context=10**9, swa_full=swa_full)
    assert hot.binding == "memory"
    assert p.cache_bytes(hot.tokens, 512, swa_full).total <= budget
    assert p.cache_bytes(hot.tokens + 256, 512, swa_full).total > budget


def test_capacity_table_has_a_row_for_every_k_v_pair_and_flags_quantized_v():
    rows = capacity_table(gemma_facts(), 2 * GiB, None, swa_full=True)
    assert len(rows) == 81
    flagged = {(r["kv_cache_type_k"], r["kv_cache_type_v"]) for r in rows if r["needs_flash_attn"]}
    assert flagged == {(k, v) for k in KV_CACHE_TYPES for v in KV_CACHE_TYPES if v not in ("f32", "f16", "bf16")}


def table_row(rows: list[dict], k: str, v: str) -> dict:
    return next(r for r in rows if (r["kv_cache_type_k"], r["kv_cache_type_v"]) == (k, v))


@pytest.mark.parametrize("k, v, per_token", [("f16", "f16", 18432), ("q8_0", "q8_0", 9792), ("q4_0", "q4_0", 5184)])
def test_capacity_table_bytes_per_token_with_swa_full_are_every_layers_row(k, v, per_token):
    row = table_row(capacity_table(gemma_facts(), 512 * MiB, None, swa_full=True), k, v)
    assert row["bytes_per_token"] == per_token
    assert row["max_hot_tokens"] == min(32768, 512 * MiB // per_token // 256 * 256)


def test_capacity_table_state_bytes_per_token_count_only_the_window_in_windowed_layers():
    row = table_row(capacity_table(gemma_facts(), 2 * GiB, None, swa_full=True), "f16", "f16")
    # (32,768 x (3 x 1,024 + 12) + 512 x (15 x 1,024 + 12) + 480 B of headers) / 32,768
    assert (row["max_hot_tokens"], row["state_bytes_per_token"]) == (32768, 3324.2)
    assert (row["binding"], row["reason"]) == ("model", "model context length 32768")


def test_capacity_table_leaves_out_quantized_types_that_do_not_divide_the_head_dim():
    rows = capacity_table(gemma_facts(head_dim_k=80, head_dim_v=80), 2 * GiB, 4096, swa_full=False)
    assert {r["kv_cache_type_k"] for r in rows} == {r["kv_cache_type_v"] for r in rows} == {"f32", "f16", "bf16"}
    assert {r["binding"] for r in rows} == {"n_ctx"}


# --------------------------------------------------------------------------- parse_memory


@pytest.mark.parametrize(
    "text, value",
    [("2GiB", 2 * GiB), ("512 MiB", 512 * MiB), ("1.5GiB", 3 * GiB // 2), ("64KiB", 65536),
     ("100KB", 100_000), ("3MB", 3_000_000), ("1.1GB", 1_100_000_000), ("4096B", 4096), ("2gib", 2 * GiB)],
)
def test_parse_memory_reads_binary_and_decimal_units(text, value):
    assert parse_memory(text) == value


@pytest.mark.parametrize("text", ["", "2", "GiB", "2 TiB", "-1GiB", "2GiB of RAM", "1,5GiB"])
def test_parse_memory_refuses_what_it_cannot_read_in_one_line(text):
    with pytest.raises(EffctxError, match=r"^cannot read memory size .*\(B, KiB, MiB, GiB, KB, MB, GB\), e\.g\. 2GiB$"):
        parse_memory(text)


def test_parse_memory_refuses_a_fraction_of_a_byte():
    with pytest.raises(EffctxError, match=r"^memory size '1.5B' is not a whole number of bytes$"):
        parse_memory("1.5B")


def test_parse_memory_refuses_zero():
    with pytest.raises(EffctxError, match=r"^memory size '0GiB' must be more than 0 bytes$"):
        parse_memory("0GiB")


# --------------------------------------------------------------------------- real llama.cpp

# Every pair llama.cpp accepts, with the flash attention it needs (quantized V needs it).
ACCEPTED = [
    ("f16", "f16", False), ("q8_0", "f16", False), ("q4_0", "f16", False), ("f32", "f32", False),
    ("bf16", "bf16", False), ("q8_0", "q8_0", True), ("q4_0", "q4_0", True), ("f16", "q8_0", True),
    ("q5_1", "q5_1", True), ("iq4_nl", "iq4_nl", True),
    # every cache type appears as K and as V at least once
    ("q4_1", "q5_0", True), ("q5_0", "q4_1", True), ("iq4_nl", "bf16", False), ("bf16", "f32", False),
]
# 100: under the window; 520: windowed layers keep the last 512 of 520; 800: past the
# 768 cells a cache without swa_full keeps at n_ubatch 64, so it has reused cells. 800
# only where the reference numbers are: quantized caches with flash attention prefill at
# 150-300 tok/s here, and the module has to stay around a minute on two shared cores.
N_UBATCH = 64
# llama.cpp's threads spin: with the other core busy, two threads ran 600 tokens up to
# 30x slower than alone; one thread is steady (about 1.5 s for 600 f16 tokens, busy or not).
THREADS = 1
LONG = {("f16", "f16"), ("q8_0", "q8_0"), ("q4_0", "q4_0")}


def lengths(k: str, v: str) -> tuple[int, ...]:
    return (100, 520, 800) if (k, v) in LONG else (100, 520)


STATE_CASES = [
    pytest.param(k, v, fa, swa_full, n, id=f"{k}-{v}-fa_{'on' if fa else 'off'}-swa_full_{'on' if swa_full else 'off'}-{n}")
    for k, v, fa in ACCEPTED for swa_full in (True, False) for n in lengths(k, v)
]


@pytest.fixture(scope="module")
def facts(default_model) -> ModelFacts:
    return llama_runtime.load_model(default_model).facts


class Sizes(NamedTuple):
    seq_state: int  # len(session.snapshot().state), from llama_state_seq_get_data
    context_state: int  # llama_state_get_size: every sequence, logits, embeddings
    oldest_position: int  # llama_memory_seq_pos_min


class Measured:
    """What llama.cpp reports while one context per configuration grows to each length."""

    def __init__(self, model_path):
        self._path = model_path
        self._backend = LlamaBackend()
        self._runs: dict[tuple, dict[int, Sizes]] = {}

    def sizes(self, k: str, v: str, fa: bool, swa_full: bool) -> dict[int, Sizes]:
        key = (k, v, fa, swa_full)
        if key not in self._runs:
            # llama.cpp's own cache as it grows: effctx does not trim the windowed layers.
            profile = Profile(n_ctx=2048, n_batch=N_UBATCH, threads=THREADS, kv_cache_type_k=k, kv_cache_type_v=v,
                              backend_options=LlamaOptions(flash_attn=fa, swa_full=swa_full, trim_windows=False))
            session = self._backend.open(self._path, profile)
            try:
                sentence = session.tokenize(" The grass is green. The sky is blue. The sun is yellow.", add_bos=False)
                tokens = session.tokenize("Notes:", add_bos=True) + sentence * 100
                out, done = {}, 0
                for n in lengths(k, v):
                    session.prefill_suffix(tokens[done:n])
                    done = n
                    out[n] = Sizes(
                        len(session.snapshot().state),
                        llama_cpp.llama_state_get_size(session._ctx),
                        llama_cpp.llama_memory_seq_pos_min(llama_cpp.llama_get_memory(session._ctx), 0),
                    )
            finally:
                session.close()
            self._runs[key] = out
        return self._runs[key]


@pytest.fixture(scope="module")
def measured(default_model) -> Measured:
    return Measured(default_model)


def test_default_model_is_the_gemma_the_arithmetic_tests_describe(facts):
    assert LayerKVProfile.from_facts(facts, "f16", "f16") == gemma()
    assert facts.context_length == 32768


@pytest.mark.parametrize("k, v, fa, swa_full, n_tokens", STATE_CASES)
def test_predicted_sequence_state_is_the_snapshot_size_to_the_byte(facts, measured, k, v, fa, swa_full, n_tokens):
    measured_bytes = measured.sizes(k, v, fa, swa_full)[n_tokens].seq_state
    assert LayerKVProfile.from_facts(facts, k, v).seq_state_bytes(n_tokens).total == measured_bytes


@pytest.mark.parametrize(
    "k, v, fa, per_token", [("f16", "f16", False, 18432), ("q8_0", "q8_0", True, 9792), ("q4_0", "q4_0", True, 5184)]
)
def test_reference_bytes_per_token_are_one_allocated_cell_in_all_18_layers_and_the_whole_context_state_slope_with_swa_full(
    facts, measured, k, v, fa, per_token
):
    p = LayerKVProfile.from_facts(facts, k, v)
    assert p.bytes_per_token_all_layers == per_token
    assert p.cache_bytes(2048, swa_full=True).total == 2048 * per_token
    # The whole-context state (llama_state_get_size) holds every layer's row with swa_full,
    # plus a 12-byte cell position in each of the two caches.
    sizes = measured.sizes(k, v, fa, swa_full=True)
    assert sizes[800].context_state - sizes[520].context_state == 280 * (per_token + 2 * CELL_META_BYTES)


@pytest.mark.parametrize("k, v, fa, per_token", [("f16", "f16", False, 3072), ("q8_0", "q8_0", True, 1632), ("q4_0", "q4_0", True, 864)])
@pytest.mark.parametrize("swa_full", [True, False])
def test_sequence_state_past_the_window_grows_by_the_3_global_layers_only(measured, k, v, fa, per_token, swa_full):
    sizes = measured.sizes(k, v, fa, swa_full)
    assert sizes[800].seq_state - sizes[520].seq_state == 280 * (per_token + CELL_META_BYTES)


@pytest.mark.parametrize("k, v, fa", [("f16", "f16", False), ("q4_0", "q4_0", True)])
def test_at_800_tokens_a_cache_without_swa_full_has_dropped_its_oldest_windowed_positions(measured, k, v, fa):
    # The premise of the 800-token cases: the 768-cell windowed cache has reused cells,
    # and the state still holds exactly the last 512 positions.
    assert measured.sizes(k, v, fa, swa_full=False)[800].oldest_position > 0
    assert measured.sizes(k, v, fa, swa_full=True)[800].oldest_position == 0


@contextmanager
def llama_log():
    """llama.cpp's log lines while the block runs; the runtime's own capture afterwards."""
    lines: list[str] = []

    @llama_cpp.llama_log_callback
    def capture(level, text, user_data):
        lines.append(text.decode("utf-8", "replace"))

    llama_cpp.llama_log_set(capture, ctypes.c_void_p(0))
    try:
        yield lines
    finally:
        llama_cpp.llama_log_set(llama_runtime._capture_log, ctypes.c_void_p(0))


_KV_LOG = re.compile(
    r"llama_kv_cache: size =\s*[\d.]+ MiB \(\s*(\d+) cells,\s*(\d+) layers.*?"
    r"K \((\w+)\):\s*([\d.]+) MiB, V \((\w+)\):\s*([\d.]+) MiB"
)


@pytest.mark.parametrize(
    "k, v, fa, n_ctx, n_ubatch, swa_full, cells",
    [
        ("f16", "f16", False, 100, 512, True, (256, 256)),
        ("f16", "f16", False, 600, 512, False, (768, 768)),
        ("f16", "f16", False, 1100, 512, False, (1280, 1024)),
        ("f16", "f16", True, 2048, 64, False, (2048, 768)),
        ("q4_0", "q4_0", True, 2048, 512, False, (2048, 1024)),
        ("q8_0", "f16", True, 2048, 512, True, (2048, 2048)),
    ],
)
def test_allocated_cells_and_k_v_mib_are_what_llama_cpp_logs(facts, default_model, k, v, fa, n_ctx, n_ubatch, swa_full, cells):
    p = LayerKVProfile.from_facts(facts, k, v)
    assert p.cache_cells(n_ctx, n_ubatch, swa_full) == cells
    profile = Profile(n_ctx=n_ctx, n_batch=n_ubatch, kv_cache_type_k=k, kv_cache_type_v=v,
                      backend_options=LlamaOptions(flash_attn=fa, swa_full=swa_full))
    with llama_log() as lines:
        LlamaBackend().open(default_model, profile).close()
    logged = _KV_LOG.findall("".join(lines))
    expected = [
        (str(n), str(len(layers)), k, f"{n * len(layers) * p.k_bytes_per_token_layer / MiB:.2f}",
         v, f"{n * len(layers) * p.v_bytes_per_token_layer / MiB:.2f}")
        for n, layers in zip(cells, (p.global_layers, p.swa_layers))
    ]
    assert logged == expected
