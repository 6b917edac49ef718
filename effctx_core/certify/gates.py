"""The gates a cell must pass to be certified, with their thresholds.

Each gate reads measured figures and says passed or not, with the threshold and what
was measured written out, so a failed cell shows why. A gate that cannot be measured on
a cell (no token scores: no NLL) is recorded as skipped with the reason, and the cell's
unsupported codes name it: the certificate then rests on the other gates, and says so.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

from effctx_core.bench.quality import NLLResult, PasskeyGrid
from effctx_core.units import format_counted

# At each certified length at least this share of the needles is found (the default
# model found 13 of 13 keys at 0.5k-4k tokens with f16 K/V).
PASSKEY_MIN_RATE = 0.8
# Made-up keys in the no-needle control: more than this share and a "found" key means nothing.
CONTROL_MAX_FALSE_RATE = 0.5
# The NLL of the reference text may rise by at most this share over the same backend's
# f16, no-eviction cell (q8_0 K/V measured +0.3% on the default model).
NLL_MAX_RELATIVE = 0.05
# Engine over raw loop, prefill and decode: the engine adds no measurable overhead; two
# quick rounds on 2 cores wander by about ±10%.
THROUGHPUT_MIN_RATIO = 0.85


@dataclass(frozen=True)
class Gate:
    name: str
    passed: bool
    threshold: str
    measured: str
    detail: str
    skipped: bool = False

    def to_dict(self) -> dict:
        out = asdict(self)
        out.pop("skipped")
        return out


def certified_length(grid: PasskeyGrid) -> int | None:
    """The longest tested length at which, and at every shorter one, the gate holds."""
    best = None
    for result in grid.lengths:  # shortest first
        if result.rate < PASSKEY_MIN_RATE:
            break
        best = result.length
    return best


def passkey_gate(grid: PasskeyGrid) -> Gate:
    limit = certified_length(grid)
    per_length = ", ".join(f"{r.length}: {r.found}/{r.trials} [{r.ci_low:.2f}, {r.ci_high:.2f}]" for r in grid.lengths)
    control = grid.control
    false_rate = control.false_keys / control.trials if control.trials else 0.0
    measured = f"{per_length}; no-needle control: {control.false_keys}/{control.trials} made up a key"
    threshold = (f"found >= {PASSKEY_MIN_RATE:.0%} at the shortest length (Wilson 95% intervals shown); "
                 f"made-up keys <= {CONTROL_MAX_FALSE_RATE:.0%}")
    if false_rate > CONTROL_MAX_FALSE_RATE:
        return Gate("passkey", False, threshold, measured, "the model names a key where there is none")
    if limit is None:
        first = grid.lengths[0]
        return Gate("passkey", False, threshold, measured, f"found {first.found} of {first.trials} at {first.length} tokens")
    return Gate("passkey", True, threshold, measured, f"passes up to {format_counted(limit, 'token')}")


def nll_gate(nll: NLLResult) -> Gate:
    threshold = f"NLL at most {NLL_MAX_RELATIVE:.0%} above the same backend's f16, no-eviction cell"
    if not nll.supported or nll.nll is None or nll.reference_nll is None:
        return Gate("nll", True, threshold, "not measured", f"skipped: {nll.reason}", skipped=True)
    # A reference of 0 (every token certain) leaves no room: any rise fails the gate.
    rise = ((nll.nll - nll.reference_nll) / nll.reference_nll if nll.reference_nll > 0
            else (0.0 if nll.nll <= 0 else math.inf))
    measured = f"{nll.nll:.4f} against {nll.reference_nll:.4f} ({rise:+.2%}) over {nll.tokens} tokens"
    passed = rise <= NLL_MAX_RELATIVE
    return Gate("nll", passed, threshold, measured, "within the threshold" if passed else "the cache costs answer quality")


def accounting_gate(turns: int, problems: tuple[str, ...]) -> Gate:
    measured = f"{turns} turns checked" + (f"; {len(problems)} differ" if problems else "")
    if problems:
        return Gate("accounting", False, "reported = counted on every turn", measured, problems[0])
    return Gate("accounting", True, "reported = counted on every turn", measured, "every turn adds up")


def throughput_gate(prefill_ratio: float, decode_ratio: float, minimum: float = THROUGHPUT_MIN_RATIO) -> Gate:
    threshold = f"engine/raw >= {minimum} for prefill and decode"
    measured = f"prefill {prefill_ratio:.3f}, decode {decode_ratio:.3f}"
    passed = min(prefill_ratio, decode_ratio) >= minimum
    return Gate("throughput", passed, threshold, measured,
                "the engine adds no measurable overhead" if passed else "the engine is slower than the raw loop")
