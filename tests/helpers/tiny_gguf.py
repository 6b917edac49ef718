"""A tiny random-weight llama GGUF, generated on the spot, for tests that need a real model.

Tests of the llama.cpp path need a file that llama.cpp really loads, tokenizes with and
decodes on, but a real checkpoint is hundreds of MB and tells a test nothing that a
random one would not: what matters there is that the runtime, the KV cache and the
tokenizer behave, not what the model says. So this module writes one with numpy and
``gguf.GGUFWriter``: a 2-layer "llama" with grouped-query attention, about 1 MB, in a
few milliseconds, byte-identical for a given seed (so greedy output is reproducible).

Shapes are chosen so the quantized KV cache types work too: llama.cpp's q8_0 and q4_0
blocks hold 32 values, and the K/V rows are quantized per head, so the head dimension
is 32.

The tokenizer is a SentencePiece ("llama") vocabulary that llama.cpp builds without any
network: the three specials, the 256 byte-fallback tokens and a few hundred pieces
(characters, and "▁"-words with every prefix, since llama.cpp's SPM tokenizer only ever
merges two adjacent pieces whose concatenation is itself in the vocabulary). Any text
round-trips exactly: what the pieces do not cover falls back to bytes. Chat-template
tests can append control tokens (``special_tokens``), one of them the end of a turn.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Final

import gguf
import numpy as np

__all__ = [
    "ARCH",
    "BOS_ID",
    "EOS_ID",
    "FF_DIM",
    "HEAD_DIM",
    "MODEL_NAME",
    "N_EMBD",
    "N_HEAD",
    "N_HEAD_KV",
    "N_LAYER",
    "N_VOCAB",
    "RMS_EPS",
    "ROPE_FREQ_BASE",
    "UNK_ID",
    "VOCAB",
    "write_tiny_llama_gguf",
]

ARCH: Final = "llama"
MODEL_NAME: Final = "tiny-llama-test"

N_LAYER: Final = 2
N_EMBD: Final = 128
N_HEAD: Final = 4
N_HEAD_KV: Final = 2  # grouped-query attention: two query heads share each K/V head
HEAD_DIM: Final = N_EMBD // N_HEAD  # 32: one q8_0/q4_0 block per head row
FF_DIM: Final = 256
ROPE_FREQ_BASE: Final = 10000.0
RMS_EPS: Final = 1e-5

UNK_ID: Final = 0
BOS_ID: Final = 1
EOS_ID: Final = 2

# Small enough that random activations stay far from f16 overflow; large enough that
# logits differ clearly, so greedy decoding never hinges on a near tie.
_WEIGHT_STD: Final = 0.05

_SPACE: Final = "\u2581"  # "▁": how SentencePiece writes a space inside a piece

# Common English words, so ordinary prose comes out as word-sized tokens rather than
# bytes; includes every word of the pangram the tests round-trip.
_WORDS: Final = (
    "the of and to in is it you that he was for on are with as I his they be at one "
    "have this from or had by not word but what some we can out other were all there "
    "when up use your how said an each she which do their time if will way about many "
    "then them write would like so these her long make thing see him two has look more "
    "day could go come did number sound no most people my over know water than call "
    "first who may down side been now find any new work part take get place made live "
    "where after back little only round man year came show every good me give our "
    "under name very through just form great think say help low line before turn cause "
    "same mean differ move right boy old too does tell set three want air well also "
    "play small end put home read hand large spell add even land here must big high "
    "such follow act why ask men change went light kind off need house picture try us "
    "again animal point mother world near build self earth father "
    "The A In It This That Hello He She We You They What How Why When Where There "
    "quick brown fox jumps lazy dog hello yes test model token context cache"
).split()

_PUNCTUATION: Final = " .,!?;:'\"-()[]{}<>/\\@#$%^&*+=_|~`"


def _build_vocab(special_tokens: tuple[str, ...] = ()) -> tuple[list[str], list[float], list[int]]:
    """The token texts, scores and types, in id order; ``special_tokens`` are appended as
    CONTROL tokens after the base vocabulary, so every base id stays what it is.

    Scores only order llama.cpp's merges (the higher-scored pair merges first); any
    merge in the vocabulary is eventually taken, so longer pieces get higher scores
    purely to make the ranking read naturally, as in a trained SentencePiece model.
    """
    tokens: list[str] = ["<unk>", "<s>", "</s>"]
    types: list[int] = [gguf.TokenType.UNKNOWN, gguf.TokenType.CONTROL, gguf.TokenType.CONTROL]
    scores: list[float] = [0.0, 0.0, 0.0]

    # Byte fallback: whatever the pieces below cannot spell is emitted byte by byte,
    # which is what makes every input (and every detokenization) exact.
    for b in range(256):
        tokens.append(f"<0x{b:02X}>")
        types.append(gguf.TokenType.BYTE)
        scores.append(0.0)

    pieces: list[str] = [_SPACE]
    chars = "abcdefghijklmnopqrstuvwxyz" "ABCDEFGHIJKLMNOPQRSTUVWXYZ" "0123456789" + _PUNCTUATION
    pieces += [c for c in chars if c != " "]
    pieces += [_SPACE + c for c in chars if c != " "]
    for word in _WORDS:
        whole = _SPACE + word
        # Every prefix, so "▁t" + "h" -> "▁th" + "e" -> "▁the" is a chain of merges.
        pieces += [whole[:k] for k in range(2, len(whole) + 1)]

    seen: set[str] = set(tokens)
    for piece in pieces:
        if piece in seen:
            continue
        seen.add(piece)
        tokens.append(piece)
        types.append(gguf.TokenType.NORMAL)
        scores.append(-1000.0 + 10.0 * len(piece) - len(tokens) * 1e-3)

    for special in special_tokens:
        if special in seen:
            raise ValueError(f"special token {special!r} is already in the vocabulary")
        seen.add(special)
        tokens.append(special)
        # CONTROL: llama.cpp matches the text as this one token only when asked to parse
        # special tokens, and renders it as nothing in an ordinary detokenization.
        types.append(gguf.TokenType.CONTROL)
        scores.append(0.0)
    return tokens, scores, types


VOCAB: Final = tuple(_build_vocab()[0])
N_VOCAB: Final = len(VOCAB)


def _tensors(rng: np.random.Generator, n_vocab: int) -> list[tuple[str, np.ndarray]]:
    """The weights, named and shaped as llama.cpp's llama loader expects.

    numpy shapes are (rows, cols) = (out_features, in_features); GGUF stores dimensions
    innermost first, so ``GGUFWriter`` reverses them and llama.cpp sees
    ``ne = [in_features, out_features]``, e.g. attn_q as {n_embd, n_head * head_dim}.
    1-D norm weights stay float32 (llama.cpp wants them f32); matrices are f16.
    """

    def matrix(rows: int, cols: int) -> np.ndarray:
        return (rng.standard_normal((rows, cols), dtype=np.float32) * _WEIGHT_STD).astype(np.float16)

    def norm() -> np.ndarray:
        return np.ones(N_EMBD, dtype=np.float32)

    q_dim = N_HEAD * HEAD_DIM
    kv_dim = N_HEAD_KV * HEAD_DIM
    out: list[tuple[str, np.ndarray]] = [("token_embd.weight", matrix(n_vocab, N_EMBD))]
    for i in range(N_LAYER):
        out += [
            (f"blk.{i}.attn_norm.weight", norm()),
            (f"blk.{i}.attn_q.weight", matrix(q_dim, N_EMBD)),
            (f"blk.{i}.attn_k.weight", matrix(kv_dim, N_EMBD)),
            (f"blk.{i}.attn_v.weight", matrix(kv_dim, N_EMBD)),
            (f"blk.{i}.attn_output.weight", matrix(N_EMBD, q_dim)),
            (f"blk.{i}.ffn_norm.weight", norm()),
            (f"blk.{i}.ffn_gate.weight", matrix(FF_DIM, N_EMBD)),
            (f"blk.{i}.ffn_up.weight", matrix(FF_DIM, N_EMBD)),
            (f"blk.{i}.ffn_down.weight", matrix(N_EMBD, FF_DIM)),
        ]
    out += [
        ("output_norm.weight", norm()),
        ("output.weight", matrix(n_vocab, N_EMBD)),  # untied, as in most llama checkpoints
    ]
    return out


def write_tiny_llama_gguf(
    path: Path,
    *,
    chat_template: str | None = None,
    seed: int = 0,
    n_ctx_train: int = 2048,
    special_tokens: tuple[str, ...] = (),
    eot_token: str | None = None,
) -> Path:
    """Write the tiny random llama to ``path`` and return ``path``.

    ``seed`` fixes every weight (numpy's ``default_rng``), so two calls with one seed give
    byte-identical files and identical greedy output, and different seeds different ones.
    ``n_ctx_train`` is the advertised training context (``llama.context_length``), which
    is what llama.cpp uses when a context size of 0 is asked for and what it warns
    against exceeding. ``chat_template``, when given, is stored as
    ``tokenizer.chat_template`` for chat-formatting code paths; when not, the key is
    absent, as in a base model.

    ``special_tokens`` are added as CONTROL tokens with ids ``N_VOCAB``, ``N_VOCAB + 1``...
    in order (the weights grow by as many rows, so the file differs from one without
    them); ``eot_token``, one of them, is written as the end-of-turn token, which
    llama.cpp ends generation on, as ``<|im_end|>`` in a ChatML model. EOS stays ``</s>``.

    The file is written beside ``path`` under a temporary name and moved into place, so
    a reader never sees a half-written model and a failed write leaves nothing behind.
    """
    path = Path(path)
    if eot_token is not None and eot_token not in special_tokens:
        raise ValueError(f"the end-of-turn token {eot_token!r} is not one of the special tokens")
    tokens, scores, types = _build_vocab(special_tokens)
    rng = np.random.default_rng(seed)

    fd, tmp_name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    tmp = Path(tmp_name)
    try:
        writer = gguf.GGUFWriter(tmp, ARCH)
        writer.add_name(MODEL_NAME)
        writer.add_file_type(gguf.LlamaFileType.MOSTLY_F16)

        writer.add_vocab_size(len(tokens))
        writer.add_context_length(n_ctx_train)
        writer.add_embedding_length(N_EMBD)
        writer.add_block_count(N_LAYER)
        writer.add_feed_forward_length(FF_DIM)
        writer.add_head_count(N_HEAD)
        writer.add_head_count_kv(N_HEAD_KV)
        writer.add_key_length(HEAD_DIM)
        writer.add_value_length(HEAD_DIM)
        writer.add_rope_dimension_count(HEAD_DIM)
        writer.add_rope_freq_base(ROPE_FREQ_BASE)
        writer.add_layer_norm_rms_eps(RMS_EPS)

        writer.add_tokenizer_model("llama")
        writer.add_tokenizer_pre("default")
        writer.add_token_list(tokens)
        writer.add_token_scores(scores)
        writer.add_token_types(types)
        writer.add_unk_token_id(UNK_ID)
        writer.add_bos_token_id(BOS_ID)
        writer.add_eos_token_id(EOS_ID)
        if eot_token is not None:
            writer.add_eot_token_id(tokens.index(eot_token))
        writer.add_add_bos_token(True)
        writer.add_add_eos_token(False)
        writer.add_add_space_prefix(True)
        if chat_template is not None:
            writer.add_chat_template(chat_template)

        for name, tensor in _tensors(rng, len(tokens)):
            writer.add_tensor(name, tensor)

        writer.write_header_to_file()
        writer.write_kv_data_to_file()
        writer.write_tensors_to_file()
        writer.close()
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return path
