"""What a llama-server session is and can do, from the GGUF, the profile and what the
server says about itself: the same description whether a session is open or the cells
list asks."""

from __future__ import annotations

from typing import TYPE_CHECKING

from effctx_core.backends.cache_session import session_identity
from effctx_core.backends.common.limits import n_ctx_limit, trained_limit
from effctx_core.backends.gguf.runtime import LoadedModel
from effctx_core.backends.llama_server.settings import QUANTIZED_TYPES, kv_settings, options_of
from effctx_core.contract import MODELED, Capabilities, Capability, ContextLimit, ModelInfo, ResidencyMap
from effctx_core.units import format_count

if TYPE_CHECKING:
    from effctx_core.profiles import Profile

BACKEND = "llama-server"


def capabilities(vocab: LoadedModel, profile: Profile, snapshots: str | None) -> Capabilities:
    """`snapshots`: None where the session can read and write the slot's files, else why not."""
    options = options_of(profile)
    fa = options.flash_attn
    windowed = bool(vocab.n_swa) and not options.swa_full
    if snapshots is None:
        state = Capability(True, "slot save / restore (/slots/N?action=save|restore): the slot file's bytes are the "
                                 "snapshot" + (", but without swa_full the server re-evaluates a restored tape longer "
                                               "than the window (measured cache_n 0)" if windowed else ""))
        exact = Capability(True, "a restored slot holds the saved bytes, and the server re-evaluates the same last "
                                 "token in the same one-token batch before it samples either way (measured: the "
                                 "same greedy continuation with f16 and q8_0 caches, flash attention on and off)")
    else:
        state = exact = Capability(False, snapshots)
    return Capabilities(
        position_shift=Capability(False, "llama-server owns its slot's cache: its API removes no middle range and "
                                         "shifts no positions for effctx (its own context shift is off)"),
        state_snapshot=state,
        exact_snapshot=exact,
        attention_scores=Capability(False, "llama-server's API returns no attention weights"),
        token_scores=Capability(True, "llama-server reports the log-probability of the token it samples from the "
                                      "raw logits (n_probs, post_sampling_probs off); a logit bias makes it sample "
                                      "the given token: one request per scored token, about one decode step each"),
        quantized_k=Capability(True, f"llama-server takes {', '.join(QUANTIZED_TYPES)} for K (-ctk)"),
        quantized_v=Capability(fa, "flash attention is on (-ctv)" if fa
                               else "needs flash attention: llama.cpp refuses a quantized V cache without it"),
        constrained_decoding=Capability(False, "llama-server streams no id for a token whose text ends inside a "
                                               "UTF-8 character, so effctx goes on after it with a new request, and "
                                               "the server starts a request's grammar again from its root"),
        decode_logprobs=Capability(True, "llama-server reports each sampled token's log-probability and its "
                                         "likeliest alternatives from the raw logits (n_probs, post_sampling_probs "
                                         "off); for a token it streams without them (its text ends inside a UTF-8 "
                                         "character), one request more asks for every token's"),
        rollback_floor=None,
        rollback_reason="the server decides: it cuts its slot where a prompt diverges, and where its sliding-window "
                        "cache cannot be cut there it re-evaluates more; timings.cache_n, reported as reused, says "
                        "what it kept",
        residency_map=ResidencyMap(MODELED, "llama-server owns its slot's cache: the slot holds what effctx sent, "
                                            "and each request's timings.cache_n proves what the server reused"),
        notes={
            "prefill": "a prefill is /completion with n_predict 0: the server evaluates the prompt into the slot, "
                       "samples one token and discards it",
        },
    )


def model_info(vocab: LoadedModel, profile: Profile, version: str, slot_n_ctx: int, device: str,
               snapshots: str | None) -> ModelInfo:
    facts = vocab.facts
    limits = (
        trained_limit(facts),
        n_ctx_limit(profile),
        ContextLimit("slot", slot_n_ctx - 1,
                     f"llama-server refuses a prompt that fills its slot's {format_count(slot_n_ctx)} tokens, and every request "
                     "sends the whole tape"),
    )
    return ModelInfo(
        facts=facts,
        backend=BACKEND,
        backend_version=version,
        identity=session_identity(BACKEND, version, facts, kv_settings(profile), profile.residency.identity_key),
        device=device,
        n_ctx=min(limit.tokens for limit in limits),
        capabilities=capabilities(vocab, profile, snapshots),
        limits=limits,
    )
