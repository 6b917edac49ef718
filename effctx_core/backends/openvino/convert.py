"""GGUF -> OpenVINO IR, without torch: the weights dequantized with the `gguf` package's
numpy dequantizers, the decoder built with OpenVINO's Python graph API.

The IR has the layout openvino-genai's stateful LLMs have (what optimum-intel exports):
inputs `input_ids`, `attention_mask`, `position_ids` ([batch, seq] i64) and `beam_idx`
([batch] i32), output `logits`, and the KV cache as ReadValue/Assign pairs, one per layer
and K/V, that the next request extends. Attention is `ScaledDotProductAttention` with an
explicit mask (causal, padding and, on sliding-window layers, the window).

Architectures: `gemma3` (the default model) and `llama` (the tiny test model). What the
two differ in is spelled out in `ArchSpec`; llama.cpp's reading of the same GGUF is the
reference every rule here was checked against (NLL and top-1 agreement, tests/).
"""

from __future__ import annotations

import errno
import json
import math
import os
import shutil
import time
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import gguf
import numpy as np
import openvino as ov
import openvino.opset13 as op
from openvino.op.util import Variable, VariableInfo

from effctx_core.atomic import atomic_write_bytes, fsync_dir
from effctx_core.errors import EffctxError, ModelFileError
from effctx_core.models import ProgressFn, data_dir, sha256_file, sha256_uncached
from effctx_core.temp_files import create_temp_dir, sweep_dead_temps
from effctx_core.user_files import os_reason

# Bumped whenever the graph or the weight encoding changes: a cached IR of another
# version is converted again.
CONVERTER_VERSION = 3
WEIGHT_FORMATS = ("int8", "f16", "f32")
# "last": logits of each request's last position only, what a session needs to sample (a
# 262k vocabulary makes all of them 1 MiB per token); "all": every position, to score text.
LOGITS = ("last", "all")
MANIFEST = "effctx-manifest.json"
MODEL_XML = "openvino_model.xml"
GENERATION_CONFIG = "generation_config.json"

_F32_MIN = float(np.finfo(np.float32).min)
_INT_MAX = int(np.iinfo(np.int32).max)
# Symmetric int8 weights with one f16 scale per group of this many input elements:
# per-row scales lost 3% NLL on the default model, groups of 32 lose none measurably.
_INT8_GROUP = 32
# Source bytes of a tensor read (and encoded) at a time: about 0.4 s of work on 2 cores.
_SLICE_BYTES = 4 * 2**20


class ConversionError(EffctxError):
    """The model cannot be converted (an architecture or a tensor type effctx does not know)."""


@dataclass(frozen=True)
class ArchSpec:
    """What a decoder architecture does differently, as llama.cpp runs it."""

    name: str
    embedding_scale: bool  # gemma multiplies token embeddings by sqrt(n_embd)
    qk_norm: bool  # gemma normalizes each head's q and k (attn_q_norm, attn_k_norm)
    post_norms: bool  # gemma normalizes attention and FFN outputs before the residual add
    activation: str  # "gelu_tanh" (GeGLU) or "silu" (SwiGLU)
    # "neox" rotates the two halves of a head; "norm" (llama.cpp's LLAMA_ROPE_TYPE_NORM)
    # rotates adjacent pairs: llama's GGUF converter permuted q and k to match it.
    rope: str
    # Sliding-window layers use their own RoPE base; llama.cpp hard-codes it for gemma3.
    local_rope_base: float | None
    global_every: int | None  # within every group of n layers the last is global


ARCHS = {
    "gemma3": ArchSpec("gemma3", True, True, True, "gelu_tanh", "neox", 10_000.0, 6),
    "llama": ArchSpec("llama", False, False, False, "silu", "norm", None, None),
}


@dataclass(frozen=True)
class HyperParams:
    arch: str
    n_layer: int
    n_embd: int
    n_head: int
    n_head_kv: int
    head_dim_k: int
    head_dim_v: int
    rms_eps: float
    rope_base: float
    sliding_window: int | None
    global_layers: tuple[int, ...]
    attention_scale: float


@dataclass(frozen=True)
class ConvertedModel:
    path: Path  # the IR's folder
    manifest: dict[str, Any]

    @property
    def xml(self) -> Path:
        return self.path / MODEL_XML


# --------------------------------------------------------------------------- GGUF


