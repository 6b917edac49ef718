"""The quality gates: Wilson intervals, the certified length, and each gate's verdict on
measured figures."""

from __future__ import annotations

import pytest

from effctx_core.bench.quality import ControlResult, LengthResult, NLLResult, PasskeyGrid, wilson
from effctx_core.certify.gates import (
    accounting_gate,
    certified_length,
    nll_gate,
    passkey_gate,
    throughput_gate,
)


def grid(*found_of: tuple[int, int, int], false_keys: int = 0, control_trials: int = 2) -> PasskeyGrid:
    lengths = tuple(LengthResult(length, found, trials, *wilson(found, trials), found) for length, found, trials in found_of)
    return PasskeyGrid(lengths, ControlResult(control_trials, false_keys))


@pytest.mark.parametrize(("successes", "trials", "low", "high"), [
    (5, 6, 0.4365, 0.9699),
    (6, 6, 0.6097, 1.0),
    (0, 10, 0.0, 0.2775),
    (50, 100, 0.4038, 0.5962),
])
def test_the_wilson_interval_matches_its_closed_form(successes, trials, low, high):
    got = wilson(successes, trials)
    assert got == (pytest.approx(low, abs=1e-4), pytest.approx(high, abs=1e-4))


def test_no_trials_say_nothing_about_the_rate():
    assert wilson(0, 0) == (0.0, 1.0)


def test_the_certified_length_is_the_longest_passing_one_with_every_shorter_one_passing():
    assert certified_length(grid((1024, 6, 6), (2048, 5, 6), (4096, 2, 6), (8192, 6, 6))) == 2048


def test_a_failing_shortest_length_certifies_nothing():
    assert certified_length(grid((1024, 3, 6), (2048, 6, 6))) is None


def test_the_passkey_gate_passes_up_to_the_certified_length_and_shows_the_intervals():
    gate = passkey_gate(grid((1024, 2, 2), (2048, 1, 2)))
    assert (gate.passed, gate.detail) == (True, "passes up to 1,024 tokens")
    assert gate.measured == ("1024: 2/2 [0.34, 1.00], 2048: 1/2 [0.09, 0.91]; "
                             "no-needle control: 0/2 made up a key")


def test_the_passkey_gate_fails_when_the_shortest_length_misses():
    gate = passkey_gate(grid((1024, 0, 2)))
    assert (gate.passed, gate.detail) == (False, "found 0 of 2 at 1024 tokens")


def test_the_passkey_gate_fails_a_model_that_makes_up_keys_without_a_needle():
    gate = passkey_gate(grid((1024, 2, 2), false_keys=2))
    assert (gate.passed, gate.detail) == (False, "the model names a key where there is none")


def test_the_nll_gate_passes_within_five_percent_of_the_reference():
    gate = nll_gate(NLLResult(True, "scored", 500, 2.70, 2.60, "exact (f16, no eviction)"))
    assert gate.passed and gate.measured == "2.7000 against 2.6000 (+3.85%) over 500 tokens"


def test_the_nll_gate_fails_a_cache_that_costs_more_than_five_percent():
    gate = nll_gate(NLLResult(True, "scored", 500, 2.80, 2.60, "ref"))
    assert (gate.passed, gate.detail) == (False, "the cache costs answer quality")


def test_a_reference_nll_of_zero_leaves_no_room_for_any_rise():
    # The certificate schema allows 0, so a saved NLL stage may hold it: a gate, not a ZeroDivisionError.
    assert nll_gate(NLLResult(True, "scored", 500, 0.0, 0.0, "ref")).passed
    gate = nll_gate(NLLResult(True, "scored", 500, 0.1, 0.0, "ref"))
    assert (gate.passed, gate.measured) == (False, "0.1000 against 0.0000 (+inf%) over 500 tokens")


def test_an_nll_that_cannot_be_measured_is_skipped_with_its_reason():
    gate = nll_gate(NLLResult(False, "the pipeline exposes no logits"))
    assert (gate.passed, gate.skipped, gate.detail) == (True, True, "skipped: the pipeline exposes no logits")


def test_the_accounting_gate_fails_on_the_first_turn_that_does_not_add_up():
    gate = accounting_gate(9, ("turn 3: reused 10 + computed 5 != prompt 16",))
    assert (gate.passed, gate.detail, gate.measured) == (
        False, "turn 3: reused 10 + computed 5 != prompt 16", "9 turns checked; 1 differ")


def test_the_throughput_gate_fails_an_engine_slower_than_the_raw_loop():
    assert throughput_gate(1.01, 0.99).passed
    gate = throughput_gate(0.70, 0.99)
    assert (gate.passed, gate.measured) == (False, "prefill 0.700, decode 0.990")


def test_the_throughput_gate_takes_the_plans_threshold_and_records_it():
    gate = throughput_gate(0.70, 0.99, minimum=0.5)
    assert (gate.passed, gate.threshold) == (True, "engine/raw >= 0.5 for prefill and decode")
