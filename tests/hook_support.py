"""Fixtures for runner-hook tests: a fresh hook state, and class patches undone."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

_MISSING = object()


@pytest.fixture
def fresh_hook(monkeypatch: pytest.MonkeyPatch) -> Any:
    """tracer.record.runner_hook's module state as in a new process (restored afterwards)."""
    from tracer.record import runner_hook as rh

    monkeypatch.setattr(rh, "_state", rh._fresh_state())
    monkeypatch.setattr(rh, "_state_dirty", False)
    monkeypatch.setattr(rh, "_warned", set())
    monkeypatch.setattr(rh, "_notes", [])
    monkeypatch.setattr(rh, "_failures", 0)
    monkeypatch.setattr(rh, "_dispatched", [])
    monkeypatch.setattr(rh, "_in_propose", False)
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
