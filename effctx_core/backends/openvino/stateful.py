"""An OpenVINO session on the IR's own stateful cache: one infer request, whose ReadValue /
Assign variables hold K and V of every layer for the tokens fed so far.

query_state() hands those tensors out (as f32, whatever the cache's element type) and
takes them back, so a snapshot is a copy of them, a cut is a slice along the token axis,
and a restore sets them back: nothing is recomputed.
"""

from __future__ import annotations

import io
import time
from typing import TYPE_CHECKING, Sequence

import numpy as np
import openvino as ov

from effctx_core.backends.cache_session import CacheSession, check_trained_context
from effctx_core.backends.decode_loop import InProcessDecode, token_logprobs
from effctx_core.backends.gguf.runtime import LoadedModel
from effctx_core.backends.gguf.sampling import Sampler
from effctx_core.backends.openvino.convert import ConvertedModel
from effctx_core.backends.openvino.info import model_info
from effctx_core.backends.openvino.runtime import compiled_model, first_line, infer_inputs, plugin_config
from effctx_core.backends.openvino.settings import options_of
from effctx_core.contract import DecodeConfig, PrefillProgress, ProgressSink, SessionSnapshot
from effctx_core.errors import EffctxError
from effctx_core.units import ms_since

if TYPE_CHECKING:
    from effctx_core.profiles import Profile

