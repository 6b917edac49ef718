"""The baseline protocol: a backend's raw loop and the library's own API, which the
benchmark and the certification hold the engine against."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, Sequence


@dataclass(frozen=True)
class BaselineRun:
    """One run of a backend's plain loop: prefill a prompt, decode greedily."""

    prefill_tokens: int
    prefill_ms: float
    decode_tokens: int
    decode_ms: float
    tokens: tuple[int, ...]  # the decoded ids, to check the engine decoded the same


class Baseline(Protocol):
    """A backend's raw loop and what a user would run instead of effctx, on one loaded model."""

    name: str  # what the raw loop is, e.g. "llama_decode loop"
    library_name: str  # the library's own high-level API, e.g. "Llama.create_completion"

    def raw(self, prompt: Sequence[int], decode_tokens: int) -> BaselineRun: ...

    def library(self, prompt: Sequence[int], decode_tokens: int) -> BaselineRun: ...

    def control(self, prompt: Sequence[int], decode_tokens: int, stop: tuple[str, ...]) -> BaselineRun:
        """One turn of a conversation the way a user would run it without effctx: the
        library's own call, keeping whatever the library itself reuses from its previous
        call (llama-cpp-python: the longest common prefix; openvino-genai: its prefix
        cache). Greedy, streamed, stopping at `stop` and at end-of-generation tokens."""
        ...

    def forget(self) -> None:
        """Drop everything `control` kept, as a new process of the user's program would."""
        ...

    def close(self) -> None: ...
