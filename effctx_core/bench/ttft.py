"""`effctx bench ttft`: time to first token, cold and warm, on every profile asked, on the
same passkey prompts, so every time stands beside whether the answer was right.

For each profile and prompt length, one passkey prompt (a key hidden in filler, then the
question) is answered three ways:
- cold: a new session, every token prefilled;
- warm, the same session: conversation reset, the same prompt again (effctx keeps what
  the new conversation shares with the old one, all but its last token, where the session
  holds a tape; openvino-genai's prefix cache serves the paged pipeline);
- warm, effctx's prefix snapshot cache: a new session loads the document part from a
  snapshot store an earlier session filled, then prefills the question (backends with
  state snapshots only; the others say why not).

The cold run also gives the prefill rate by position (four runs of its chunks: attention
over a longer cache makes later chunks slower), the decode rate with the whole prompt
behind it, and the process's peak resident memory beside the K/V bytes the backend's
capacity model gives for that context.
"""

from __future__ import annotations

import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable, Sequence

from effctx_core.backends.registry import get_backend
from effctx_core.bench import memory
from effctx_core.bench.prompts import PASSKEY_QUESTION, passkey_prompt
from effctx_core.contract import DecodeConfig, ModelInfo
from effctx_core.engine import SessionEngine, TurnResult
from effctx_core.events.trace import PrefillChunk
from effctx_core.profiles import Profile
from effctx_core.snapshots import SnapshotStore
from effctx_core.units import ms_since, ttft_after

ANSWER_TOKENS = 16
POSITION_SPANS = 4  # the cold prefill's rate is given over four runs of its chunks
MIB = 1 << 20


@dataclass(frozen=True)
class Answer:
    ttft_ms: float | None  # None when no token arrived
    prefilled: int
    reused: int
    decode_tps: float
    found: bool  # the key is in the answer

    @classmethod
    def of(cls, result: TurnResult, key: str, extra_ms: float = 0.0) -> "Answer":
        ttft_ms = ttft_after(extra_ms, result.ttft_ms)
        return cls(None if ttft_ms is None else round(ttft_ms, 1), result.prefilled, result.reused, round(result.decode_tps, 1),
                   key in result.text)


@dataclass(frozen=True)
class PrefillSpan:
    """The prefill rate over one span of prompt positions."""

    start: int
    end: int
    tokens_per_s: float


@dataclass(frozen=True)
class MemoryFigures:
    """What the process held at most during the cold run, beside what the backend's
    capacity model says the K/V cache takes (modeled, not measured). Bytes."""

    # Before the run's first model load: the loaded model stays in memory for the next
    # session of the same file, so every row counts the model against this.
    rss_before_open: int
    peak_rss: int  # the highest resident size from the open to the cold answer's end
    model_file: int  # the model file on disk (a backend that converts it, OpenVINO, holds its own IR)
    kv_modeled: int  # the capacity model's K/V bytes for this context

    @property
    def rest(self) -> int:
        """What the run held beyond the model file and the modeled K/V cache: compute
        buffers, the runtime, the tokenizer (and, on OpenVINO, the converted IR's own size
        over the file's)."""
        return self.peak_rss - self.rss_before_open - self.model_file - self.kv_modeled


@dataclass(frozen=True)
class TTFTRow:
    profile: str
    backend: str
    prompt_tokens: int
    key: str
    cold: Answer
    warm_runtime: Answer
    warm_snapshot: Answer | None
    snapshot_note: str  # why there is no snapshot figure, or where the state came from
    prefill_by_position: tuple[PrefillSpan, ...] = ()  # the cold prefill, span by span
    memory: MemoryFigures | None = None
    memory_note: str = ""  # why there is no memory figure

    def to_dict(self) -> dict:
        out = asdict(self)
        if self.memory is not None:
            out["memory"]["rest"] = self.memory.rest
        return out


