"""The OpenAI-compatible endpoint: HTTP over the engine (`effctx api`)."""
