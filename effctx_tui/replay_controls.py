"""The session screen's controls while the console plays a recorded trace: the keys that
play, pause, step and change the speed, which other keys a replay leaves on, and the
subtitle that says where the play is."""

from __future__ import annotations

from textual.binding import Binding
from textual.screen import Screen

from effctx_tui.replay_player import ReplayPlayer

TITLE_SECONDS = 0.25  # the subtitle follows the play on its own, between key presses


class ReplayControls:
    BINDINGS = [
        Binding("space", "replay_toggle", "Play/pause (replay)"),
        Binding("n", "replay_step", "Step (replay)"),
        Binding("plus,equals_sign", "replay_speed(1)", "Faster (replay)", key_display="+"),
        Binding("minus", "replay_speed(-1)", "Slower (replay)", key_display="-"),
    ]
    # What would continue the recorded session: shown, but disabled.
    CONTINUING = frozenset({"cells", "new_conversation", "bench"})

    def __init__(self, player: ReplayPlayer, screen: Screen) -> None:
        self.player = player
        self._screen = screen

    @staticmethod
    def owns(action: str) -> bool:
        return action.startswith("replay_")

    def allows(self, action: str) -> bool | None:
        """check_action's answer during a replay: None shows the key disabled."""
        if self.owns(action):
            return True
        if action == "load_model":  # the trace is the session: there is no model to load
            return False
        return None if action in self.CONTINUING else True

    def start(self) -> None:
        self._show_title()
        self._screen.set_interval(TITLE_SECONDS, self._show_title)
        self.player.start(self._screen.app)  # the app's clock: the play goes on under other screens

    def toggle(self) -> None:
        self.player.toggle()
        self._show_title()

    def step(self) -> None:
        self.player.step()
        self._show_title()

    def speed(self, direction: int) -> None:
        self.player.faster(direction)
        self._show_title()

    def _show_title(self) -> None:
        engine = self.player.engine
        self._screen.sub_title = f"{self.player.describe()} · {engine.model_name} · {engine.backend} · n_ctx {engine.n_ctx}"
