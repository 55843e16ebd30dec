"""Fixtures for runner-hook tests: a fresh hook state, and class patches undone."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

_MISSING = object()


@pytest.fixture
def fresh_hook(monkeypatch: pytest.MonkeyPatch) -> Any:
    """The runner hooks' module state as in a new process (restored afterwards); returns
    tracer.record.runner_hook."""
    from tracer.record import runner_hook as rh
    from tracer.record import runner_notes, speculator_hook

    monkeypatch.setattr(runner_notes, "_state", runner_notes._fresh_state())
    monkeypatch.setattr(runner_notes, "_state_dirty", False)
    monkeypatch.setattr(runner_notes, "_warned", set())
    passes: list[Any] = []  # one list, as the three modules share it
    for module in (runner_notes, rh, speculator_hook):
        monkeypatch.setattr(module, "passes", passes)
    monkeypatch.setattr(runner_notes, "_failures", 0)
    monkeypatch.setattr(speculator_hook, "_dispatched", [])
    monkeypatch.setattr(speculator_hook, "_in_propose", False)
    monkeypatch.setattr(rh, "_in_real_execute", False)
    return rh


@pytest.fixture
def restore_attrs() -> Iterator[Callable[..., None]]:
    """watch(obj, *names): put obj's own attributes back as they were (or delete them)
    when the test ends, so class-level patches of vLLM's classes do not leak."""
    saved: list[tuple[Any, str, Any]] = []

    def watch(obj: Any, *names: str) -> None:
        for name in names:
            saved.append((obj, name, vars(obj).get(name, _MISSING)))

    yield watch
    for obj, name, value in reversed(saved):
        if value is _MISSING:
            if name in vars(obj):
                delattr(obj, name)
        else:
            setattr(obj, name, value)
