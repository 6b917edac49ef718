"""llama.cpp's side of every backend: its binding (loading effctx's build), the GGUF model
load (a vocabulary-only load for the backends that run the model elsewhere), the model's
facts and file checks, the sampler chain, and the llama.cpp context settings and cache
math that the llama and llama-server cells share. Imports no backend package."""
