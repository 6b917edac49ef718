"""Who hears an engine's events: a live engine's bus and a replay both hand each event
to the callables that subscribed, in the order they did."""

from __future__ import annotations

from typing import Callable

from effctx_core.events.trace import Event

Subscriber = Callable[[Event], None]
Unsubscribe = Callable[[], None]


class Subscribers:
    def __init__(self) -> None:
        self._calls: list[Subscriber] = []

    def subscribe(self, subscriber: Subscriber) -> Unsubscribe:
        self._calls.append(subscriber)
        return lambda: self._calls.remove(subscriber)

    def deliver(self, event: Event) -> None:
        # A copy: a front end unsubscribes from its own thread while the engine's delivers.
        for subscriber in list(self._calls):
            subscriber(event)
