"""The backend-neutral session contract: protocols and the records they pass; the errors are in errors.py.

Every backend implements `Backend` and `Session`; the engine, the CLI and the console
only ever see these types.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Iterator, Protocol, Sequence

from effctx_core.identity import RuntimeIdentity

if TYPE_CHECKING:
    from effctx_core.profiles import Profile


# --------------------------------------------------------------------------- records


@dataclass(frozen=True)
class ContextLimit:
    """One bound on how many tokens a session can hold, with what imposes it."""

    name: str
    tokens: int
    reason: str


@dataclass(frozen=True)
class Capabilities:
    """What this session can really do; each flag carries the reason it has its value."""

    position_shift: bool
    quantized_v_cache: bool
    exact_snapshot_replay: bool
    safe_rollback_tokens: str
    reasons: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class ModelFacts:
    """Facts read from the model file itself."""

    path: str
    name: str
    architecture: str
    file_bytes: int
    sha256: str
    n_layers: int
    n_head: int
    n_head_kv: int
    head_dim_k: int
    head_dim_v: int
    n_embd: int
    context_length: int
    sliding_window: int | None
    global_layers: tuple[int, ...]
    global_layers_rule: str
    vocab_size: int
    bos_token_id: int | None
    eos_token_id: int | None
    add_bos: bool
    chat_template: str | None

    @property
    def swa_layers(self) -> tuple[int, ...]:
        if not self.sliding_window:
            return ()
        glob = set(self.global_layers)
        return tuple(i for i in range(self.n_layers) if i not in glob)


@dataclass(frozen=True)
class ModelInfo:
    facts: ModelFacts
    backend: str
    backend_version: str
    identity: RuntimeIdentity
    n_ctx: int
    n_batch: int
    capabilities: Capabilities
    limits: tuple[ContextLimit, ...]

    @property
    def max_context(self) -> ContextLimit:
        return min(self.limits, key=lambda limit: limit.tokens)


@dataclass(frozen=True)
class PrefixStatus:
    prefix_tokens: int
    reused: int
    prefilled: int
    dropped: int
    resident: int
    available: int
    prefill_ms: float
    reason: str


@dataclass(frozen=True)
class SuffixStatus:
    suffix_tokens: int
    prefilled: int
    resident: int
    available: int
    prefill_ms: float


@dataclass(frozen=True)
class DecodeConfig:
    max_tokens: int = 64
    temperature: float = 0.0
    top_p: float = 1.0
    seed: int | None = None
    stop: tuple[str, ...] = ()
    # The caller makes room between tokens (a sliding residency policy): do not stop
    # when the cache is full, the next token will have a slot.
    slide: bool = False

    @property
    def greedy(self) -> bool:
        return self.temperature <= 0.0


@dataclass(frozen=True)
class TokenChunk:
    """One decoded token: id, its text, when it became available and what it cost."""

    token: int
    text: str
    index: int
    ms: float
    stop_reason: str | None = None


@dataclass(frozen=True)
class ContextReport:
    resident_tokens: int
    pending_tokens: int
    available_tokens: int
    n_ctx: int
    prefill_calls: int
    prefill_tokens: int
    prefill_ms: float
    decode_calls: int
    decode_tokens: int
    decode_ms: float
    poisoned: bool
    swa_floor: int


@dataclass(frozen=True)
class SessionSnapshot:
    identity: RuntimeIdentity
    tokens: tuple[int, ...]
    state: bytes
    # Next-token logits (float32) when the session had them: restoring them makes the
    # continuation exact, where recomputing the last position gives other numbers
    # (measured max|dlogit| 1.1 between a 1-token and a 14-token batch).
    logits: bytes | None = None

    @property
    def n_tokens(self) -> int:
        return len(self.tokens)


@dataclass(frozen=True)
class TurnResult:
    text: str
    stop_reason: str
    reused: int
    prefilled: int
    generated: int
    dropped: int
    evicted: int  # tokens the residency policy took out of the cache during the turn
    prefix_reason: str
    ttft_ms: float
    prefill_ms: float
    decode_ms: float
    prefill_tps: float
    decode_tps: float
    resident: int
    available: int
    n_ctx: int


@dataclass(frozen=True)
class PrefillProgress:
    """Reported after each prefill chunk."""

    stage: str
    done: int
    total: int
    chunk_tokens: int
    ms: float


# --------------------------------------------------------------------------- protocols


class ProgressSink(Protocol):
    def __call__(self, progress: PrefillProgress) -> None: ...


class Session(Protocol):
    @property
    def info(self) -> ModelInfo: ...

    @property
    def tokens(self) -> tuple[int, ...]:
        """The tape: resident tokens followed by pending ones (sampled, not yet evaluated)."""
        ...

    def tokenize(self, text: str, add_bos: bool) -> list[int]: ...

    def detokenize(self, tokens: Sequence[int]) -> str: ...

    def ensure_prefix(self, prefix: Sequence[int], progress: ProgressSink | None = None) -> PrefixStatus: ...

    def prefill_suffix(self, suffix: Sequence[int], progress: ProgressSink | None = None) -> SuffixStatus: ...

    def decode(self, config: DecodeConfig) -> Iterator[TokenChunk]: ...

    def snapshot(self) -> SessionSnapshot: ...

    def restore(self, snapshot: SessionSnapshot) -> None: ...

    def explain(self) -> ContextReport: ...

    def close(self) -> None: ...


class Backend(Protocol):
    name: str

    def version(self) -> str: ...

    def describe(self, model_path: str, profile: Profile) -> ModelInfo: ...

    def open(self, model_path: str, profile: Profile) -> Session: ...

    def residency_executor(self, session: Session) -> "ResidencyExecutor": ...


class ResidencyExecutor(Protocol):
    """Carries out residency plans on one session with the backend's own primitives."""

    def check_supported(self, policy: str) -> None:
        """Raise UnsupportedFeatureError if this session cannot carry out the policy."""
        ...

    def apply(self, current, planned, demoted) -> list: ...

