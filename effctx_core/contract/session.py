"""The session protocol every backend's sessions implement, and the residency executor
that edits a session's cache with the backend's own primitives."""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable, Generator, Protocol, Sequence, TypeVar

from effctx_core.contract.records import (
    ContextReport,
    DecodeConfig,
    ModelInfo,
    PrefillProgress,
    PrefixStatus,
    RangeAction,
    ScoredSuffix,
    SessionSnapshot,
    SuffixStatus,
    TokenChunk,
)

if TYPE_CHECKING:
    import numpy as np


# Called after each prefill chunk; it may raise to stop the prefill there.
ProgressSink = Callable[[PrefillProgress], None]


class Session(Protocol):
    @property
    def info(self) -> ModelInfo: ...

    @property
    def tokens(self) -> tuple[int, ...]:
        """The tape: resident tokens followed by pending ones (sampled, not yet evaluated)."""
        ...

    def tokenize(self, text: str, add_bos: bool, special: bool = False) -> list[int]:
        """Token ids of `text`; `special`: control-token text (a chat template's turn
        markers) becomes those tokens instead of plain text."""
        ...

    def detokenize(self, tokens: Sequence[int]) -> str: ...

    def ensure_prefix(self, prefix: Sequence[int], progress: ProgressSink | None = None) -> PrefixStatus:
        """Make the tape `prefix`, reusing the longest start of it the cache holds. A
        prefix that is the tape as it is (resident tokens, then pending ones) evaluates
        nothing: the pending tokens stay pending."""
        ...

    def prefill_suffix(self, suffix: Sequence[int], progress: ProgressSink | None = None) -> SuffixStatus:
        """Evaluate the pending tokens, then `suffix`, in the same batches."""
        ...

    def score_suffix(self, suffix: Sequence[int], progress: ProgressSink | None = None) -> ScoredSuffix:
        """prefill_suffix (the same tape, counters, progress and cancel point), also
        returning each suffix token's log-probability. Raises UnsupportedFeatureError,
        the session unchanged, unless the capabilities claim token_scores."""
        ...

    def decode(self, config: DecodeConfig) -> Generator[TokenChunk, None, None]:
        """Stream tokens; closing the generator early leaves the last token handed out
        pending (on the tape, evaluated by the next prefill). At the reply's end the last
        token may be pending too: a backend evaluates it only if its runtime does."""
        ...

    def snapshot(self) -> SessionSnapshot: ...

    def restore(self, snapshot: SessionSnapshot) -> None: ...

    def explain(self) -> ContextReport: ...

    def close(self) -> None: ...


# The residency layer's block table (residency.blocks.BlockTable), above the contract.
Table = TypeVar("Table", contravariant=True)


class ResidencyExecutor(Protocol[Table]):
    """Carries out residency plans on one session with the backend's own primitives."""

    def apply(self, current: Table, planned: Table, demoted: np.ndarray) -> list[RangeAction]:
        """Take the `demoted` blocks (resident in `current`, not in `planned`) out of the
        cache; the actions say what was done, in the order it was done."""
        ...
