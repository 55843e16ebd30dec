"""Per-request events of a whole trace.

`lifetimes` follows each request through every step it was
scheduled in: 51 million request-steps in a 200,000-step trace at 256 running requests,
too many to visit in Python. What a comparison needs is much less: when each request was
admitted, preempted, resumed and finished and the step of its first sampled token.
`request_events` computes exactly those with NumPy from the trace's entry columns
(tracer.analysis.entrypass), and keeps one small object per request (aggregates only: no
per-step lists); `reference` builds the same record by record.

The index is cached per Trace object, so a comparison and a later search share it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import orjson

from tracer.analysis import detail, entrypass
from tracer.analysis.pertrace import PerTrace
from tracer.trace import sidecar
from tracer.trace.reader import Trace


@dataclass(slots=True)
class RequestEvents:
    """A request's events in a trace (step numbers as recorded)."""

    id: str
    admitted: int | None = None
    prefill_done: int | None = None  # first step in which it sampled a token
    finished: int | None = None  # step whose record reports it finished
    preempted: list[int] = field(default_factory=list)
    resumed: list[int] = field(default_factory=list)

    @property
    def prefill_steps(self) -> int | None:
        if self.admitted is None or self.prefill_done is None:
            return None
        return self.prefill_done - self.admitted + 1


@dataclass
class RequestLife(RequestEvents):
    """One request's whole lifetime in a trace (step numbers as recorded): its events and
    every step that scheduled it."""

    scheduled: list[int] = field(default_factory=list)
    tokens: int = 0


def lifetimes(trace: Trace) -> dict[str, RequestLife]:
    """Every request's lifetime, from every step record: the reference for one request's
    (tracer.analysis.lookup.request_life parses only its steps) and for the events a
    comparison uses (request_events reads only those)."""
    lives: dict[str, RequestLife] = {}

    def life(rid: str) -> RequestLife:
        return lives.setdefault(rid, RequestLife(rid))

    for _, rec in detail.records(trace, range(len(trace))):  # batched: never every record at once
        step = rec["step"]
        for rid, *_ in rec["new"]:
            life(rid).admitted = step
        for rid, *_ in rec["resumed"]:
            life(rid).resumed.append(step)
        for rid, tokens, *_ in rec["new"] + rec["resumed"] + rec["running"]:
            r = life(rid)
            r.scheduled.append(step)
            r.tokens += tokens
        for rid, n in (rec["sampled"] or {}).items():
            if n > 0 and life(rid).prefill_done is None:
                lives[rid].prefill_done = step
        for rid in rec["preempted"]:
            life(rid).preempted.append(step)
        for rid in rec["finished"]:
            life(rid).finished = step
    return lives


@dataclass
class RequestIndex:
    """`events` by request id, in order of first appearance; `since[id]`: the step a request
    was first admitted in (before it, no record names it but to wait)."""

    events: dict[str, RequestEvents]
    since: dict[str, int]


_INDEX: PerTrace[RequestIndex] = PerTrace()


def cached_index(trace: Trace) -> RequestIndex | None:
    """The index if it was already built for this Trace object, else None (never builds)."""
    return _INDEX.get(trace)


def request_index(trace: Trace) -> RequestIndex:
    """The per-request index of `trace`, built on first use and cached with the Trace (and,
    for a big trace file, beside it: `<trace>.requests.ssidx`, as tracer.analysis.steppass)."""
    index = _INDEX.get(trace)
    if index is None:
        index = _read(trace)
        if index is None:
            index = _build(trace)
            _write(trace, index)
        _INDEX.put(trace, index)
    return index


def request_events(trace: Trace) -> dict[str, RequestEvents]:
    """Every request the trace admitted, resumed, preempted or finished, with those events.

    Equal to the same fields of `lifetimes(trace)` for these requests, except that
    `prefill_done` is looked for only after a request's admission (so it is None for a
    request that was running before the trace began) and not after it finished."""
    return request_index(trace).events


class _Builder:
    def __init__(self) -> None:
        self.events: dict[str, RequestEvents] = {}
        self.since: dict[str, int] = {}
        self.pending: dict[str, RequestEvents] = {}  # admitted, no token sampled yet

    def of(self, rid: str) -> RequestEvents:
        ev = self.events.get(rid)
        if ev is None:
            ev = self.events[rid] = RequestEvents(rid)
        return ev

    def admit(self, step: int, new: list[Any]) -> None:
        for entry in new:
            rid = entry[0]
            ev = self.of(rid)
            ev.admitted = step
            self.since.setdefault(rid, step)
            if ev.prefill_done is None and isinstance(rid, str):
                self.pending[rid] = ev

    def resume(self, step: int, resumed: list[Any]) -> None:
        for entry in resumed:
            self.of(entry[0]).resumed.append(step)

    def end(self, step: int, preempted: list[Any], finished: list[Any]) -> None:
        for rid in preempted:
            self.of(rid).preempted.append(step)
        pending = self.pending
        for rid in finished:
            self.of(rid).finished = step
            pending.pop(rid, None)

    def sampled_dict(self, step: int, sampled: Any) -> None:
        if not isinstance(sampled, dict):
            return
        for rid in [rid for rid in self.pending if (sampled.get(rid) or 0) > 0]:
            self.pending.pop(rid).prefill_done = step

    def record(self, step: int, rec: dict[str, Any]) -> None:
        """One step from its whole parsed record (the reference order of `lifetimes`)."""
        self.admit(step, rec.get("new") or [])
        self.resume(step, rec.get("resumed") or [])
        self.sampled_dict(step, rec.get("sampled"))
        self.end(step, rec.get("preempted") or [], rec.get("finished") or [])