def _field(reader: gguf.GGUFReader, key: str, default: Any = None) -> Any:
    found = reader.fields.get(key)
    return found.contents() if found is not None else default


def hyper_params(reader: gguf.GGUFReader, path: Path) -> HyperParams:
    arch = _field(reader, "general.architecture")
    if arch not in ARCHS:
        raise ConversionError(f"cannot convert architecture {arch!r} to OpenVINO (known: {', '.join(ARCHS)}): {path}")
    spec = ARCHS[arch]

    def need(key: str) -> Any:
        value = _field(reader, f"{arch}.{key}")
        if value is None:
            raise ModelFileError(f"GGUF key {arch}.{key} is missing: {path}")
        return value

    scaling = _field(reader, f"{arch}.rope.scaling.type")
    if scaling not in (None, "none"):
        raise ConversionError(f"RoPE scaling {scaling!r} is not converted: {path}")
    n_layer, n_embd, n_head = int(need("block_count")), int(need("embedding_length")), int(need("attention.head_count"))
    head_dim = n_embd // n_head
    head_dim_k = int(_field(reader, f"{arch}.attention.key_length", head_dim))
    window = _field(reader, f"{arch}.attention.sliding_window")
    every = spec.global_every
    global_layers = tuple(i for i in range(n_layer) if window is None or every is None or i % every == every - 1)
    return HyperParams(
        arch=arch,
        n_layer=n_layer,
        n_embd=n_embd,
        n_head=n_head,
        n_head_kv=int(_field(reader, f"{arch}.attention.head_count_kv", n_head)),
        head_dim_k=head_dim_k,
        head_dim_v=int(_field(reader, f"{arch}.attention.value_length", head_dim)),
        rms_eps=float(need("attention.layer_norm_rms_epsilon")),
        rope_base=float(_field(reader, f"{arch}.rope.freq_base", 10_000.0)),
        sliding_window=int(window) if window is not None and every is not None else None,
        global_layers=global_layers,
        # llama.cpp's gemma3 and llama both scale scores by 1/sqrt(head dim)
        attention_scale=float(_field(reader, f"{arch}.attention.scale", 0.0) or 1.0 / np.sqrt(head_dim_k)),
    )


def generation_config(reader: gguf.GGUFReader) -> dict[str, int]:
    """The special token ids openvino-genai reads from generation_config.json beside the
    IR: without the file its pipelines refuse to generate ("'stop_token_ids' must be
    non-negative")."""
    out = {}
    for name in ("bos", "eos", "padding"):
        value = _field(reader, f"tokenizer.ggml.{name}_token_id")
        if value is not None:
            out["pad_token_id" if name == "padding" else f"{name}_token_id"] = int(value)
    return out


