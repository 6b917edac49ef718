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
"""

from __future__ import annotations

import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable, Sequence

from effctx_core.bench.prompts import PASSKEY_QUESTION, passkey_prompt
from effctx_core.contract import DecodeConfig
from effctx_core.engine import SessionEngine, TurnResult
from effctx_core.profiles import Profile
from effctx_core.snapshots import SnapshotStore
from effctx_core.units import ms_since, ttft_after

ANSWER_TOKENS = 16


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
class TTFTRow:
    profile: str
    backend: str
    prompt_tokens: int
    key: str
    cold: Answer
    warm_runtime: Answer
    warm_snapshot: Answer | None
    snapshot_note: str  # why there is no snapshot figure, or where the state came from

    def to_dict(self) -> dict:
        return asdict(self)


def _answer(engine: SessionEngine, text: str) -> TurnResult:
    return engine.complete(text, DecodeConfig(max_tokens=ANSWER_TOKENS))


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
    for profile in profiles:
        for length in lengths:
            progress(f"{profile.name}: {length}-token passkey prompt", len(rows), total)
            engine = _opened(model_path, profile)
            try:
                prompt = passkey_prompt(engine.session.tokenize, length, 0.5, seed=len(rows))
                cold_result = _answer(engine, prompt.text)
                engine.reset()
                warm_result = _answer(engine, prompt.text)
                prompt_tokens = cold_result.prefilled
                snapshots = engine.session.info.capabilities.state_snapshot
            finally:
                engine.close()
            document = prompt.text[: -len(PASSKEY_QUESTION)]
            # A backend without state snapshots would open a session only to say so.
            snapshot, note = (_snapshot_run(model_path, profile, document, prompt.key) if snapshots.supported
                              else (None, snapshots.reason))
            rows.append(TTFTRow(profile.name, profile.backend, prompt_tokens, prompt.key,
                                Answer.of(cold_result, prompt.key), Answer.of(warm_result, prompt.key), snapshot, note))
    progress("done", total, total)
    return rows


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
    notes = {f"{r.profile}: no snapshot figure: {r.snapshot_note}": None for r in rows if r.warm_snapshot is None}
    lines += list(notes)
    return "\n".join(lines)
