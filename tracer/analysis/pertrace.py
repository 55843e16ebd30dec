"""A value remembered with a Trace object for as long as that object lives.

A Trace is a mutable dataclass (unhashable), so it cannot key a WeakKeyDictionary: this
keys by id() and drops the entry when the Trace is collected, so a new object at the same
address never sees an old value.
"""

from __future__ import annotations

import weakref
from typing import Generic, TypeVar

from tracer.trace.reader import Trace

T = TypeVar("T")


class PerTrace(Generic[T]):
    def __init__(self) -> None:
        self._held: dict[int, tuple[weakref.ref[Trace], T]] = {}

    def get(self, trace: Trace) -> T | None:
        hit = self._held.get(id(trace))
        return hit[1] if hit is not None and hit[0]() is trace else None

    def put(self, trace: Trace, value: T) -> None:
        key = id(trace)
        self._held[key] = (weakref.ref(trace, lambda _, key=key: self._held.pop(key, None)), value)
