"""The llama-server backend: llama.cpp's HTTP server, started by effctx or attached to."""
