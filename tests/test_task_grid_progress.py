"""The task grid's progress: what is left, weighed by what a prompt's tokens cost."""

from __future__ import annotations

from effctx_core.bench import task_grid
from effctx_core.bench.task_grid import eta, prompt_work


def test_a_prompt_token_costs_more_the_longer_the_prompt():
    assert prompt_work(1024) == 1088
    assert prompt_work(16384) == 32768


def test_what_is_left_is_weighed_by_prompt_work_not_by_tokens(monkeypatch):
    monkeypatch.setattr(task_grid.time, "monotonic", lambda: 60.0)
    done = prompt_work(1024)
    # One 1,024-token prompt took a minute; a 16,384-token one costs 30 of them, not 16.
    assert eta(0.0, done, done + prompt_work(16384)) == " · about 30 min left"


def test_nothing_is_said_before_the_first_prompt_or_after_the_last():
    assert eta(0.0, 0, 100) == "" and eta(0.0, 100, 100) == ""
