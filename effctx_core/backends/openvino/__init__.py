"""The OpenVINO backend: the GGUF model converted to OpenVINO IR by effctx itself, no torch."""
