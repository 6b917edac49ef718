"""The llama-server backend as the registry knows it: its `[llama-server]` options and their
checks, no runtime."""

from effctx_core.backends.llama_server.settings import (
    CONTRACT_VARIANTS,
    MOVED_KEYS,
    QUANTIZED_TYPES,
    TABLE,
    LlamaServerOptions,
    check_profile,
    kv_settings,
    value_problem,
)
from effctx_core.backends.registry import BackendSpec

SPEC = BackendSpec(
    name=TABLE,
    summary="llama.cpp's llama-server over HTTP",
    options=LlamaServerOptions,
    check=check_profile,
    value_check=value_problem,
    kv_settings=kv_settings,
    quantized_kv_types=QUANTIZED_TYPES,
    contract_variants=CONTRACT_VARIANTS,
    backend="effctx_core.backends.llama_server.backend:LlamaServerBackend",
    moved_keys=MOVED_KEYS,
)
