"""The OpenVINO backend's profile settings: the `[openvino]` table, the K/V cache element
types the CPU plugin takes, and which settings change what the cache holds."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from effctx_core.backends.conformance import ContractVariant
from effctx_core.backends.table import options_of as table_options_of
from effctx_core.backends.table import unknown_kv_types
from effctx_core.identity import Setting

if TYPE_CHECKING:
    from effctx_core.profiles import Profile

# The CPU plugin's cache element types. u8 and u4 carry per-channel scales (measured bytes
# per 32-token block on Gemma 3: u8 336,384, u4 377,856, f16 589,824). f32 exists only
# on the stateful path (the paged cache refuses it), u4 only on the paged one.
KV_CACHE_TYPES = ("f32", "f16", "bf16", "u8", "u4")
QUANTIZED_TYPES = ("u8", "u4")
PIPELINES = ("stateful", "paged")
WEIGHTS = ("int8", "f16", "f32")
PRECISIONS = ("auto", "f32", "bf16")
AGGREGATION_MODES = ("sum", "norm_sum")
SPARSE_PREFILL = ("none", "trishape", "xattention")
# The two pipelines are two ways of keeping a session's cache: the conformance suite runs both.
CONTRACT_VARIANTS = {
    "stateful": ContractVariant(),
    "paged": ContractVariant(options=(("enable_prefix_caching", True), ("pipeline", "paged"))),
}
# openvino-genai's CPU cache is allocated and evicted in blocks of this many tokens.
BLOCK_TOKENS = 32


@dataclass(frozen=True)
class OpenVINOOptions:
    """The `[openvino]` table of a profile, with its defaults."""

    # "stateful": the IR's own ReadValue/Assign cache on a plain OpenVINO infer request
    # (exact snapshots, truncation anywhere); "paged": openvino-genai's
    # ContinuousBatchingPipeline over PagedAttention (prefix caching, eviction, sparse prefill).
    pipeline: str = "stateful"
    weights: str = "int8"  # the IR's weight format (effctx converts the GGUF to it)
    # "auto" lets the CPU plugin choose (bf16 where the CPU has it); "f32" is the reference.
    inference_precision: str = "auto"
    num_kv_blocks: int = 0  # paged: cache blocks; 0 with cache_size 0 sizes it to n_ctx
    cache_size: int = 0  # paged: cache GB, allocated up front
    enable_prefix_caching: bool = False
    start_size: int = 0  # eviction (paged): tokens kept at the start...
    recent_size: int = 0  # ...and at the end...
    max_cache_size: int = 0  # ...within this many; 0 turns eviction off
    aggregation_mode: str = "norm_sum"
    sparse_prefill: str = "none"

    @property
    def evicts(self) -> bool:
        return self.max_cache_size > 0

    @property
    def scheduler_keys(self) -> tuple[str, ...]:
        """The settings of openvino-genai's scheduler set to anything but their default."""
        base = OpenVINOOptions()
        names = ("num_kv_blocks", "cache_size", "enable_prefix_caching", "start_size", "recent_size",
                 "max_cache_size", "sparse_prefill")
        return tuple(n for n in names if getattr(self, n) != getattr(base, n))


_CHOICES = {"pipeline": PIPELINES, "weights": WEIGHTS, "inference_precision": PRECISIONS,
            "aggregation_mode": AGGREGATION_MODES, "sparse_prefill": SPARSE_PREFILL}


def options_of(profile: "Profile") -> OpenVINOOptions:
    return table_options_of(profile, OpenVINOOptions, "openvino")


def value_problem(key: str, value: object) -> str | None:
    if key in _CHOICES and value not in _CHOICES[key]:
        return f"{value!r} is not one of {', '.join(_CHOICES[key])}"
    if isinstance(value, int) and value < 0:
        return "must be 0 or more"
    return None


def check_profile(profile: "Profile", where: str) -> list[str]:
    """What is wrong with the profile for OpenVINO, one line each (empty: nothing)."""
    problems = unknown_kv_types(profile, KV_CACHE_TYPES, where, " on openvino")
    if problems:
        return problems
    options = options_of(profile)
    if options.pipeline == "stateful":
        if "u4" in (profile.kv_cache_type_k, profile.kv_cache_type_v):
            problems.append(f"{where}: a u4 cache crashes OpenVINO 2026.4's stateful path (segmentation fault at "
                            "the first request, measured); use u8, or openvino.pipeline = \"paged\"")
        if options.scheduler_keys:
            problems.append(f"{where}: openvino.{', openvino.'.join(options.scheduler_keys)} configure the paged "
                            "pipeline's scheduler; set openvino.pipeline = \"paged\" to use them")
        return problems
    kinds = (profile.kv_cache_type_k, profile.kv_cache_type_v)
    if "f32" in kinds:
        problems.append(f"{where}: the paged pipeline's CPU cache takes f16, bf16, u8 or u4, not f32")
    elif (kinds[0] in QUANTIZED_TYPES) != (kinds[1] in QUANTIZED_TYPES):
        problems.append(f"{where}: the paged pipeline quantizes K and V together or not at all "
                        f"(openvino-genai: \"key_cache_type {kinds[0]} with value_cache_type {kinds[1]} is not support\")")
    for key in ("start_size", "recent_size", "max_cache_size"):
        value = getattr(options, key)
        if value % BLOCK_TOKENS:
            problems.append(f"{where}: openvino.{key} {value} must be a multiple of {BLOCK_TOKENS} "
                            "(openvino-genai evicts whole 32-token blocks)")
    if options.evicts:
        if options.enable_prefix_caching:
            problems.append(f"{where}: openvino.enable_prefix_caching together with eviction leaks cache blocks "
                            "in openvino-genai 2026.4 (\"BlockAllocator leaked blocks\"); use one or the other")
        if options.start_size + options.recent_size >= options.max_cache_size:
            problems.append(f"{where}: openvino.start_size + recent_size must be below max_cache_size")
    elif options.start_size or options.recent_size:
        problems.append(f"{where}: openvino.start_size and recent_size need max_cache_size (eviction is off at 0)")
    return problems


def kv_settings(profile: "Profile") -> dict[str, Setting]:
    """The settings that change the numbers written into the cache, for the identity."""
    options = options_of(profile)
    return {
        "kv_cache_type_k": profile.kv_cache_type_k,
        "kv_cache_type_v": profile.kv_cache_type_v,
        "pipeline": options.pipeline,
        "weights": options.weights,
        "inference_precision": options.inference_precision,
        # The CPU plugin's kernels give other numbers for other chunk sizes (measured
        # max|dlogit| 0.19 between one 301-token request and 64-token chunks).
        "n_batch": profile.n_batch,
    }
