"""The request router: the cheapest start by estimated time, from measured rates."""

from __future__ import annotations

from effctx_core.engine.router import RouteCosts, RouteKind, RouteOption, choose_route

COSTS = RouteCosts(prefill_tokens_per_ms=0.5, restore_bytes_per_ms=1_000_000.0)


def test_a_stored_state_that_saves_more_prefill_than_its_restore_costs_is_chosen():
    resident = RouteOption(RouteKind.RESIDENT, 100)
    stored = RouteOption(RouteKind.RESTORED, 1500, 30_000_000, "k")  # 30 ms restore, 2,800 ms of prefill saved
    assert choose_route(2000, [resident, stored], COSTS) is stored


def test_a_restore_dearer_than_the_prefill_it_saves_is_not_chosen():
    resident = RouteOption(RouteKind.RESIDENT, 1400)
    stored = RouteOption(RouteKind.RESTORED, 1500, 300_000_000, "k")  # 300 ms to save 200 ms
    assert choose_route(2000, [resident, stored], COSTS) is resident


def test_a_tie_goes_to_the_resident_tape():
    resident = RouteOption(RouteKind.RESIDENT, 1500)
    stored = RouteOption(RouteKind.RESTORED, 1500, 0, "k")
    assert choose_route(2000, [stored, resident], COSTS) is resident


def test_measurements_move_the_estimates_towards_what_was_measured():
    costs = RouteCosts(prefill_tokens_per_ms=1.0, restore_bytes_per_ms=1000.0)
    costs.observe_prefill(1000, 500.0)  # 2 tokens/ms
    costs.observe_restore(4000, 1.0)  # 4,000 bytes/ms
    assert (round(costs.prefill_tokens_per_ms, 6), round(costs.restore_bytes_per_ms, 6)) == (1.3, 1900.0)


def test_a_prefill_of_a_few_tokens_does_not_move_the_rate():
    costs = RouteCosts(prefill_tokens_per_ms=1.0)
    costs.observe_prefill(5, 100.0)
    assert costs.prefill_tokens_per_ms == 1.0
