"""Figures as a person reads them: counts with separators and their noun in the right
number, sizes in binary units, durations in ms or s, rates only when they were measured."""

from __future__ import annotations

import pytest

from effctx_core.units import (
    format_bytes,
    format_count,
    format_counted,
    format_ms,
    format_rate,
    format_share,
    ttft_after,
    turn_speeds,
)


@pytest.mark.parametrize(("n", "text"), [(0, "0"), (15.0, "15"), (26.8, "27"), (2713, "2,713"), (1_048_576, "1,048,576")])
def test_a_count_is_a_whole_number_with_thousands_separators(n, text):
    assert format_count(n) == text


@pytest.mark.parametrize(("fraction", "text"), [(0.0, "0%"), (0.004, "1%"), (0.5, "50%"), (0.874, "87%"),
                                                (0.997, "99%"), (1.0, "100%")])
def test_a_share_is_whole_percent_and_100_or_0_only_for_all_or_nothing(fraction, text):
    assert format_share(fraction) == text


@pytest.mark.parametrize(("ms", "text"), [
    (0.04, "0.0 ms"), (2.5, "2.5 ms"), (9.96, "10 ms"), (850.2, "850 ms"), (999.4, "999 ms"),
    (999.6, "1.00 s"), (7144.3, "7.14 s"), (26_800, "26.8 s"), (1_234_000, "1,234 s"),
])
def test_a_duration_is_in_ms_below_a_second_and_in_s_above(ms, text):
    assert format_ms(ms) == text


@pytest.mark.parametrize(("rate", "text"), [
    (0.5, "0.5 tok/s"), (0.004, "0.004 tok/s"), (1.0, "1.00 tok/s"), (12.34, "12.3 tok/s"), (1234.5, "1,234 tok/s"),
])
def test_a_measured_rate_keeps_three_significant_digits_and_is_never_printed_as_0(rate, text):
    assert format_rate(rate) == text


@pytest.mark.parametrize("rate", [0.0, float("inf")])
def test_a_rate_of_nothing_timed_is_not_a_figure(rate):
    assert format_rate(rate) is None


@pytest.mark.parametrize(("n", "text"), [(0, "0 tokens"), (1, "1 token"), (2, "2 tokens"), (2048, "2,048 tokens")])
def test_a_counted_noun_is_singular_for_one(n, text):
    assert format_counted(n, "token") == text


@pytest.mark.parametrize(("n", "text"), [
    (0, "0 B"), (1023, "1023 B"), (1024, "1 KiB"), (443_392, "433 KiB"), (1_572_864, "1.5 MiB"),
    (1_310_720, "1.25 MiB"), (3 << 30, "3 GiB"),
])
def test_a_size_is_in_the_largest_binary_unit_it_reaches_with_at_most_two_decimals(n, text):
    assert format_bytes(n) == text


def test_a_turn_shows_only_the_speeds_that_were_measured():
    assert turn_speeds(8, 452.0, 2555.2, 14.6) == [("TTFT", "452 ms"), ("prefill", "2,555 tok/s"), ("decode", "14.6 tok/s")]
    # cancelled in its prefill: no token arrived, so no TTFT, and no decode rate
    assert turn_speeds(0, None, 640.0, 0.0) == [("prefill", "640 tok/s")]
    # ended at once by an end-of-generation token: it arrived and was timed, though not counted
    assert turn_speeds(0, 41.0, 640.0, 0.0) == [("TTFT", "41 ms"), ("prefill", "640 tok/s")]
    # a prefill that took no measurable time has no rate
    assert turn_speeds(1, 3.2, 0.0, 0.0) == [("TTFT", "3.2 ms")]


def test_a_wait_before_the_turn_counts_in_its_ttft_and_a_turn_without_a_token_still_has_none():
    assert ttft_after(250.0, 40.5) == 290.5
    assert ttft_after(250.0, None) is None
