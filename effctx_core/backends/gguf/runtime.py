"""Process-wide llama.cpp plumbing: backend init, captured logs, loaded models, vocab.

llama.cpp writes its logs to stderr by default; effctx captures them instead, so that a
failure becomes one line that quotes llama.cpp's own reason, and a success prints nothing.
"""

from __future__ import annotations

import codecs
import ctypes
import os
import signal
import tempfile
import threading
from collections import deque
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import Any, Callable, Iterator, Sequence

import numpy as np

from effctx_core.backends.gguf.binding import llama_cpp
from effctx_core.backends.gguf.facts import check_gguf_file, facts_from_metadata
from effctx_core.contract import ModelFacts
from effctx_core.errors import ModelFileError

_init_lock = threading.Lock()
_initialised = False
_log_lines: deque[str] = deque(maxlen=64)
_GGML_LOG_ERROR = 4  # ggml_log_level: 3 is WARN
# Every line llama.cpp logs while `all_log_lines` is open (None when it is not).
_all_lines: list[str] | None = None


@llama_cpp.llama_log_callback
def _capture_log(level: int, text: bytes, user_data: ctypes.c_void_p) -> None:
    if level == _GGML_LOG_ERROR or b"error" in text or b"failed" in text:
        _log_lines.append(text.decode("utf-8", "replace").strip())
    if _all_lines is not None:
        _all_lines.append(text.decode("utf-8", "replace"))


@contextmanager
def all_log_lines() -> Iterator[list[str]]:
    """Every line llama.cpp logs inside the block: what it says about where it put each
    layer and buffer has no other API."""
    global _all_lines
    lines: list[str] = []
    _all_lines = lines
    try:
        yield lines
    finally:
        _all_lines = None


def ensure_initialised() -> None:
    global _initialised
    with _init_lock:
        if _initialised:
            return
        llama_cpp.llama_log_set(_capture_log, ctypes.c_void_p(0))
        llama_cpp.llama_backend_init()
        _initialised = True


def llama_error_reason(default: str) -> str:
    """The first error llama.cpp logged since `clear_llama_errors`: the root cause,
    where the later lines only repeat that something failed."""
    for line in _log_lines:
        if line:
            return line
    return default


def clear_llama_errors() -> None:
    _log_lines.clear()


_stderr_lock = threading.Lock()


@contextmanager
def stderr_written() -> Iterator[bytearray]:
    """What is written to file descriptor 2 inside the block (filled in when it ends),
    kept from the terminal. llama.cpp says why it refuses some inputs with fprintf(stderr)
    rather than through its log callback, and the console draws on that descriptor: keep
    the block to the one call that may write."""
    written = bytearray()
    with _stderr_lock, tempfile.TemporaryFile() as sink:
        saved = os.dup(2)
        os.dup2(sink.fileno(), 2)
        try:
            yield written
        finally:
            os.dup2(saved, 2)
            os.close(saved)
            sink.seek(0)
            written += sink.read()


@dataclass
class LoadedModel:
    path: Path
    facts: ModelFacts
    model: ctypes.c_void_p
    vocab: ctypes.c_void_p
    n_swa: int
    n_ctx_train: int
    n_vocab: int
    is_recurrent: bool

    def tokenize(self, text: str, add_bos: bool, special: bool = False) -> list[int]:
        data = text.encode("utf-8")
        capacity = len(data) + 8
        buf = (llama_cpp.llama_token * capacity)()
        n = llama_cpp.llama_tokenize(self.vocab, data, len(data), buf, capacity, add_bos, special)
        if n < 0:
            capacity = -n
            buf = (llama_cpp.llama_token * capacity)()
            n = llama_cpp.llama_tokenize(self.vocab, data, len(data), buf, capacity, add_bos, special)
        return list(buf[:n])

    def piece(self, token: int) -> bytes:
        buf = ctypes.create_string_buffer(64)
        n = llama_cpp.llama_token_to_piece(self.vocab, token, buf, 64, 0, False)
        if n < 0:
            buf = ctypes.create_string_buffer(-n)
            n = llama_cpp.llama_token_to_piece(self.vocab, token, buf, -n, 0, False)
        return buf.raw[:n]

    def detokenize(self, tokens: Sequence[int]) -> str:
        return b"".join(self.piece(int(t)) for t in tokens).decode("utf-8", "replace")

    def is_eog(self, token: int) -> bool:
        return bool(llama_cpp.llama_vocab_is_eog(self.vocab, token))

    def text_decoder(self) -> "StreamingDetokenizer":
        return StreamingDetokenizer(self)


class StreamingDetokenizer:
    """Turns a token stream into text without splitting multi-byte UTF-8 characters."""

    def __init__(self, model: LoadedModel):
        self._model = model
        self._utf8 = codecs.getincrementaldecoder("utf-8")("replace")

    def feed(self, token: int) -> str:
        return self._utf8.decode(self._model.piece(token))

    def flush(self) -> str:
        return self._utf8.decode(b"", final=True)


class DeferredInterrupt:
    """Ctrl+C while llama.cpp works inside one long call (a model load, a context
    creation). Python runs its SIGINT handler in whichever Python code comes next, and
    during those calls that is llama.cpp's log callback: a KeyboardInterrupt raised
    there cannot cross the C frames, ctypes prints it as "Exception ignored" and the load
    goes on. So inside this block (main thread only; other threads never see SIGINT) the
    handler just records the interrupt: `hit` tells the load's progress callback to stop,
    and the caller raises KeyboardInterrupt once the call is back in Python."""

    def __init__(self) -> None:
        self.hit = False
        self._previous: Callable[[int, FrameType | None], Any] | int | signal.Handlers | None = None

    def __enter__(self) -> "DeferredInterrupt":
        if threading.current_thread() is threading.main_thread() \
                and signal.getsignal(signal.SIGINT) is signal.default_int_handler:
            self._previous = signal.signal(signal.SIGINT, self._record)
        return self

    def _record(self, signum: int, frame: FrameType | None) -> None:
        self.hit = True

    def __exit__(self, *exc) -> None:
        if self._previous is not None:
            signal.signal(signal.SIGINT, self._previous)
            self._previous = None


