"""What an OpenVINO session is and can do, stated from the profile and the pipeline that
runs it: the same description whether a session is open or the cells list asks."""

from __future__ import annotations

from typing import TYPE_CHECKING

from effctx_core.backends.cache_session import session_identity
from effctx_core.backends.common.limits import n_ctx_limit, trained_limit
from effctx_core.backends.gguf.runtime import LoadedModel
from effctx_core.backends.openvino.runtime import DEVICE
from effctx_core.backends.openvino.settings import BLOCK_TOKENS, QUANTIZED_TYPES, kv_settings, options_of
from effctx_core.contract import MODELED, OBSERVED, Capabilities, Capability, ContextLimit, ModelInfo, ResidencyMap
from effctx_core.units import format_counted

if TYPE_CHECKING:
    from effctx_core.profiles import Profile

# Cache element types whose values come back unchanged through query_state's f32 tensors.
_LOSSLESS_STATE = ("f32", "f16", "bf16")


def _stateful_capabilities(profile: Profile) -> Capabilities:
    types = (profile.kv_cache_type_k, profile.kv_cache_type_v)
    lossless = all(t in _LOSSLESS_STATE for t in types)
    return Capabilities(
        position_shift=Capability(False, "OpenVINO's stateful cache holds keys after RoPE and has no operation "
                                         "that moves them to other positions"),
        state_snapshot=Capability(True, "query_state() reads and writes the infer request's cache tensors"),
        exact_snapshot=Capability(lossless, (
            f"a {'/'.join(sorted(set(types)))} cache comes back unchanged through query_state's f32 tensors "
            "(measured: identical logits after a restore)" if lossless
            else "a u8 cache is quantized again when a state is set back (measured max|dlogit| 0.25 two tokens "
                 "after a restore)"
        )),
        attention_scores=Capability(False, "OpenVINO's fused attention does not output attention weights"),
        token_scores=Capability(True, "the IR outputs the last position's logits, so scoring runs one infer request "
                                      "per token (about one decode step each)"),
        quantized_k=Capability(True, "KEY_CACHE_PRECISION u8 (u4 crashes the stateful path)"),
        quantized_v=Capability(True, "VALUE_CACHE_PRECISION u8 (u4 crashes the stateful path)"),
        constrained_decoding=Capability(True, "effctx samples the IR's logits with llama.cpp's samplers over the "
                                              "GGUF's vocabulary, its grammar sampler (GBNF) first"),
        decode_logprobs=Capability(True, "the IR outputs the next-token logits: their log-softmax over the "
                                         "vocabulary, in float64"),
        rollback_floor=None,
        rollback_reason="the stateful cache keeps every position of every layer (the sliding window is a mask), "
                        "so it can be cut anywhere",
        residency_map=ResidencyMap(OBSERVED, "the stateful cache holds exactly the tape effctx set, every "
                                             "position of it"),
    )


def _paged_capabilities(profile: Profile) -> Capabilities:
    options = options_of(profile)
    restore = ("openvino-genai has no KV state API: a restore recomputes the tape"
               + (" (its prefix cache may serve the blocks it still holds)" if options.enable_prefix_caching else ""))
    notes: dict[str, str] = {}
    if not options.enable_prefix_caching:
        notes["prefill"] = ("without prefix caching nothing outlives a request: a prefill queues its tokens and the "
                            "request that decodes computes them (its time to first token carries the cost)")
    if options.evicts:
        notes["eviction"] = (f"openvino-genai keeps {options.start_size} start and {options.recent_size} recent "
                             f"tokens within {options.max_cache_size} ({options.aggregation_mode} scores)")
    return Capabilities(
        position_shift=Capability(False, "openvino-genai's scheduler owns the paged cache; effctx cannot edit it"),
        state_snapshot=Capability(False, restore),
        exact_snapshot=Capability(False, restore),
        attention_scores=Capability(False, "openvino-genai aggregates attention scores inside its eviction and "
                                           "does not expose them"),
        token_scores=Capability(False, "openvino-genai's ContinuousBatchingPipeline exposes no logits, only the "
                                       "tokens it generates"),
        quantized_k=Capability(True, f"KEY_CACHE_PRECISION {' or '.join(QUANTIZED_TYPES)}"),
        quantized_v=Capability(True, f"VALUE_CACHE_PRECISION {' or '.join(QUANTIZED_TYPES)}"),
        constrained_decoding=Capability(False, "openvino-genai's scheduler samples for itself: llama.cpp's grammar "
                                               "sampler cannot run in it, and effctx hands it no grammar for its own "
                                               "structured output (xgrammar)"),
        decode_logprobs=Capability(False, "openvino-genai's scheduler samples for itself and returns one "
                                          "log-probability per token at most (GenerationConfig.logprobs treats any "
                                          "k above 1 as 1), never the alternatives"),
        rollback_floor=None,
        rollback_reason="every request is submitted whole: a shorter prefix is recomputed from the prefix cache",
        residency_map=ResidencyMap(MODELED, "openvino-genai's scheduler owns the paged cache and reports its usage, "
                                            "not which blocks it kept"),
        notes=notes,
    )


def model_info(vocab: LoadedModel, profile: Profile, backend_version: str, converted_note: str) -> ModelInfo:
    facts = vocab.facts
    options = options_of(profile)
    capabilities = _stateful_capabilities(profile) if options.pipeline == "stateful" else _paged_capabilities(profile)
    capabilities.notes["model"] = converted_note
    limits = [
        trained_limit(facts),
        n_ctx_limit(profile),
    ]
    if options.pipeline == "paged" and options.num_kv_blocks:
        limits.append(ContextLimit("kv_blocks", options.num_kv_blocks * BLOCK_TOKENS,
                                   f"{format_counted(options.num_kv_blocks, 'cache block')} of {BLOCK_TOKENS} tokens"))
    return ModelInfo(
        facts=facts,
        backend="openvino",
        backend_version=backend_version,
        identity=session_identity("openvino", backend_version, facts, kv_settings(profile),
                                  profile.residency.identity_key),
        device=DEVICE.lower(),
        n_ctx=profile.n_ctx,
        capabilities=capabilities,
        limits=tuple(limits),
    )
