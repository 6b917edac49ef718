"""Every folder of the suite collects on its own and beside any other: helpers are imported
as `tests.helpers.NAME`, never from a conftest or a sibling test module, so which folders
pytest is given does not change what an import finds."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("folders", [("tests/tui", "tests/contract"), ("tests/contract",)], ids=" + ".join)
def test_folders_collect_in_any_combination(folders):
    out = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", *folders],
                         cwd=REPO, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    assert " collected" in out.stdout.splitlines()[-1]
