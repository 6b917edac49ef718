"""The records the session contract passes: what a model and a session are and can do,
what each call reports, and the settings of a decode. Sentences about them are made in
events/explain.py, never here."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import TYPE_CHECKING, ClassVar, Final, Literal, Mapping, Sequence

from effctx_core.errors import EffctxError
from effctx_core.identity import RuntimeIdentity

if TYPE_CHECKING:
    import numpy as np


@dataclass(frozen=True)
class ContextLimit:
    """One bound on how many tokens a session can hold, with what imposes it."""

    name: str
    tokens: int
    reason: str


@dataclass(frozen=True)
class Capability:
    """One thing a session can or cannot do, and what decides it."""

    supported: bool
    reason: str


OBSERVED: Final = "observed"  # effctx's executor edits the cache itself and knows each block it holds
MODELED: Final = "modeled"  # derived from the runtime's settings: the runtime exposes no per-block facts


@dataclass(frozen=True)
class ResidencyMap:
    """What a session's residency map is worth, as its backend says: observed or modeled,
    and what decides it. Every view of the map (the cells list, the residency screen, a
    replay) takes the word from here."""

    source: Literal["observed", "modeled"]
    reason: str


@dataclass(frozen=True)
class Capabilities:
    """What a session can really do, in terms every backend shares; each flag carries the
    reason it has its value. The engine, the planners, the cells list and the console
    decide from these alone."""

    # Take a middle range out of the cache and move the later positions down: what an
    # evicting residency policy needs from an executor that edits the cache itself.
    position_shift: Capability
    # Save a session's state and load it back at all (the snapshot tree, the prefix cache).
    state_snapshot: Capability
    # A restored state continues bit for bit as the original did.
    exact_snapshot: Capability
    # Per-token attention mass, which the scored policy ranks blocks by.
    attention_scores: Capability
    # The log-probability of each token a prefill evaluates (score_suffix): the quality
    # gate's teacher-forced NLL under a profile's cache types and residency policy.
    token_scores: Capability
    # A K or V cache element type below 16 bits.
    quantized_k: Capability
    quantized_v: Capability
    # A decode constrained to a GBNF grammar (DecodeConfig.grammar): what structured
    # output and forced tool calls need.
    constrained_decoding: Capability
    # Each decoded token's log-probability and its likeliest alternatives
    # (DecodeConfig.logprobs, TokenChunk.logprob and .top).
    decode_logprobs: Capability
    # The shortest exact cut of the cache: None, any position; N, only positions at least
    # N past the oldest position the windowed layers still hold.
    rollback_floor: int | None
    rollback_reason: str
    residency_map: ResidencyMap
    # Facts worth showing beside the flags (for example where two sources disagree).
    notes: dict[str, str] = field(default_factory=dict)

    FLAGS: ClassVar[tuple[str, ...]] = (
        "position_shift", "state_snapshot", "exact_snapshot", "attention_scores", "token_scores", "quantized_k",
        "quantized_v", "constrained_decoding", "decode_logprobs",
    )

    def flags(self) -> dict[str, Capability]:
        return {name: getattr(self, name) for name in self.FLAGS}

    @property
    def safe_rollback(self) -> str:
        if self.rollback_floor is None:
            return f"any position ({self.rollback_reason})"
        return (f"only positions at least {self.rollback_floor} past the oldest position the windowed layers "
                f"still hold ({self.rollback_reason})")

    def to_dict(self) -> dict:
        out: dict = {name: cap.supported for name, cap in self.flags().items()}
        out["rollback_floor"] = self.rollback_floor
        out["safe_rollback"] = self.safe_rollback
        out["residency_map"] = self.residency_map.source
        out["reasons"] = {**{name: cap.reason for name, cap in self.flags().items()},
                          "residency_map": self.residency_map.reason, **self.notes}
        return out


@dataclass(frozen=True)
class ModelFacts:
    """Facts about a model every backend can state, read by the backend from its own format."""

    path: str
    name: str
    architecture: str
    file_bytes: int  # the model on disk: a file, or every file of a model folder
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
    # The vocabulary's text of the BOS and EOS tokens, which chat templates write.
    bos_text: str | None = None
    eos_text: str | None = None

    @property
    def swa_layers(self) -> tuple[int, ...]:
        if not self.sliding_window:
            return ()
        glob = set(self.global_layers)
        return tuple(i for i in range(self.n_layers) if i not in glob)


@dataclass(frozen=True)
class DeviceShare:
    """What one device outside this process holds of a session (an RPC worker), as the
    runtime placed it: its layers, and the bytes of weights and KV cache it allocated."""

    where: str  # the endpoint, e.g. "127.0.0.1:50052"
    device: str  # the runtime's name for it, e.g. "RPC0"
    layers: tuple[int, ...]  # the transformer blocks it holds
    model_bytes: int
    kv_bytes: int
    output_head: bool = False  # the final norm and the vocabulary projection

    @property
    def layer_text(self) -> str:
        if not self.layers:
            text = "no layers"
        elif len(self.layers) == 1:
            text = f"layer {self.layers[0]}"
        else:
            text = f"layers {self.layers[0]}-{self.layers[-1]}"
        if self.output_head:
            text = "output head" if not self.layers else f"{text} + output head"
        return text


@dataclass(frozen=True)
class StateCosts:
    """What saving and loading a state of `tokens` tokens cost on the cell, beside
    prefilling them: measured when a runtime moves states over a network, where a restore
    can cost more than the prefill it saves."""

    tokens: int
    prefill_ms: float
    save_ms: float
    restore_ms: float

    @property
    def restore_beats_prefill(self) -> bool:
        return self.restore_ms < self.prefill_ms

    @property
    def recompute_reason(self) -> str | None:
        """Why a state is better recomputed than saved and restored here, or None."""
        if self.restore_beats_prefill:
            return None
        return f"a restore costs more than a prefill on this cell ({self.text})"

    @property
    def text(self) -> str:
        return (f"measured on a {self.tokens}-token state: save {self.save_ms:.0f} ms, restore "
                f"{self.restore_ms:.0f} ms, prefill {self.prefill_ms:.0f} ms")


@dataclass(frozen=True)
class ModelInfo:
    facts: ModelFacts
    backend: str
    backend_version: str
    identity: RuntimeIdentity
    device: str  # where the cache and the compute run, as the backend names it ("cpu")
    n_ctx: int
    capabilities: Capabilities
    limits: tuple[ContextLimit, ...]
    # The devices outside this process that hold the model and its cache; empty when it
    # all runs here.
    placement: tuple[DeviceShare, ...] = ()
    # None where a state moves in this process's memory (far cheaper than any prefill).
    state_costs: StateCosts | None = None

    @property
    def max_context(self) -> ContextLimit:
        return min(self.limits, key=lambda limit: limit.tokens)


class PrefixCause(str, Enum):
    """What ensure_prefix found in the cache, in terms every backend shares."""

    EMPTY = "empty"  # nothing was resident
    IDENTICAL = "identical"  # the cache held exactly the asked prefix
    EXTENDS = "extends"  # the cache held the start of it: the rest was prefilled
    DIVERGED = "diverged"  # the cache held other tokens from `diverged_at` on: dropped
    ROLLBACK_LIMIT = "rollback_limit"  # diverged before the earliest exact cut: all re-prefilled
    # The backend brought the prefix back from a state it kept itself; where the prefix
    # diverged before the earliest exact cut (diverged_at, rollback_floor), the state is
    # the longest one at or before the divergence, and the rest was re-prefilled.
    RESTORED = "restored"


@dataclass(frozen=True)
class PrefixStatus:
    prefix_tokens: int
    reused: int
    prefilled: int
    dropped: int
    resident: int
    available: int
    prefill_ms: float
    cause: PrefixCause
    # The first prefix index the cache held another token at (DIVERGED, ROLLBACK_LIMIT;
    # also when the asked prefix ends inside the cache, at its length).
    diverged_at: int | None = None
    # The shortest prefix the cache could be cut back to (ROLLBACK_LIMIT).
    rollback_floor: int | None = None
    # Of the reused tokens, the ones still pending after the call: a reply's last token,
    # sampled and not yet evaluated, that the prefix ends on. The next prefill_suffix
    # evaluates them first, in the same batch as its suffix.
    pending: int = 0

    @property
    def reason(self) -> str:
        return describe_prefix(self.cause, self.diverged_at, self.rollback_floor)


def describe_prefix(cause: PrefixCause, diverged_at: int | None, rollback_floor: int | None) -> str:
    """The sentence for a prefix check, which every view takes from here (events/explain.py
    re-exports it beside the sentences of the engine's causes)."""
    if cause is PrefixCause.DIVERGED:
        return f"diverges from the resident tape at token {diverged_at}"
    if cause is PrefixCause.ROLLBACK_LIMIT:
        return (f"rollback limit: the cache can be cut back to {rollback_floor} tokens at the earliest, "
                f"the prefix diverges at {diverged_at}; re-prefilled from the start")
    if cause is PrefixCause.RESTORED and diverged_at is not None:
        return (f"rollback limit: the cache can be cut back to {rollback_floor} tokens at the earliest, "
                f"the prefix diverges at {diverged_at}; restarted from a state the backend kept")
    return {
        PrefixCause.EMPTY: "empty cache",
        PrefixCause.IDENTICAL: "identical to the resident tape",
        PrefixCause.EXTENDS: "extends the resident tape",
        PrefixCause.RESTORED: "restored by the backend from a state it kept",
    }[cause]


@dataclass(frozen=True)
class SuffixStatus:
    suffix_tokens: int
    prefilled: int
    resident: int
    available: int
    prefill_ms: float


@dataclass(frozen=True)
class ScoredSuffix:
    """A prefill that also scored its tokens: logprobs[i] (float64, one per suffix token)
    is log p(suffix[i] | the tape before it), over the full vocabulary. logprobs[0] comes
    from the next-token logits of the tape the suffix was appended to, NaN when that tape
    was empty (nothing predicts the first token)."""

    status: SuffixStatus
    # Not compared: == on arrays gives an array, which a dataclass's == cannot use.
    logprobs: np.ndarray = field(compare=False)


# The most alternatives a decoded token carries: OpenAI's top_logprobs bound.
MAX_TOP_LOGPROBS: Final = 20


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
    # GBNF text whose start rule is `root`: the reply is constrained to it, and ends once
    # the grammar is complete. Only where the capabilities claim constrained_decoding.
    grammar: str | None = None
    # None: off; k in 0..MAX_TOP_LOGPROBS: each TokenChunk carries its token's
    # log-probability and the k likeliest tokens'. Only where the capabilities claim
    # decode_logprobs.
    logprobs: int | None = None

    def __post_init__(self) -> None:
        if self.logprobs is not None and not 0 <= self.logprobs <= MAX_TOP_LOGPROBS:
            raise EffctxError(f"logprobs must be between 0 and {MAX_TOP_LOGPROBS}, not {self.logprobs}")

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
    # With DecodeConfig.logprobs: log p(token) under the model's raw distribution (the
    # log-softmax of its logits, before any grammar, temperature or top-p), and the k
    # likeliest tokens as (id, log-probability), likeliest first.
    logprob: float | None = None
    top: tuple[tuple[int, float], ...] = ()


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
    # The shortest prefix the cache can be cut back to exactly, now.
    rollback_floor: int
    # What the runtime itself reported for its last request, where it reports one.
    runtime_counts: RuntimeCounts | None = None
    # Shorter tape lengths than rollback_floor that the cache restarts from exactly, from
    # states the backend keeps itself (PrefixCause.RESTORED), ascending.
    restart_points: tuple[int, ...] = ()


@dataclass(frozen=True)
class RuntimeCounts:
    """A runtime's own account of one request (its perf metrics) beside effctx's count of
    what it submitted and handed out: the two must agree."""

    input_tokens: int
    generated_tokens: int
    counted_input_tokens: int
    counted_generated_tokens: int
    ttft_ms: float
    tpot_ms: float

    @property
    def agree(self) -> bool:
        return (self.input_tokens, self.generated_tokens) == (self.counted_input_tokens, self.counted_generated_tokens)


@dataclass(frozen=True)
class SessionSnapshot:
    identity: RuntimeIdentity
    tokens: tuple[int, ...]  # the tokens `state` holds
    state: bytes
    # Next-token logits (float32) when the session had them: restoring them makes the
    # continuation exact, where recomputing the last position gives other numbers
    # (measured max|dlogit| 1.1 between a 1-token and a 14-token batch).
    logits: bytes | None = None
    # The tokens pending after them (a reply's last token, sampled, not evaluated): a
    # restore leaves them pending again.
    pending: tuple[int, ...] = ()

    @property
    def n_tokens(self) -> int:
        return len(self.tokens)

    @property
    def tape(self) -> tuple[int, ...]:
        """The session's tape as it was: the state's tokens, then the pending ones."""
        return self.tokens + self.pending


@dataclass(frozen=True)
class RuntimeEviction:
    """A runtime that evicts cache blocks by itself and says only how it is configured:
    it keeps the first `start_tokens` and the last `recent_tokens` within `max_tokens`,
    in blocks of `block_tokens`. Which middle blocks it keeps is not observable."""

    name: str  # what does it, e.g. "openvino-genai cache eviction"
    start_tokens: int
    recent_tokens: int
    max_tokens: int
    block_tokens: int


@dataclass(frozen=True)
class PrefillProgress:
    """Reported after each prefill chunk."""

    stage: str
    done: int
    total: int
    chunk_tokens: int
    ms: float

@dataclass(frozen=True)
class RangeAction:
    """One range an executor took out of the cache: its tape range, where it sat in the
    cache, what it became, and how the later positions moved."""

    action: str  # "evict" (gone) or "park" (cold: recoverable by recompute)
    start: int
    end: int
    pos_start: int
    pos_end: int
    shifted_from: int  # first cache position moved down by the removal
    shift: int  # how far (negative; 0 when nothing moved)
    ms: float


@dataclass(frozen=True)
class CapacityRow:
    """What a memory budget of cache holds of one K/V cache type pair."""

    kv_cache_type_k: str
    kv_cache_type_v: str
    tokens: int | None  # None where the backend does not model the pair
    # The backend's own figures for the pair (bytes per token or per block, what binds), as JSON.
    figures: Mapping[str, object] = field(default_factory=dict)

    def to_dict(self) -> dict:
        return {"kv_cache_type_k": self.kv_cache_type_k, "kv_cache_type_v": self.kv_cache_type_v, **self.figures,
                "tokens": self.tokens}


@dataclass(frozen=True)
class CapacityReport:
    """A context's KV layout and what a memory budget of cache buys per K/V type pair:
    `effctx info` prints `text` and puts the rest in its JSON."""

    layer_profile: Mapping[str, object]  # the backend's own layout figures, as JSON
    memory_bytes: int
    rows: tuple[CapacityRow, ...]
    text: tuple[str, ...]  # the lines `effctx info` prints
    # More of the backend's own capacity figures (llama: swa_full, n_ctx_limit), as JSON.
    capacity_figures: Mapping[str, object] = field(default_factory=dict)
    # Where the cache lives on devices outside this process (llama on RPC workers), as
    # JSON; None for a backend that never places it elsewhere.
    placement: tuple[Mapping[str, object], ...] | None = None

    def row(self, kv_cache_type_k: str, kv_cache_type_v: str) -> CapacityRow | None:
        return next((r for r in self.rows if (r.kv_cache_type_k, r.kv_cache_type_v) == (kv_cache_type_k,
                                                                                       kv_cache_type_v)), None)

    def to_dict(self) -> dict:
        """The JSON `effctx info` adds (everything but the text)."""
        out: dict = {
            "layer_profile": dict(self.layer_profile),
            "capacity": {"memory_bytes": self.memory_bytes, **self.capacity_figures,
                         "rows": [r.to_dict() for r in self.rows]},
        }
        if self.placement is not None:
            out["placement"] = [dict(p) for p in self.placement]
        return out


def capacity_rows(rows: Sequence[Mapping[str, object]]) -> tuple[CapacityRow, ...]:
    """Typed rows from a backend's row dicts (each with kv_cache_type_k, _v and tokens)."""
    typed = []
    for row in rows:
        figures = {k: v for k, v in row.items() if k not in ("kv_cache_type_k", "kv_cache_type_v", "tokens")}
        tokens = row["tokens"]
        typed.append(CapacityRow(str(row["kv_cache_type_k"]), str(row["kv_cache_type_v"]),
                                 tokens if isinstance(tokens, int) else None, figures))
    return tuple(typed)
