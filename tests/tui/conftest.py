"""SVG baselines of the TUI snapshot tests live in the repository's `snapshots/` folder
(the layout the README describes), one subfolder per test module, not in syrupy's `__snapshots__` beside
each test.

Neither syrupy nor pytest-textual-snapshot has an option for the folder: syrupy's way is
an extension class whose `dirname` says where, and `snap_compare` hard-codes its own
extension (`snapshot.use_extension(SVGImageExtension)`). So the `snapshot` fixture below
swaps that one extension for a subclass that only changes `dirname`; serialisation and
comparison stay pytest-textual-snapshot's. If a future pytest-textual-snapshot stops
calling `use_extension(SVGImageExtension)`, baselines silently fall back to
`__snapshots__` and the tests fail as "snapshot does not exist", which is loud enough.
"""

from __future__ import annotations

from pathlib import Path
from typing import Type

import pytest
from pytest_textual_snapshot import SVGImageExtension
from syrupy.assertion import SnapshotAssertion
from syrupy.extensions.base import AbstractSyrupyExtension
from syrupy.location import PyTestLocation

BASELINES = Path(__file__).resolve().parents[2] / "snapshots"


class BaselineSVGExtension(SVGImageExtension):
    @classmethod
    def dirname(cls, *, test_location: PyTestLocation) -> str:
        return str(BASELINES / test_location.basename)


class BaselineSnapshotAssertion(SnapshotAssertion):
    def use_extension(
        self, extension_class: Type[AbstractSyrupyExtension] | None = None
    ) -> SnapshotAssertion:
        if extension_class is SVGImageExtension:
            extension_class = BaselineSVGExtension
        return super().use_extension(extension_class)


@pytest.fixture
def snapshot(snapshot: SnapshotAssertion) -> SnapshotAssertion:
    return BaselineSnapshotAssertion(
        update_snapshots=snapshot.update_snapshots,
        extension_class=snapshot.extension_class,
        test_location=snapshot.test_location,
        session=snapshot.session,
    )
