"""tracer.draft_budget's rewrite, on small functions shaped like vLLM's schedule() (no vLLM
needed); tests/test_policies.py runs it on the installed vLLM's real one."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from tracer.draft_budget import RewriteError, with_draft_budget


def schedule(self: Any, demands: list[int], victim: int | None = None) -> list[int]:
    """vLLM's budget lines, in its order: start, a loop that stops and charges, a restore."""
    draft_slots = 0
    input_budget = self.scheduler_config.max_num_batched_tokens
    scheduled: list[int] = []
    for n in demands:
        if input_budget <= draft_slots:
            break
        n = min(n, input_budget - draft_slots)
        scheduled.append(n)
        input_budget -= n + draft_slots
    if victim is not None:
        restored = scheduled.pop(victim)
        input_budget += restored + draft_slots
    for n in demands[len(scheduled) :]:
        if input_budget <= draft_slots:
            break
        scheduled.append(n)
        input_budget -= n + draft_slots
    assert input_budget >= 0
    return scheduled


def sched(budget: int, rows: int) -> Any:
    cfg = SimpleNamespace(max_num_batched_tokens=64)
    return SimpleNamespace(scheduler_config=cfg, schedscope_draft_budget=budget, schedscope_draft_rows=rows)


def test_each_scheduled_request_takes_its_rows_and_a_loop_stops_when_they_run_out() -> None:
    patched = with_draft_budget(schedule)
    assert schedule(sched(16, 4), [1] * 6) == [1] * 6  # the original knows no draft budget
    assert patched(sched(16, 4), [1] * 6) == [1] * 4  # 4 x 4 rows fill 16
    assert patched(sched(16, 0), [1] * 6) == [1] * 6  # 0 rows a request: never binds


def test_a_preempted_victim_gives_its_rows_back() -> None:
    patched = with_draft_budget(schedule)
    # 4 fit; the victim's rows come back, so one more request is scheduled after it.
    assert patched(sched(16, 4), [1] * 6, victim=0) == [1] * 4


def test_a_schedule_without_every_anchor_is_refused_by_name() -> None:
    def no_restore(self: Any, demands: list[int]) -> list[int]:
        draft_slots = 0
        input_budget = self.scheduler_config.max_num_batched_tokens
        for n in demands:
            if input_budget <= draft_slots:
                break
            input_budget -= n + draft_slots
        assert input_budget >= 0
        return demands

    with pytest.raises(RewriteError, match=r"vLLM 9\.9's schedule\(\): stop: 1 where 0\.31-0\.34 have 2"):
        with_draft_budget(no_restore, "vLLM 9.9")