_loading = threading.local()


@llama_cpp.llama_progress_callback
def _load_progress(progress: float, user_data: ctypes.c_void_p) -> bool:
    # False makes llama.cpp abort the load (it then returns NULL).
    deferred = getattr(_loading, "deferred", None)
    return not (deferred is not None and deferred.hit)


_models: dict[tuple[str, int, int, bool, int], LoadedModel] = {}
_models_lock = threading.Lock()


def load_model(path: Path, vocab_only: bool = False, gpu_layers: int = 0) -> LoadedModel:
    """Load a GGUF model once per process (weights are mmapped and shared by contexts);
    `vocab_only`: its tokenizer and metadata alone, for a runtime that brings its own weights;
    `gpu_layers`: how many layers go to the devices registered with ggml (RPC workers)
    instead of this process's CPU."""
    ensure_initialised()
    path = Path(path).resolve()
    check_gguf_file(path)
    st = path.stat()
    key = (str(path), st.st_size, st.st_mtime_ns, vocab_only, gpu_layers)
    with _models_lock:
        loaded = _models.get(key)
        if loaded is not None:
            return loaded
        params = llama_cpp.llama_model_default_params()
        params.n_gpu_layers = gpu_layers
        params.vocab_only = vocab_only
        params.progress_callback = _load_progress
        clear_llama_errors()
        with DeferredInterrupt() as deferred:
            _loading.deferred = deferred
            try:
                model = llama_cpp.llama_model_load_from_file(str(path).encode(), params)
            finally:
                _loading.deferred = None
        if deferred.hit:
            if model:
                llama_cpp.llama_model_free(model)
            raise KeyboardInterrupt
        if not model:
            reason = llama_error_reason("llama.cpp could not load it")
            raise ModelFileError(f"cannot load model {path} (corrupt or unsupported GGUF): {reason}")
        try:
            facts = _read_facts(path, model)
        except BaseException:
            llama_cpp.llama_model_free(model)
            raise
        loaded = LoadedModel(
            path=path,
            facts=facts,
            model=model,
            vocab=llama_cpp.llama_model_get_vocab(model),
            n_swa=int(llama_cpp.llama_model_n_swa(model)),
            n_ctx_train=int(llama_cpp.llama_model_n_ctx_train(model)),
            n_vocab=facts.vocab_size,
            is_recurrent=bool(llama_cpp.llama_model_is_recurrent(model))
            or bool(llama_cpp.llama_model_is_hybrid(model)),
        )
        _models[key] = loaded
        return loaded


def _read_facts(path: Path, model) -> ModelFacts:
    buf = ctypes.create_string_buffer(1 << 16)
    meta: dict[str, str] = {}
    for i in range(llama_cpp.llama_model_meta_count(model)):
        llama_cpp.llama_model_meta_key_by_index(model, i, buf, len(buf))
        key = buf.value.decode("utf-8", "replace")
        llama_cpp.llama_model_meta_val_str_by_index(model, i, buf, len(buf))
        meta[key] = buf.value.decode("utf-8", "replace")
    template = llama_cpp.llama_model_chat_template(model, None)
    vocab = llama_cpp.llama_model_get_vocab(model)
    vocab_size = int(llama_cpp.llama_vocab_n_tokens(vocab))

    def token_text(token: int) -> str:
        return bytes(llama_cpp.llama_vocab_get_text(vocab, token)).decode("utf-8", "replace")

    return facts_from_metadata(path, meta, vocab_size, template.decode() if template else None,
                               token_text=token_text)


class Batch:
    """A reusable llama_batch for one sequence, filled from numpy views, not per-token Python."""

    def __init__(self, capacity: int):
        self.capacity = capacity
        self.raw = llama_cpp.llama_batch_init(capacity, 0, 1)
        self._token = np.ctypeslib.as_array(self.raw.token, shape=(capacity,))
        self._pos = np.ctypeslib.as_array(self.raw.pos, shape=(capacity,))
        self._n_seq = np.ctypeslib.as_array(self.raw.n_seq_id, shape=(capacity,))
        self._logits = np.ctypeslib.as_array(
            ctypes.cast(self.raw.logits, ctypes.POINTER(ctypes.c_int8)), shape=(capacity,)
        )
        self._n_seq[:] = 1
        for i in range(capacity):  # once per session: every token belongs to sequence 0
            self.raw.seq_id[i][0] = 0
        self._freed = False

    def fill(self, tokens: np.ndarray, pos0: int, want_logits: bool) -> None:
        n = len(tokens)
        self.raw.n_tokens = n
        self._token[:n] = tokens
        self._pos[:n] = np.arange(pos0, pos0 + n, dtype=self._pos.dtype)
        self._logits[:n] = 0
        if want_logits:
            self._logits[n - 1] = 1

    def fill_every_logit(self, tokens: np.ndarray, pos0: int) -> None:
        """fill, asking for the logits of every position: a scored prefill reads them all."""
        self.fill(tokens, pos0, want_logits=False)
        self._logits[: len(tokens)] = 1

    def free(self) -> None:
        if not self._freed:
            llama_cpp.llama_batch_free(self.raw)
            self._freed = True
