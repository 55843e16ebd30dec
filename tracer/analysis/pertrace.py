"""The one memo of whole-trace results: each Trace object's, for as long as that object lives.

Every result the model layer derives from a whole trace (a Session's budget analysis, flags,
series and indexes; the step pass, the entry pass and the request index) is remembered here,
keyed by the Trace object, under a name. One rule says when a result is stale: a new snapshot
(a reload, a followed file that grew, a retimed copy) is a new Trace object, whose memo starts
empty; an old object's memo goes with it. Derived sidecars (tracer.trace.sidecar) are the
memo's disk form for a big trace file, read back by the passes that write them.

A Trace is a mutable dataclass (unhashable), so it cannot key a WeakKeyDictionary: this keys
by id() and drops the memo when the Trace is collected, so a new object at the same address
never sees an old value. A value must not hold its Trace (that would keep it alive for good):
results hold arrays, never the Trace. What two snapshots give together (a comparison, which
holds both traces) has `pair_memo`, keyed by the two Sessions.
"""

from __future__ import annotations

import threading
import weakref
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Any, TypeVar

from tracer.trace.reader import Trace

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


PAIRS_KEPT = 4  # comparisons are big (both sides' columns aligned): the newest few pairs
_PAIRS: OrderedDict[tuple[int, int], tuple[weakref.ref[Any], weakref.ref[Any], Memo]] = OrderedDict()


def pair_memo(a: Any, b: Any) -> Memo:
    """The memo of what is derived from two analysed snapshots together (a comparison, its
    chart), keyed by their Sessions: a new snapshot of either side is a new Session, so a new
    pair. The newest PAIRS_KEPT pairs are kept, and a pair goes when either Session does. Its
    values may hold the traces (a comparison does), never the Sessions."""
    key = (id(a), id(b))
    with _MEMOS_LOCK:
        hit = _PAIRS.get(key)
        if hit is not None and hit[0]() is a and hit[1]() is b:
            _PAIRS.move_to_end(key)
            return hit[2]
        made = Memo()
        refs = (weakref.ref(a, lambda _: _drop_pair(key)), weakref.ref(b, lambda _: _drop_pair(key)))
        _PAIRS[key] = (*refs, made)
        while len(_PAIRS) > PAIRS_KEPT:
            _PAIRS.popitem(last=False)
        return made


def _drop_pair(key: tuple[int, int]) -> None:
    with _MEMOS_LOCK:
        hit = _PAIRS.get(key)
        if hit is not None and (hit[0]() is None or hit[1]() is None):  # not a newer pair's
            del _PAIRS[key]
