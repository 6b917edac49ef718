"""The OpenAI-compatible endpoint: HTTP over the engine (`effctx api`)."""

# Here, not in app.py: the command line's default needs it without importing the web stack.
DEFAULT_MAX_BODY = 8 * 1024 * 1024  # bytes of a request body; larger get 413
