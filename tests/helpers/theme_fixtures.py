"""Apps for the look-and-feel tests: ConsoleApp (themes, help, palette) over the fixed
residency tape of residency_tape or the hand-made snapshot tree of
snapshot_fixtures, with the user config dir in a temporary folder so no test reads or
writes the real settings."""

from __future__ import annotations

import pytest
from textual.app import ComposeResult
from textual.screen import Screen

from effctx_core.residency.report import OBSERVED
from effctx_tui.console import ConsoleApp
from effctx_tui.screens.residency import ResidencyScreen
from effctx_tui.screens.snapshots import SnapshotsScreen
from effctx_tui.widgets.footer import EffctxFooter
from effctx_tui.widgets.residency_strip import ResidencyStrip
from tests.helpers.residency_tape import SIZE, planned_tape
from tests.helpers.snapshot_fixtures import fake_detokenize, fixed_restores, fixed_tree

__all__ = ["SIZE", "config_home", "StripApp", "ThemedResidencyApp", "ThemedSnapshotsApp"]


@pytest.fixture
def config_home(tmp_path, monkeypatch):
    """The folder that holds effctx/settings.toml and effctx/themes/ for this test."""
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    return tmp_path / "effctx"


class StripScreen(Screen):
    def compose(self) -> ComposeResult:
        yield ResidencyStrip(planned_tape(), id="residency-strip")
        yield EffctxFooter()


class StripApp(ConsoleApp):
    """The session screen's strip (and its stylesheet rule) without an engine."""

    def on_mount(self) -> None:
        self.push_screen(StripScreen())


class ThemedResidencyApp(ConsoleApp):
    def on_mount(self) -> None:
        self.push_screen(ResidencyScreen(planned_tape(), "streaming", source=OBSERVED, budget=800))


class ThemedSnapshotsApp(ConsoleApp):
    def on_mount(self) -> None:
        self.push_screen(SnapshotsScreen(fixed_tree(), detokenize=fake_detokenize, restores=fixed_restores()))