class OpenVINOStatefulSession(InProcessDecode, CacheSession):
    def __init__(self, vocab: LoadedModel, ir: ConvertedModel, profile: Profile, backend_version: str):
        check_trained_context(profile.n_ctx, vocab.facts.context_length)
        super().__init__(vocab, profile.n_ctx)
        self._llama_vocab = vocab.vocab  # what llama.cpp's samplers (a grammar's) read the tokens from
        self._profile = profile
        self._n_batch = profile.n_batch
        self._compiled = compiled_model(ir.xml, plugin_config(profile, options_of(profile)))
        self._request = self._compiled.create_infer_request()
        self._logits: np.ndarray | None = None
        self._logits_ok = False
        self._info = model_info(vocab, profile, backend_version, f"converted IR {ir.path} ({ir.manifest['weights']})")
        self.identity = self._info.identity

    # ------------------------------------------------------------------ the cache

    def _states(self) -> list:
        return list(self._request.query_state())

    def _set_states(self, arrays: Sequence[np.ndarray]) -> None:
        for state, array in zip(self._states(), arrays):
            state.state = ov.Tensor(np.ascontiguousarray(array, dtype=np.float32))

    def _append(self, tokens: Sequence[int], stage: str, progress: ProgressSink | None) -> float:
        total = len(tokens)
        arr = np.asarray(tokens, dtype=np.int64)
        elapsed = 0.0
        for off in range(0, total, self._n_batch):
            chunk = arr[off : off + self._n_batch]
            past = len(self._tape.resident)
            t0 = time.perf_counter_ns()
            try:
                self._request.infer(infer_inputs(chunk, past))
            except RuntimeError as exc:
                raise self._poison(f"OpenVINO failed at position {past}: {first_line(exc)}") from None
            ms = ms_since(t0)
            self._tape.resident.extend(int(t) for t in chunk)
            # Copied: the output tensor is overwritten by the next request.
            self._logits = np.array(self._request.get_tensor("logits").data[0, -1], dtype=np.float32)
            self._logits_ok = True
            elapsed += ms
            if progress is not None:
                progress(PrefillProgress(stage, off + len(chunk), total, len(chunk), ms))
        return elapsed

    def _append_scored(self, tokens: Sequence[int], stage: str, progress: ProgressSink | None) -> tuple[float, np.ndarray]:
        """Append tokens one infer request each, scoring the token after each.

        The IR outputs the logits of a request's last position only (convert.py builds it
        with logits_of="last"), so every scored token is its own request: about one decode
        step per token, where a prefill runs n_batch tokens in one. Chunks of n_batch
        tokens are still the unit progress is reported (and a cancel honoured) by."""
        total = len(tokens)
        arr = np.asarray(tokens, dtype=np.int64)
        scores = np.empty(total - 1, dtype=np.float64)
        vocab = self._info.facts.vocab_size
        # Until a chunk is done the held logits are not those of the resident tape.
        self._logits_ok, self._logits = False, None
        elapsed = 0.0
        for off in range(0, total, self._n_batch):
            chunk = arr[off : off + self._n_batch]
            rows = np.empty((len(chunk), vocab), dtype=np.float32)
            t0 = time.perf_counter_ns()
            for j in range(len(chunk)):
                past = len(self._tape.resident)
                try:
                    self._request.infer(infer_inputs(chunk[j : j + 1], past))
                except RuntimeError as exc:
                    raise self._poison(f"OpenVINO failed at position {past}: {first_line(exc)}") from None
                self._tape.resident.append(int(chunk[j]))
                rows[j] = self._request.get_tensor("logits").data[0, -1]
            # Row j predicts the token after chunk[j]; the last row of the whole append
            # predicts one not given yet and stays as the next-token logits.
            targets = arr[off + 1 : off + len(chunk) + 1]
            scores[off : off + len(targets)] = token_logprobs(rows[: len(targets)], targets)
            self._logits, self._logits_ok = rows[-1].copy(), True
            ms = ms_since(t0)
            elapsed += ms
            if progress is not None:
                progress(PrefillProgress(stage, off + len(chunk), total, len(chunk), ms))
        return elapsed, scores

    def _next_logits(self) -> np.ndarray:
        assert self._logits is not None  # set whenever _logits_ok is
        return self._logits

    def _truncate(self, keep: int) -> None:
        if keep >= len(self._tape.resident):
            return
        if keep == 0:
            self._request.reset_state()
        else:
            # every state tensor is [batch, kv heads, tokens, head dim]
            self._set_states([s.state.data[:, :, :keep] for s in self._states()])
        del self._tape.resident[keep:]
        self._logits_ok = False
        self._logits = None

    def _refresh_logits(self) -> None:
        last = self._tape.resident[-1]
        self._truncate(len(self._tape.resident) - 1)
        self._eval([last], "refresh", None)

    # ------------------------------------------------------------------ sampling

    def _open_sampler(self, config: DecodeConfig) -> Sampler:
        return Sampler(config, self._llama_vocab)

    def _next_token(self, sampler: Sampler) -> int:
        assert self._logits is not None  # decode refreshes the logits first
        return sampler.from_logits(self._logits)

    # ------------------------------------------------------------------ snapshots

    def snapshot(self) -> SessionSnapshot:
        self._check_usable()
        buffer = io.BytesIO()
        if self._tape.resident:
            # The states are f32 whatever the cache holds; an f16 cache is stored as f16,
            # which gives back the same values at half the size.
            lossless_f16 = self._profile.kv_cache_type_k == self._profile.kv_cache_type_v == "f16"
            arrays = {s.name: np.array(s.state.data, dtype=np.float16 if lossless_f16 else np.float32)
                      for s in self._states()}
            np.savez(buffer, **arrays)  # type: ignore[arg-type]
        logits = self._logits.tobytes() if self._logits_ok and self._logits is not None else None
        return SessionSnapshot(self.identity, tuple(self._tape.resident), buffer.getvalue(), logits, tuple(self._tape.pending))

    def _read_state(self, snapshot: SessionSnapshot) -> list[np.ndarray]:
        """The snapshot's tensors in the request's state order, checked against it before
        anything is set: a state that does not fit leaves the session as it was."""
        try:
            with np.load(io.BytesIO(snapshot.state), allow_pickle=False) as stored:
                arrays = {name: stored[name] for name in stored.files}
        except (ValueError, OSError, EOFError) as exc:
            raise EffctxError(f"the snapshot's state is not an OpenVINO cache state: {exc}") from None
        facts = self._info.facts
        out = []
        for state in self._states():
            array = arrays.get(state.name)
            head_dim = facts.head_dim_v if ".value" in state.name else facts.head_dim_k
            if array is None or array.shape != (1, facts.n_head_kv, snapshot.n_tokens, head_dim):
                raise EffctxError(f"the snapshot's state does not fit this model's cache ({state.name})")
            out.append(array)
        return out

    def restore(self, snapshot: SessionSnapshot) -> None:
        self._check_restorable(snapshot)
        arrays = self._read_state(snapshot) if snapshot.tokens else []
        self._request.reset_state()
        self._tape.reset()
        self._logits_ok, self._logits = False, None
        if not snapshot.tokens:
            return
        self._set_states(arrays)
        self._tape.reset(snapshot.tokens, snapshot.pending)
        if snapshot.logits is not None and len(snapshot.logits) == 4 * self._info.facts.vocab_size:
            self._logits = np.frombuffer(snapshot.logits, dtype=np.float32).copy()
            self._logits_ok = True
