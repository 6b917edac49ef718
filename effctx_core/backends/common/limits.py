"""The context limits every backend reports in the same words: the model's trained context
and the profile's n_ctx."""

from __future__ import annotations

from typing import TYPE_CHECKING

from effctx_core.contract import ContextLimit, ModelFacts
from effctx_core.units import format_counted

if TYPE_CHECKING:
    from effctx_core.profiles import Profile


def trained_limit(facts: ModelFacts, tokens: int | None = None) -> ContextLimit:
    """`tokens`: what the runtime read from the file, where it reads it itself (llama.cpp's
    n_ctx_train); the GGUF's context_length otherwise."""
    tokens = facts.context_length if tokens is None else tokens
    return ContextLimit("trained", tokens, f"the model was trained for {format_counted(tokens, 'token')} "
                                           f"(GGUF {facts.architecture}.context_length)")


def n_ctx_limit(profile: Profile) -> ContextLimit:
    return ContextLimit("n_ctx", profile.n_ctx,
                        f"profile {profile.name!r} holds at most {format_counted(profile.n_ctx, 'token')}")
