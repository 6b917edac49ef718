"""The llama backend as the registry knows it: its `[llama]` options and their checks, no runtime."""

from effctx_core.backends.gguf.context import QUANTIZED_TYPES
from effctx_core.backends.llama.settings import (
    CONTRACT_VARIANTS,
    MOVED_KEYS,
    LlamaOptions,
    check_profile,
    kv_settings,
    value_problem,
)
from effctx_core.backends.registry import BackendSpec

SPEC = BackendSpec(
    name="llama",
    summary="llama-cpp-python (llama.cpp)",
    options=LlamaOptions,
    check=check_profile,
    value_check=value_problem,
    kv_settings=kv_settings,
    quantized_kv_types=QUANTIZED_TYPES,
    contract_variants=CONTRACT_VARIANTS,
    backend="effctx_core.backends.llama.backend:LlamaBackend",
    moved_keys=MOVED_KEYS,
)
