"""The session screen's controls while the console plays a recorded trace: the keys that
play, pause, step, play again and change the speed, which other keys a replay leaves on,
and the subtitle that says where the play is."""

from __future__ import annotations

from typing import Callable

from textual.binding import Binding
from textual.screen import Screen

from effctx_tui.replay_player import ReplayPlayer

TITLE_SECONDS = 0.25  # the subtitle follows the play on its own, between key presses


class ReplayControls:
    # First in the screen's BINDINGS, so a narrow footer cuts the others, not these.
    BINDINGS = [
        Binding("space", "replay_toggle", "Play/pause", tooltip="Play or pause the recording"),
        Binding("space", "replay_restart", "Play again", tooltip="Play the recording again from its start"),
        Binding("n", "replay_step", "Step", tooltip="Play the recording's next event"),
        Binding("plus,equals_sign", "replay_speed(1)", "Faster", key_display="+", tooltip="Play the recording faster"),
        Binding("minus", "replay_speed(-1)", "Slower", key_display="-", tooltip="Play the recording slower"),
    ]
    # A replay is watched, not continued: only the keys that look at it act.
    WATCHING = frozenset({"residency", "snapshots", "timings", "requests"})

    def __init__(self, player: ReplayPlayer, screen: Screen, rewound: Callable[[], None]) -> None:
        """`rewound` clears the screen before the recording plays again from its start."""
        self.player = player
        self._screen = screen
        self._rewound = rewound
        self._done = player.done

    @staticmethod
    def owns(action: str) -> bool:
        return action.startswith("replay_")

    def allows(self, action: str, parameters: tuple[object, ...]) -> bool:
        """check_action's answer during a replay: a key that cannot act is hidden."""
        done = self.player.done
        if action in ("replay_toggle", "replay_step"):
            return not done
        if action == "replay_restart":
            return done
        if action == "replay_speed":
            direction = parameters[0]
            assert isinstance(direction, int)  # the speed keys' own bindings
            return self.player.can_go_faster(direction)
        return action in self.WATCHING

    def start(self) -> None:
        self._show_title()
        self._screen.set_interval(TITLE_SECONDS, self._show_title)
        self.player.start(self._screen.app)  # the app's clock: the play goes on under other screens

    def toggle(self) -> None:
        self.player.toggle()
        self._show_title()

    def restart(self) -> None:
        self.player.restart()
        self._rewound()
        self._show_title()

    def step(self) -> None:
        self.player.step()
        self._show_title()

    def speed(self, direction: int) -> None:
        self.player.faster(direction)
        self._screen.refresh_bindings()  # at the fastest or slowest, that key goes
        self._show_title()

    def _show_title(self) -> None:
        if self.player.done != self._done:  # at the end the play keys give way to Play again
            self._done = self.player.done
            self._screen.refresh_bindings()
        engine = self.player.engine
        self._screen.sub_title = f"{self.player.describe()} · {engine.model_name} · {engine.backend} · n_ctx {engine.n_ctx:,}"
