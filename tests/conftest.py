"""Shared fixtures. Offline vLLM tests build real Schedulers from tracer.whatif.offline."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture
def trace_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Turn recording on (SCHEDSCOPE_TRACE) for schedulers built in this test."""
    path = tmp_path / "trace.jsonl"
    monkeypatch.setenv("SCHEDSCOPE_TRACE", str(path))
    return path


def probe_schedule(sched: Any) -> tuple[Any, dict[str, int]]:
    """Call sched.schedule() and read vLLM's own final `token_budget` and
    `input_budget` locals (and the draft-budget policy's `draft_budget`) as
    Scheduler.schedule returns: the ground truth that recorded budgets must equal."""
    from vllm.v1.core.sched.scheduler import Scheduler

    from tracer import draft_budget
    from tracer.policies import _schedule_with_draft_budget

    codes = (Scheduler.schedule.__code__, _schedule_with_draft_budget().__code__)
    seen: dict[str, int] = {}

    def local(frame: Any, event: str, arg: Any) -> Callable | None:
        if event == "return":
            seen["token_budget"] = frame.f_locals["token_budget"]
            seen["input_budget"] = frame.f_locals["input_budget"]
            if draft_budget.BUDGET in frame.f_locals:
                seen["draft_budget"] = frame.f_locals[draft_budget.BUDGET]
        return local

    def global_(frame: Any, event: str, arg: Any) -> Callable | None:
        return local if frame.f_code in codes else None

    old = sys.gettrace()
    sys.settrace(global_)
    try:
        out = sched.schedule()
    finally:
        sys.settrace(old)
    return out, seen
