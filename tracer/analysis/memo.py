"""The one memo of whole-trace results: each Trace object's, for as long as that object lives.

Every result the model layer derives from a whole trace (a Session's budget analysis, flags,
series and indexes; the step pass, the entry pass and the request index) is remembered here,
keyed by the Trace object, under a name. One rule says when a result is stale: a new snapshot
(a reload, a followed file that grew, a retimed copy) is a new Trace object, whose memo starts
empty; an old object's memo goes with it. Derived sidecars (tracer.trace.sidecar) are the
memo's disk form for a big trace file: `kept` reads a result back from its own (each pass
says how it is packed, a `DiskForm`), or computes it and writes it there.

A Trace is a mutable dataclass (unhashable), so it cannot key a WeakKeyDictionary: this keys
by id() and drops the memo when the Trace is collected, so a new object at the same address
never sees an old value. A value must not hold its Trace (that would keep it alive for good):
results hold arrays, never the Trace. What two snapshots give together (a comparison, which
holds both traces) has `joint_memo`, keyed by the Sessions.
"""

from __future__ import annotations

import threading
import weakref
from collections import OrderedDict
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

import numpy as np

from tracer.trace import sidecar
from tracer.trace.trace_type import Trace

T = TypeVar("T")


class Memo:
    """One Trace's results by name; each computed once even when asked from several threads
    (the web app's callbacks): one computes, the others asking for it wait."""

    def __init__(self) -> None:
        self._done: dict[Hashable, Any] = {}
        self._locks: dict[Hashable, threading.RLock] = {}
        self._guard = threading.Lock()

    def get(self, name: Hashable) -> Any | None:
        return self._done.get(name)

    def put(self, name: Hashable, value: Any) -> None:
        self._done[name] = value

    def once(self, name: Hashable, compute: Callable[[], T]) -> T:
        try:
            return self._done[name]  # type: ignore[no-any-return]
        except KeyError:
            pass
        with self._guard:  # a lock per name: a long result never holds up another
            lock = self._locks.setdefault(name, threading.RLock())
        with lock:
            if name not in self._done:
                self._done[name] = compute()
            return self._done[name]  # type: ignore[no-any-return]


_MEMOS: dict[int, tuple[weakref.ref[Trace], Memo]] = {}
_MEMOS_LOCK = threading.RLock()  # re-entered when a collection on this thread runs _forget


def memo(trace: Trace) -> Memo:
    """`trace`'s memo, made on first use."""
    key = id(trace)
    hit = _MEMOS.get(key)
    if hit is not None and hit[0]() is trace:
        return hit[1]
    with _MEMOS_LOCK:
        hit = _MEMOS.get(key)
        if hit is not None and hit[0]() is trace:
            return hit[1]
        made = Memo()
        _MEMOS[key] = (weakref.ref(trace, lambda ref, key=key: _forget(key, ref)), made)
        return made


def _forget(key: int, ref: weakref.ref[Trace]) -> None:
    with _MEMOS_LOCK:
        if key in _MEMOS and _MEMOS[key][0] is ref:  # not a newer Trace's at the same address
            del _MEMOS[key]


@dataclass(frozen=True)
class DiskForm(Generic[T]):
    """How a whole-trace result is kept in its derived sidecar `<trace>.<name>.ssidx`: its
    arrays' dtypes, its version (bumped when what it holds changes: older files are rebuilt),
    `pack` (arrays and meta; None: not to be kept) and `unpack` (None: not this result, torn or
    of another trace: computed again)."""

    name: str
    version: int
    dtypes: dict[str, np.dtype]
    pack: Callable[[T], tuple[dict[str, np.ndarray], dict[str, Any]] | None]
    unpack: Callable[[dict[str, Any], dict[str, np.ndarray]], T | None]


def kept(trace: Trace, form: DiskForm[T], compute: Callable[[Trace], T]) -> T:
    """`trace`'s result `form.name`: remembered in its memo, else read back from its file's
    derived sidecar (valid for exactly the file state and steps the Trace was loaded from),
    else computed, and kept there; a sidecar is read or kept only when the trace has a
    fingerprint (a big file loaded whole)."""
    found: T | None = memo(trace).get(form.name)
    if found is not None:
        return found
    # Without a fingerprint (a small file, a stream, a part of a trace) nothing is kept: no
    # derived sidecar is looked for, and the result is not packed.
    whole = trace.fingerprint is not None
    read = sidecar.derived_of(trace, form.name, form.dtypes, version=form.version) if whole else None
    found = None if read is None else form.unpack(*read)
    if found is None:
        found = compute(trace)
        packed = form.pack(found) if whole else None
        if packed is not None:
            sidecar.keep_derived(trace, form.name, packed[0], version=form.version, meta=packed[1])
    memo(trace).put(form.name, found)
    return found


JOINT_KEPT = 4  # a comparison is big (both sides' columns aligned): the newest few groups
_JOINT: OrderedDict[tuple[int, ...], tuple[tuple[weakref.ref[Any], ...], Memo]] = OrderedDict()


def joint_memo(*sessions: Any) -> Memo:
    """The memo of what is derived from several analysed snapshots together (two compared, a
    comparison and its chart; a run's engines, their step axis and totals), keyed by their
    Sessions in order: a new snapshot of any is a new Session, so a new group. The newest
    JOINT_KEPT groups are kept, and a group goes when any of its Sessions does. Its values may
    hold the traces (a comparison does), never the Sessions."""
    key = tuple(id(s) for s in sessions)
    with _MEMOS_LOCK:
        hit = _JOINT.get(key)
        if hit is not None and all(ref() is s for ref, s in zip(hit[0], sessions, strict=True)):
            _JOINT.move_to_end(key)
            return hit[1]
        made = Memo()
        _JOINT[key] = (tuple(weakref.ref(s, lambda _: _drop_joint(key)) for s in sessions), made)
        while len(_JOINT) > JOINT_KEPT:
            _JOINT.popitem(last=False)
        return made


def _drop_joint(key: tuple[int, ...]) -> None:
    with _MEMOS_LOCK:
        hit = _JOINT.get(key)
        if hit is not None and any(ref() is None for ref in hit[0]):  # not a newer group's
            del _JOINT[key]