def prefill_spans(chunks: Sequence[PrefillChunk], spans: int = POSITION_SPANS) -> tuple[PrefillSpan, ...]:
    """The prefill rate over `spans` runs of consecutive chunks, as equal in chunks as they
    divide (a span is whole chunks, so every rate is what those positions really cost);
    chunks timed at 0 ms (a pipeline that reports only the whole prompt) give none."""
    timed = [c for c in chunks if c.ms > 0]
    groups = [timed[len(timed) * i // spans: len(timed) * (i + 1) // spans] for i in range(spans)]
    return tuple(PrefillSpan(g[0].start, g[-1].start + g[-1].tokens,
                             round(sum(c.tokens for c in g) / sum(c.ms for c in g) * 1000, 1)) for g in groups if g)


def modeled_kv_bytes(info: ModelInfo, profile: Profile, tokens: int) -> int | None:
    """The K/V bytes the backend's capacity model gives for this context holding `tokens`:
    llama.cpp allocates its cache for the whole context when the context is made, a paged
    cache takes whole blocks as the prompt needs them."""
    layout = get_backend(profile.backend).capacity_report(info, profile, 0).layer_profile
    allocated, per_block, block = layout.get("cache_bytes"), layout.get("bytes_per_block"), layout.get("block_tokens")
    if isinstance(allocated, int):
        return allocated
    if isinstance(per_block, int) and isinstance(block, int):
        return -(-tokens // block) * per_block
    return None


def _memory_figures(info: ModelInfo, profile: Profile, tokens: int, rss_before: int | None,
                    peak: int | None) -> tuple[MemoryFigures | None, str]:
    """The cold run's memory figures, or why there are none."""
    if info.placement:
        return None, "the cache is on RPC workers, outside this process"
    if info.backend == "llama-server":
        return None, "the cache is in the llama-server process, outside this one"
    kv = modeled_kv_bytes(info, profile, tokens)
    if kv is None:
        return None, "the backend does not model these K/V types"
    if rss_before is None or peak is None:
        return None, "this system does not report this run's peak resident memory"
    return MemoryFigures(rss_before, peak, info.facts.file_bytes, kv), ""


def _answer(engine: SessionEngine, text: str) -> TurnResult:
    return engine.complete(text, DecodeConfig(max_tokens=ANSWER_TOKENS))


def _answer_with_chunks(engine: SessionEngine, text: str) -> tuple[TurnResult, list[PrefillChunk]]:
    """The answer, and its prefill's chunks as the engine reported them."""
    chunks: list[PrefillChunk] = []
    stop = engine.subscribe(lambda event: chunks.append(event) if isinstance(event, PrefillChunk) else None)
    try:
        return _answer(engine, text), chunks
    finally:
        stop()


def _opened(model_path: Path, profile: Profile, store: SnapshotStore | None = None) -> SessionEngine:
    engine = SessionEngine(model_path, profile, prefix_cache=store)
    engine.open()
    return engine


def _snapshot_run(model_path: Path, profile: Profile, document: str, key: str) -> tuple[Answer | None, str]:
    with tempfile.TemporaryDirectory(prefix="effctx-ttft-") as folder:
        store = SnapshotStore(Path(folder))
        first = _opened(model_path, profile, store)
        try:
            first.load_prefix(document)  # a miss: prefilled and stored
        finally:
            first.close()
        second = _opened(model_path, profile, store)
        try:
            t0 = time.perf_counter_ns()
            loaded = second.load_prefix(document)
            load_ms = ms_since(t0)
            if loaded.cache != "hit":
                return None, f"the stored prefix was not used ({loaded.message or loaded.cache})"
            result = _answer(second, PASSKEY_QUESTION)
            return Answer.of(result, key, load_ms), f"{loaded.tokens}-token prefix restored in {load_ms:.0f} ms"
        finally:
            second.close()


def run_ttft(model_path: Path, profiles: Sequence[Profile], lengths: Sequence[int],
             progress: Callable[[str, int, int], None] = lambda m, d, t: None) -> list[TTFTRow]:
    rows: list[TTFTRow] = []
    total = len(profiles) * len(lengths)
    rss_before = memory.rss_bytes()
    for profile in profiles:
        for length in lengths:
            progress(f"{profile.name}: {length}-token passkey prompt", len(rows), total)
            peak_is_this_row = memory.reset_peak()
            engine = _opened(model_path, profile)
            try:
                prompt = passkey_prompt(engine.session.tokenize, length, 0.5, seed=len(rows))
                cold_result, chunks = _answer_with_chunks(engine, prompt.text)
                peak = memory.peak_rss_bytes()
                engine.reset()
                warm_result = _answer(engine, prompt.text)
                prompt_tokens = cold_result.prefilled
                info = engine.session.info
                snapshots = info.capabilities.state_snapshot
            finally:
                engine.close()
            figures, memory_note = _memory_figures(info, profile, prompt_tokens, rss_before,
                                                  peak if peak_is_this_row else None)
            document = prompt.text[: -len(PASSKEY_QUESTION)]
            # A backend without state snapshots would open a session only to say so.
            snapshot, note = (_snapshot_run(model_path, profile, document, prompt.key) if snapshots.supported
                              else (None, snapshots.reason))
            rows.append(TTFTRow(profile.name, profile.backend, prompt_tokens, prompt.key,
                                Answer.of(cold_result, prompt.key), Answer.of(warm_result, prompt.key), snapshot, note,
                                prefill_spans(chunks), figures, memory_note))
    progress("done", total, total)
    return rows


def _mib(n: int) -> str:
    return f"{n / MIB:,.1f} MiB"


def _k(tokens: int) -> str:
    return f"{tokens / 1024:.3g}k" if tokens >= 1024 else str(tokens)


def ttft_table(rows: Sequence[TTFTRow]) -> str:
    def cell(answer: Answer | None) -> str:
        if answer is None:
            return f"{'-':>17}"
        ttft = "-" if answer.ttft_ms is None else f"{answer.ttft_ms:.0f} ms"
        return f"{ttft:>13} {'ok' if answer.found else 'MISS':>4}"

    lines = [f"{'profile':17}{'tokens':>7}{'cold TTFT':>17}{'warm: session':>17}{'warm: snapshot':>17}{'decode tok/s':>14}"]
    for r in rows:
        lines.append(f"{r.profile:17}{r.prompt_tokens:>7}{cell(r.cold)}{cell(r.warm_runtime)}{cell(r.warm_snapshot)}"
                     f"{r.cold.decode_tps:>14.1f}")
    lines.append("ok / MISS: the passkey answer of that run holds the key (quality beside every time)")
    lines.append("prefill tok/s by position (cold run):")
    for r in rows:
        spans = " · ".join(f"{_k(s.start)}–{_k(s.end)} {s.tokens_per_s:,.0f}" for s in r.prefill_by_position)
        lines.append(f"  {r.profile:17}{r.prompt_tokens:>7}  {spans or '-'}")
    lines.append("peak memory of the cold run (K/V: the capacity model's figure, modeled):")
    for r in rows:
        m = r.memory
        text = (r.memory_note if m is None else
                f"peak RSS {_mib(m.peak_rss)} = {_mib(m.rss_before_open)} before any load + {_mib(m.model_file)} model file "
                f"+ {_mib(m.kv_modeled)} K/V + {_mib(m.rest)} other")
        lines.append(f"  {r.profile:17}{r.prompt_tokens:>7}  {text}")
    notes = {f"{r.profile}: no snapshot figure: {r.snapshot_note}": None for r in rows if r.warm_snapshot is None}
    lines += list(notes)
    return "\n".join(lines)