def _build(trace: Trace) -> RequestIndex:
    found = entrypass.computed(trace)
    if found is None:
        return reference(trace)
    events = dict(zip(found.events[0], map(RequestEvents, *found.events), strict=True))
    return RequestIndex(events, found.since)


def reference(trace: Trace) -> RequestIndex:
    """The index record by record (each step parsed whole): the reference `_build` is
    compared with, and what a trace whose records do not fit entry columns gets."""
    b = _Builder()
    for _, rec in detail.records(trace, range(len(trace))):
        b.record(rec["step"], rec)
    return RequestIndex(b.events, b.since)


# -- kept beside a big trace -------------------------------------------------------------

NAME = "requests"
VERSION = 1  # bump when what the index holds changes: older files are rebuilt
_NONE = np.iinfo(np.int64).min  # a step that is None
_PER_REQUEST = ("admitted", "prefill_done", "finished", "n_preempted", "n_resumed")
_ARRAYS = {
    "ids": np.dtype("u1"),  # the ids, as one JSON list
    **{name: np.dtype("<i8") for name in (*_PER_REQUEST, "preempted", "resumed", "since_of", "since_step")},
}


def _steps(values: list[int | None]) -> np.ndarray:
    return np.array([_NONE if v is None else v for v in values], dtype=np.int64)


def _write(trace: Trace, index: RequestIndex) -> None:
    if trace.fingerprint is None:
        return  # nothing would be kept: not worth packing
    events = list(index.events.values())
    try:
        ids = orjson.dumps([ev.id for ev in events])
    except TypeError:
        return  # an id JSON cannot hold (never the recorder's)
    order = {rid: i for i, rid in enumerate(index.events)}
    if any(rid not in order for rid in index.since):
        return
    arrays = {
        "ids": np.frombuffer(ids, dtype=np.uint8),
        "admitted": _steps([ev.admitted for ev in events]),
        "prefill_done": _steps([ev.prefill_done for ev in events]),
        "finished": _steps([ev.finished for ev in events]),
        "n_preempted": np.array([len(ev.preempted) for ev in events], dtype=np.int64),
        "n_resumed": np.array([len(ev.resumed) for ev in events], dtype=np.int64),
        "preempted": np.array([s for ev in events for s in ev.preempted], dtype=np.int64),
        "resumed": np.array([s for ev in events for s in ev.resumed], dtype=np.int64),
        "since_of": np.array([order[rid] for rid in index.since], dtype=np.int64),
        "since_step": np.array(list(index.since.values()), dtype=np.int64),
    }
    sidecar.write_derived(trace.path, NAME, trace.fingerprint, arrays, version=VERSION, steps=len(trace))


def _read(trace: Trace) -> RequestIndex | None:
    found = sidecar.read_derived(
        trace.path, NAME, trace.fingerprint, _ARRAYS, version=VERSION, steps=len(trace)
    )
    if found is None:
        return None
    _, arrays = found
    try:
        ids = orjson.loads(arrays["ids"].tobytes())
    except orjson.JSONDecodeError:
        return None
    n = len(ids) if type(ids) is list else -1
    counts = arrays["n_preempted"], arrays["n_resumed"]
    since_of = arrays["since_of"]
    if (
        any(len(arrays[name]) != n for name in _PER_REQUEST)
        or len(arrays["preempted"]) != counts[0].sum()
        or len(arrays["resumed"]) != counts[1].sum()
        or min(counts[0].min(initial=0), counts[1].min(initial=0)) < 0
        or len(since_of) != len(arrays["since_step"])
        or (len(since_of) and (since_of.min() < 0 or since_of.max() >= n))
    ):
        return None  # torn or not this index: built again

    def steps(name: str) -> list[int | None]:
        return [None if v == _NONE else v for v in arrays[name].tolist()]

    def lists(name: str, n_name: str) -> list[list[int]]:
        flat, ends = arrays[name].tolist(), np.cumsum(arrays[n_name]).tolist()
        return [flat[a:b] if b > a else [] for a, b in zip([0, *ends[:-1]], ends, strict=True)]

    events = {
        rid: RequestEvents(rid, admitted, prefill_done, finished, preempted, resumed)
        for rid, admitted, prefill_done, finished, preempted, resumed in zip(
            ids,
            steps("admitted"),
            steps("prefill_done"),
            steps("finished"),
            lists("preempted", "n_preempted"),
            lists("resumed", "n_resumed"),
            strict=True,
        )
    }
    since = dict(zip([ids[i] for i in since_of.tolist()], arrays["since_step"].tolist(), strict=True))
    return RequestIndex(events, since)
