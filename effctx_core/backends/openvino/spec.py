"""The OpenVINO backend as the registry knows it: its `[openvino]` options and their checks, no runtime."""

from effctx_core.backends.openvino.settings import (
    CONTRACT_VARIANTS,
    QUANTIZED_TYPES,
    OpenVINOOptions,
    check_profile,
    kv_settings,
    value_problem,
)
from effctx_core.backends.registry import BackendSpec

SPEC = BackendSpec(
    name="openvino",
    summary="openvino-genai (OpenVINO)",
    options=OpenVINOOptions,
    check=check_profile,
    value_check=value_problem,
    kv_settings=kv_settings,
    quantized_kv_types=QUANTIZED_TYPES,
    contract_variants=CONTRACT_VARIANTS,
    backend="effctx_core.backends.openvino.backend:OpenVINOBackend",
)
