"""What the benchmark holds the engine against on llama-server: a server of its own,
started from effctx's build with the profile's settings, the way a user would run it.

- raw: one /completion, not streamed, timed by the server itself (timings.prompt_ms and
  predicted_ms): the server's compute with no HTTP, no streaming and no effctx around it;
  each run starts from an empty slot;
- library: the call a user would make, a streamed /completion timed from the client: the
  prefill ends where the first token arrives; each run starts from an empty slot;
- control: the same streamed call turn after turn of a conversation, with cache_prompt
  (the server's default) and the stop strings, reusing what the slot still holds;
- forget: the slot erased, as a new conversation on a fresh server would find it.

The server runs without its host-memory prompt cache (--cache-ram 0), as the session's
do: otherwise an erased slot could be brought back from it, and forget would not forget.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Sequence

from effctx_core.backends.gguf.runtime import load_model
from effctx_core.backends.llama_cpp_build import require_build
from effctx_core.backends.llama_server.client import ServerClient
from effctx_core.backends.llama_server.process import start_server
from effctx_core.backends.llama_server.settings import options_of, started_profile
from effctx_core.backends.llama_server.slots import Slot
from effctx_core.contract import BaselineRun
from effctx_core.errors import EffctxError
from effctx_core.units import ms_between

if TYPE_CHECKING:
    from effctx_core.profiles import Profile

_GREEDY = {"temperature": 0.0, "samplers": ["temperature"]}


class LlamaServerBaseline:
    name = "/completion (llama-server, its own timings)"
    library_name = "/completion streamed (llama-server)"

    def __init__(self, model_path: Path, profile: Profile):
        options = options_of(profile)
        self._vocab = load_model(model_path, vocab_only=True)
        self._server = start_server(require_build("the llama-server baseline"), model_path,
                                    started_profile(profile), options.start_timeout_s)
        self._client = ServerClient(self._server.url, options.timeout_s)
        self._slot = Slot(self._client, 0, None)  # the server's one slot

    def raw(self, prompt: Sequence[int], decode_tokens: int) -> BaselineRun:
        self.forget()
        answer = self._client.post("/completion", {
            "prompt": list(prompt), "n_predict": decode_tokens, "cache_prompt": False, "id_slot": self._slot.index,
            "return_tokens": True, **_GREEDY}, "a raw baseline run")
        try:
            timings = answer["timings"]
            tokens = [int(t) for t in answer["tokens"]]
            prefill_ms, decode_ms = float(timings["prompt_ms"]), float(timings["predicted_ms"])
        except (KeyError, TypeError, ValueError):
            raise EffctxError("llama-server answered the raw baseline run without its timings") from None
        tokens = [t for t in tokens if not self._vocab.is_eog(t)]
        return BaselineRun(len(prompt), prefill_ms, len(tokens), decode_ms, tuple(tokens))

    def library(self, prompt: Sequence[int], decode_tokens: int) -> BaselineRun:
        self.forget()
        return self._stream({"prompt": list(prompt), "n_predict": decode_tokens})

    def control(self, prompt: Sequence[int], decode_tokens: int, stop: tuple[str, ...]) -> BaselineRun:
        return self._stream({"prompt": list(prompt), "n_predict": decode_tokens, "stop": list(stop)})

    def _stream(self, body: dict[str, Any]) -> BaselineRun:
        """A streamed greedy /completion as a client reads it. A token whose text ends
        inside a UTF-8 character comes without its id (the server sends its text with the
        next token's): the ids are then short of the tokens counted."""
        tokens: list[int] = []
        counted = 0
        t0 = time.perf_counter_ns()
        t_first: int | None = None
        with self._client.stream("/completion", {**body, "cache_prompt": True, "id_slot": self._slot.index,
                                                 "return_tokens": True, **_GREEDY}, "a baseline run") as events:
            for event in events:
                ids = [int(t) for t in event.data.get("tokens") or []]
                if ids and t_first is None:
                    t_first = time.perf_counter_ns()
                tokens += ids
                counted = max(counted, int(event.data.get("tokens_predicted", 0)))
                if event.final:
                    break
        t_end = time.perf_counter_ns()
        if tokens and self._vocab.is_eog(tokens[-1]):
            tokens.pop()  # the end-of-generation token ends the stream; it is not output
            counted -= 1
        first = t_first if t_first is not None else t_end
        return BaselineRun(len(body["prompt"]), ms_between(t0, first), counted, ms_between(first, t_end), tuple(tokens))

    def forget(self) -> None:
        self._slot.erase()

    def close(self) -> None:
        self._server.stop()
