"""A workload small enough for a test: a short stable prefix, three turns with an edit of
the prefix before the third, and one branch from the first turn."""

from __future__ import annotations

from pathlib import Path

SMALL_WORKLOAD = '''
description = "A short agent loop for tests: every kind of turn once"
prefix = """
You are a careful assistant for a small bookkeeping program written in Python. You answer in one short sentence.
The program keeps a ledger of entries with a date, an amount in cents and a note. It exports the ledger as CSV.
Tools: read_file(path) returns a file; run_tests(selection) runs pytest and returns its log.
"""
branch_after = 1

[[turns]]
role = "user"
max_tokens = 8
text = "The CSV export writes one row too many. Where would you look first?"

[[turns]]
role = "tool"
max_tokens = 8
text = "run_tests: tests/test_export.py::test_rows FAILED: assert 4 == 3"

[[turns]]
role = "user"
max_tokens = 8
text = "What do you conclude from that failure?"

[edit]
before_turn = 3
find = "in one short sentence"
replace = "in two short sentences"

[[branches]]
name = "read-first"

[[branches.turns]]
role = "user"
max_tokens = 8
text = "Read export.py first, then tell me what you see."
'''


def write_small_workload(folder: Path) -> Path:
    path = folder / "small.toml"
    path.write_text(SMALL_WORKLOAD, encoding="utf-8")
    return path