class _Tensors:
    """The GGUF's tensors, dequantized to float32 a slice of rows at a time as the graph
    asks. Progress counts the source bytes read and encoded: the default model's embedding
    is 72% of its file, so a count of whole tensors stood still for most of the conversion."""

    def __init__(self, reader: gguf.GGUFReader, path: Path, progress: ProgressFn | None):
        self._by_name = {t.name: t for t in reader.tensors}
        self._path = path
        self._progress = progress
        self._read = 0
        self._total = sum(t.data.nbytes for t in reader.tensors)

    def __contains__(self, name: str) -> bool:
        return name in self._by_name

    def slices(self, name: str) -> Iterator[np.ndarray]:
        """The tensor's rows, in slices of about _SLICE_BYTES; a slice is counted as done
        when the next is asked for, so the caller's encoding of it is inside the count."""
        tensor = self._by_name.get(name)
        if tensor is None:
            raise ModelFileError(f"GGUF tensor {name} is missing: {self._path}")
        data = tensor.data
        step = len(data) if data.ndim == 1 else max(1, _SLICE_BYTES // (data.nbytes // len(data)))
        for start in range(0, len(data), step):
            part = data[start:start + step]
            try:
                values = gguf.quants.dequantize(part, tensor.tensor_type)
            except NotImplementedError:
                raise ConversionError(
                    f"GGUF tensor type {tensor.tensor_type.name} of {name} is not converted") from None
            yield np.ascontiguousarray(values, dtype=np.float32)
            self._read += part.nbytes
            if self._progress:
                self._progress("converting weights", self._read, self._total)

    def __call__(self, name: str) -> np.ndarray:
        return np.concatenate(list(self.slices(name)))


# --------------------------------------------------------------------------- graph


def _f32(value: Any) -> ov.Node:
    return op.constant(np.asarray(value, dtype=np.float32))


def _i64(value: Any) -> ov.Node:
    return op.constant(np.asarray(value, dtype=np.int64))


class _Weights:
    """Matrices as constants in the chosen format, decompressed to f32 in the graph (the
    CPU plugin folds the decompression into its matmul kernels)."""

    def __init__(self, weights: str):
        self.weights = weights
        self.nbytes = 0

    def matrix(self, slices: Iterable[np.ndarray]) -> ov.Node:
        if self.weights == "int8":
            return self._int8([self._quantize(part) for part in slices])
        whole = np.concatenate([part.astype(np.float16) if self.weights == "f16" else part for part in slices])
        self.nbytes += whole.nbytes
        return op.constant(whole) if self.weights == "f32" else op.convert(op.constant(whole), ov.Type.f32)

    @staticmethod
    def _quantize(w: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Rows of `w` as int8 and one f16 scale per group (a group never spans rows, so
        slices of rows quantize as the whole would)."""
        rows, cols = w.shape
        group = _INT8_GROUP if cols % _INT8_GROUP == 0 else cols
        grouped = w.reshape(rows, cols // group, group)
        scale = np.abs(grouped).max(-1, keepdims=True) / 127.0
        scale[scale == 0] = 1.0
        q = np.clip(np.round(grouped / scale), -127, 127).astype(np.int8)
        return q, scale.astype(np.float16)

    def _int8(self, parts: list[tuple[np.ndarray, np.ndarray]]) -> ov.Node:
        q = np.concatenate([part[0] for part in parts])
        scale16 = np.concatenate([part[1] for part in parts])
        self.nbytes += q.nbytes + scale16.nbytes
        rows, groups, group = q.shape
        decompressed = op.multiply(op.convert(op.constant(q), ov.Type.f16), op.constant(scale16))
        return op.convert(op.reshape(decompressed, _i64([rows, groups * group]), False), ov.Type.f32)


def _rms_norm(x: ov.Node, weight: np.ndarray, eps: float) -> ov.Node:
    # x / rms(x) * w. For gemma the GGUF weight already holds the 1 + w of the original.
    mean_square = op.reduce_mean(op.multiply(x, x), _i64([-1]), True)
    return op.multiply(op.divide(x, op.sqrt(op.add(mean_square, _f32(eps)))), _f32(weight))


def _rope(x: ov.Node, cos: ov.Node, sin: ov.Node, head_dim: int, style: str) -> ov.Node:
    """x [batch, heads, seq, head_dim] rotated by its positions (cos/sin broadcast)."""
    half = head_dim // 2
    if style == "neox":
        x1 = op.slice(x, _i64([0]), _i64([half]), _i64([1]), _i64([3]))
        x2 = op.slice(x, _i64([half]), _i64([_INT_MAX]), _i64([1]), _i64([3]))
        rotated = op.concat([op.multiply(x2, _f32(-1.0)), x1], -1)
        return op.add(op.multiply(x, cos), op.multiply(rotated, sin))
    # adjacent pairs (x0, x1) -> (x0 cos - x1 sin, x1 cos + x0 sin); cos/sin hold one value per pair
    pairs = op.reshape(x, _i64([0, 0, 0, half, 2]), True)
    even = op.squeeze(op.slice(pairs, _i64([0]), _i64([1]), _i64([1]), _i64([4])), _i64([4]))
    odd = op.squeeze(op.slice(pairs, _i64([1]), _i64([2]), _i64([1]), _i64([4])), _i64([4]))
    first = op.subtract(op.multiply(even, cos), op.multiply(odd, sin))
    second = op.add(op.multiply(odd, cos), op.multiply(even, sin))
    stacked = op.concat([op.unsqueeze(first, _i64([4])), op.unsqueeze(second, _i64([4]))], 4)
    return op.reshape(stacked, _i64([0, 0, 0, head_dim]), True)


def _rope_tables(positions: ov.Node, base: float, head_dim: int, style: str) -> tuple[ov.Node, ov.Node]:
    """cos and sin for [batch, 1, seq, n] (n = head_dim for neox, head_dim / 2 for pairs)."""
    half = head_dim // 2
    inv = (1.0 / base ** (np.arange(0, head_dim, 2, dtype=np.float64) / head_dim)).astype(np.float32)
    angles = op.multiply(positions, _f32(inv.reshape(1, 1, half)))  # [batch, seq, half]
    if style == "neox":
        angles = op.concat([angles, angles], -1)
    return op.unsqueeze(op.cos(angles), _i64([1])), op.unsqueeze(op.sin(angles), _i64([1]))


def _window_mask(q_pos: ov.Node, k_pos: ov.Node, causal: ov.Node, real: ov.Node, window: int,
                 shape: ov.Node, total: ov.Node) -> ov.Node:
    """The sliding-window mask in the one form OpenVINO's SDPA-to-PagedAttention pass reads
    a window from (its gpt-oss pattern: Add(q, -window) -> Greater(k, .) -> four BitwiseAnd
    -> Broadcast -> Select -> Slice). Built any other way the numbers are the same on the
    stateful path, but openvino-genai's paged pipeline gets window 0 and attends to every
    position on the windowed layers, silently (measured: greedy output then leaves
    llama.cpp's at the first token past the window)."""
    in_window = op.greater(k_pos, op.add(q_pos, _i64(-window)))
    true = op.constant(np.array(True))
    allowed = op.bitwise_and(op.bitwise_and(true, op.bitwise_and(op.bitwise_and(causal, in_window), real)), true)
    selected = op.select(op.broadcast(allowed, shape), _f32(0.0), _f32(_F32_MIN))
    return op.slice(selected, _i64([0]), total, _i64([1]), _i64([3]))


def build_model(hp: HyperParams, tensors: _Tensors, weights: str, logits_of: str = "last") -> tuple[ov.Model, int]:
    """The stateful decoder and the bytes its weights take."""
    spec = ARCHS[hp.arch]
    w = _Weights(weights)
    names = ("input_ids", "attention_mask", "position_ids")
    input_ids, attention_mask, position_ids = (op.parameter([-1, -1], ov.Type.i64, name=n) for n in names)
    beam_idx = op.parameter([-1], ov.Type.i32, name="beam_idx")
    params = [input_ids, attention_mask, position_ids, beam_idx]
    for p, name in zip(params, (*names, "beam_idx")):
        p.output(0).get_tensor().set_names({name})

    batch = op.gather(op.shape_of(input_ids, ov.Type.i64), _i64([0]), _i64(0))
    seq = op.gather(op.shape_of(input_ids, ov.Type.i64), _i64([1]), _i64(0))
    total = op.gather(op.shape_of(attention_mask, ov.Type.i64), _i64([1]), _i64(0))

    embedding = w.matrix(tensors.slices("token_embd.weight"))
    x = op.gather(embedding, input_ids, _i64(0))
    if spec.embedding_scale:
        x = op.multiply(x, _f32(np.sqrt(hp.n_embd)))

    positions = op.unsqueeze(op.convert(position_ids, ov.Type.f32), _i64([2]))
    tables = {"global": _rope_tables(positions, hp.rope_base, hp.head_dim_k, spec.rope)}
    if spec.local_rope_base is not None:
        tables["local"] = _rope_tables(positions, spec.local_rope_base, hp.head_dim_k, spec.rope)

    # masks [batch, 1, seq, total]: a key is seen when it is a real token, not in the
    # future and, on sliding-window layers, fewer than `window` positions back
    q_pos = op.unsqueeze(op.range(op.squeeze(op.subtract(total, seq), _i64([0])), op.squeeze(total, _i64([0])),
                                  _i64(1), ov.Type.i64), _i64([1]))
    k_pos = op.unsqueeze(op.range(_i64(0), op.squeeze(total, _i64([0])), _i64(1), ov.Type.i64), _i64([0]))
    real = op.not_equal(op.unsqueeze(attention_mask, _i64([1, 2])), _i64(0))
    causal = op.less_equal(k_pos, q_pos)
    masks = {"global": op.select(op.logical_and(real, causal), _f32(0.0), _f32(_F32_MIN))}
    if hp.sliding_window:
        masks["local"] = _window_mask(q_pos, k_pos, causal, real, hp.sliding_window,
                                      op.concat([batch, _i64([1]), seq, total], 0), total)

    sinks = []
    group = hp.n_head // hp.n_head_kv
    for layer in range(hp.n_layer):
        pre = f"blk.{layer}."
        kind = "global" if layer in hp.global_layers else "local"
        cos, sin = tables.get(kind, tables["global"])
        h = _rms_norm(x, tensors(pre + "attn_norm.weight"), hp.rms_eps)
        heads = []
        for name, count, dim in (("q", hp.n_head, hp.head_dim_k), ("k", hp.n_head_kv, hp.head_dim_k),
                                 ("v", hp.n_head_kv, hp.head_dim_v)):
            proj = op.matmul(h, w.matrix(tensors.slices(f"{pre}attn_{name}.weight")), False, True)
            heads.append(op.transpose(op.reshape(proj, _i64([0, 0, count, dim]), True), _i64([0, 2, 1, 3])))
        q, k, v = heads
        if spec.qk_norm:
            q = _rms_norm(q, tensors(pre + "attn_q_norm.weight"), hp.rms_eps)
            k = _rms_norm(k, tensors(pre + "attn_k_norm.weight"), hp.rms_eps)
        q, k = (_rope(t, cos, sin, hp.head_dim_k, spec.rope) for t in (q, k))
        cached = []
        for part, current, dim in (("key", k, hp.head_dim_k), ("value", v, hp.head_dim_v)):
            info = VariableInfo()
            info.data_shape = ov.PartialShape([-1, hp.n_head_kv, -1, dim])
            info.data_type = ov.Type.f32
            info.variable_id = f"past_key_values.{layer}.{part}present.{layer}.{part}"
            variable = Variable(info)
            empty = op.broadcast(_f32(0.0), op.concat([batch, _i64([hp.n_head_kv, 0, dim])], 0))
            past = op.gather(op.read_value(empty, variable), beam_idx, _i64(0))
            whole = op.concat([past, current], 2)
            sinks.append(op.assign(whole, variable))
            cached.append(whole)
        keys, values = cached
        if group > 1:  # each KV head serves `group` query heads
            keys, values = (
                op.reshape(op.broadcast(op.unsqueeze(t, _i64([2])), _i64([1, 1, group, 1, 1]), broadcast_spec="BIDIRECTIONAL"),
                           _i64([0, hp.n_head, -1, dim]), True)
                for t, dim in ((keys, hp.head_dim_k), (values, hp.head_dim_v))
            )
        attended = op.scaled_dot_product_attention(q, keys, values, masks.get(kind, masks["global"]),
                                                   _f32(hp.attention_scale), causal=False)
        attended = op.reshape(op.transpose(attended, _i64([0, 2, 1, 3])), _i64([0, 0, hp.n_head * hp.head_dim_v]), True)
        out = op.matmul(attended, w.matrix(tensors.slices(pre + "attn_output.weight")), False, True)
        if spec.post_norms:
            out = _rms_norm(out, tensors(pre + "post_attention_norm.weight"), hp.rms_eps)
        x = op.add(x, out)
        h = _rms_norm(x, tensors(pre + "ffn_norm.weight"), hp.rms_eps)
        gate = op.matmul(h, w.matrix(tensors.slices(pre + "ffn_gate.weight")), False, True)
        up = op.matmul(h, w.matrix(tensors.slices(pre + "ffn_up.weight")), False, True)
        act = op.gelu(gate, approximation_mode="tanh") if spec.activation == "gelu_tanh" else op.swish(gate)
        out = op.matmul(op.multiply(act, up), w.matrix(tensors.slices(pre + "ffn_down.weight")), False, True)
        if spec.post_norms:
            out = _rms_norm(out, tensors(pre + "post_ffw_norm.weight"), hp.rms_eps)
        x = op.add(x, out)
    if logits_of == "last":
        x = op.slice(x, _i64([-1]), _i64([_INT_MAX]), _i64([1]), _i64([1]))
    x = _rms_norm(x, tensors("output_norm.weight"), hp.rms_eps)
    output = w.matrix(tensors.slices("output.weight")) if "output.weight" in tensors else embedding  # tied
    logits = op.matmul(x, output, False, True)
    logits.output(0).get_tensor().set_names({"logits"})
    return ov.Model([op.result(logits)], sinks, params, hp.arch), w.nbytes


# --------------------------------------------------------------------------- conversion


def converted_dir(source_sha256: str, weights: str, logits_of: str = "last") -> Path:
    return data_dir() / "openvino" / f"{source_sha256[:16]}-{weights}-{logits_of}"


def first_line(exc: BaseException) -> str:
    """OpenVINO's exceptions quote a C++ stack of 'Exception from ...' lines: the cause is the
    last line that says something."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    useful = [line for line in lines if not line.startswith("Exception from")]
    return (useful or lines or [type(exc).__name__])[-1]


def _manifest_of(path: Path) -> dict[str, Any] | None:
    try:
        data = json.loads((path / MANIFEST).read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def _file_records(folder: Path, progress: ProgressFn | None = None) -> dict[str, dict[str, Any]]:
    """Each file of a converted folder but the manifest: its size and sha256, read back
    after an fsync (so a write the disk could not hold fails here, not after the rename).
    Progress counts the bytes read back, of all the files."""
    paths = [path for path in sorted(folder.iterdir()) if path.name != MANIFEST]
    total = sum(path.stat().st_size for path in paths)
    records, before = {}, 0
    for path in paths:
        with path.open("rb") as f:
            os.fsync(f.fileno())
            size = os.fstat(f.fileno()).st_size

        def read(_stage: str, done: int, _size: int, before: int = before) -> None:
            assert progress is not None  # passed on only with a progress
            progress("checking the IR", before + done, total)

        records[path.name] = {"bytes": size, "sha256": sha256_uncached(path, read if progress else None)}
        before += size
    return records


def ir_problem(path: Path, manifest: dict[str, Any], digests: bool = False) -> str | None:
    """Why the files of a converted folder are not the ones its manifest records, or None.
    Sizes are checked on every use (a stat each); the digests when `digests` (a read of
    every byte: `effctx model convert` checks them)."""
    files = manifest.get("files")
    if not isinstance(files, dict) or MODEL_XML not in files:
        # An effctx that did not record sizes wrote it: a truncated .bin cannot be told from a whole one.
        return f"the converted model {path} has no record of its files' sizes (an older effctx wrote it)"
    for name, record in files.items():
        file = path / name
        try:
            size = file.stat().st_size
        except FileNotFoundError:
            return f"the converted model {path} has no {name}"
        except OSError as exc:
            return f"the converted model {path} has an unreadable {name} ({os_reason(exc)})"
        if not isinstance(record, dict) or size != record.get("bytes"):
            expected = record.get("bytes") if isinstance(record, dict) else None
            return f"the converted model {path} is damaged: {name} has {size} bytes, its manifest says {expected}"
    if digests:
        for name, record in files.items():
            try:
                digest = sha256_uncached(path / name)
            except OSError as exc:
                return f"the converted model {path} has an unreadable {name} ({os_reason(exc)})"
            if digest != record.get("sha256"):
                return f"the converted model {path} is damaged: {name} does not match the sha256 in its manifest"
    return None


@dataclass(frozen=True)
class CachedIR:
    """What the cache holds for a conversion: the usable IR, or why the folder that is
    there is not used (`problem`), or neither (nothing converted yet)."""

    model: ConvertedModel | None
    problem: str | None = None


def _cached(source: str, weights: str, logits_of: str, digests: bool = False) -> CachedIR:
    path = converted_dir(source, weights, logits_of)
    if not path.exists():
        return CachedIR(None)
    manifest = _manifest_of(path)
    if manifest is None:
        return CachedIR(None, f"the converted model {path} has no readable {MANIFEST}")
    if manifest.get("converter_version") != CONVERTER_VERSION:
        return CachedIR(None, f"the converted model {path} was written by converter version "
                              f"{manifest.get('converter_version')}, this effctx writes version {CONVERTER_VERSION}")
    if (manifest.get("source_sha256"), manifest.get("weights"), manifest.get("logits")) != (source, weights, logits_of):
        return CachedIR(None, f"the converted model {path} has the manifest of another conversion")
    problem = ir_problem(path, manifest, digests)
    return CachedIR(None, problem) if problem else CachedIR(ConvertedModel(path, manifest))


def cached_conversion(gguf_path: Path, weights: str = "int8", progress: ProgressFn | None = None,
                      logits_of: str = "last", digests: bool = False) -> CachedIR:
    """The IR already converted from exactly this GGUF by this converter version, with
    every file the size its manifest records (and the sha256, when `digests`), if any;
    otherwise why the converted folder there is not used."""
    return _cached(sha256_file(gguf_path, progress), weights, logits_of, digests)


def _no_space(folder: Path) -> bool:
    """Whether the file system of `folder` is full: under 1 MiB free (counting the blocks
    reserved for root when running as root), or no free inodes."""
    try:
        st = os.statvfs(folder)
    except OSError:
        return False
    blocks = st.f_bfree if os.geteuid() == 0 else st.f_bavail
    return blocks * st.f_frsize < 2**20 or (st.f_files > 0 and st.f_favail == 0)


def _write_error(folder: Path, exc: OSError | RuntimeError, weight_bytes: int) -> ConversionError:
    """One line for a write of the conversion that failed. OpenVINO's save_model reports a
    full disk as a RuntimeError ("basic_ios::clear: iostream error"), without an errno: the
    file system is asked whether it is full before the partial files are removed."""
    full = (isinstance(exc, OSError) and exc.errno == errno.ENOSPC) or (
        isinstance(exc, RuntimeError) and _no_space(folder))
    if full:
        reason = f"no space left on the device (its weights take {math.ceil(weight_bytes / 2**20)} MiB)"
    elif isinstance(exc, OSError):
        reason = os_reason(exc)
    else:
        reason = f"OpenVINO could not save it ({first_line(exc)})"
    return ConversionError(f"cannot write the OpenVINO IR into {folder}: {reason}")


def convert_gguf(gguf_path: Path, weights: str = "int8", progress: ProgressFn | None = None,
                 out_dir: Path | None = None, logits_of: str = "last", reuse: bool = True) -> ConvertedModel:
    """Convert once: a cached IR of the same source, version and weights whose files have
    the sizes its manifest records is returned as it is (not with `reuse=False`: the
    caller found it damaged by its digests); a folder that does not match is converted again.
    The IR is written into a temporary folder beside the target and renamed into place
    when complete, so an interrupted conversion never leaves a folder that looks done;
    what a killed conversion left behind is removed by the next one."""
    if weights not in WEIGHT_FORMATS:
        raise ConversionError(f"unknown weight format {weights!r} (known: {', '.join(WEIGHT_FORMATS)})")
    if logits_of not in LOGITS:
        raise ConversionError(f"unknown logits choice {logits_of!r} (known: {', '.join(LOGITS)})")
    gguf_path = Path(gguf_path)
    source = sha256_file(gguf_path, progress)
    if out_dir is None and reuse and (cached := _cached(source, weights, logits_of).model) is not None:
        return cached
    target = Path(out_dir) if out_dir is not None else converted_dir(source, weights, logits_of)
    t0 = time.perf_counter()
    if progress:
        progress("reading the GGUF", 0, 1)
    try:
        reader = gguf.GGUFReader(gguf_path)
    except (OSError, ValueError) as exc:
        raise ModelFileError(f"cannot read {gguf_path} as GGUF: {exc}") from None
    hp = hyper_params(reader, gguf_path)
    tensors = _Tensors(reader, gguf_path, progress)
    model, weight_bytes = build_model(hp, tensors, weights, logits_of)
    folder = target.parent
    try:
        folder.mkdir(parents=True, exist_ok=True)
        # effctx's own folder of conversions is swept whole; a folder the caller chose,
        # only of this target's temps
        sweep_dead_temps(folder, None if out_dir is None else target.name)
        tmp = create_temp_dir(target)
    except OSError as exc:
        raise _write_error(folder, exc, weight_bytes) from None
    try:
        if progress:  # ov.save_model reports nothing, and writes its .bin in one go at the end
            progress("writing the IR", 0, 1)
        ov.save_model(model, tmp / MODEL_XML, compress_to_fp16=False)
        (tmp / GENERATION_CONFIG).write_text(json.dumps(generation_config(reader), indent=1))
        manifest = {
            "converter_version": CONVERTER_VERSION,
            "source": str(gguf_path),
            "source_sha256": source,
            "weights": weights,
            "logits": logits_of,
            "weight_bytes": weight_bytes,
            "hyper_params": asdict(hp),
            "files": _file_records(tmp, progress),
            "seconds": round(time.perf_counter() - t0, 1),
            "openvino": ov.get_version(),
        }
        atomic_write_bytes(tmp / MANIFEST, json.dumps(manifest, indent=1).encode())
        shutil.rmtree(target, ignore_errors=True)
        os.replace(tmp, target)
        fsync_dir(folder)
    except (OSError, RuntimeError) as exc:
        raise _write_error(folder, exc, weight_bytes) from None
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return ConvertedModel(target, manifest)
