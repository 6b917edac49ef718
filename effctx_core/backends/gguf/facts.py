"""GGUF model files: the format check, and the neutral model facts from GGUF metadata."""

from __future__ import annotations

from pathlib import Path
from typing import Callable, overload

from effctx_core.contract import ModelFacts
from effctx_core.errors import ModelFileError
from effctx_core.models import ProgressFn, sha256_file
from effctx_core.user_files import UserFileError, open_input, os_reason

GGUF_MAGIC = b"GGUF"

# Which layers attend globally is not stored in the GGUF for these architectures:
# llama.cpp hard-codes it as a layer pattern (`hparams.set_swa_pattern(n)`): within
# every group of n layers the last one is global, the others use the sliding window.
SWA_LAYER_PATTERN: dict[str, int] = {
    "gemma2": 2,
    "gemma3": 6,
}


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


def facts_from_metadata(
    path: Path,
    meta: dict[str, str],
    vocab_size: int,
    chat_template: str | None,
    progress: ProgressFn | None = None,
    token_text: Callable[[int], str] | None = None,
) -> ModelFacts:
    """Model facts from GGUF key/value metadata as the runtime read it (values as text).

    The metadata comes from llama.cpp's own GGUF loader: the `gguf` package's reader
    builds a Python object per vocabulary entry and takes 12-19 s on a 262k vocabulary.
    """

    @overload
    def number(key: str, default: int) -> int: ...
    @overload
    def number(key: str, default: None = None) -> int | None: ...

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
    eos = number("tokenizer.ggml.eos_token_id")
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
        eos_token_id=eos,
        add_bos=meta.get("tokenizer.ggml.add_bos_token", "true" if bos is not None else "false") == "true",
        chat_template=chat_template,
        bos_text=token_text(bos) if token_text and bos is not None else None,
        eos_text=token_text(eos) if token_text and eos is not None else None,
    )
