"""Per-request events of a whole trace.

`lifetimes` follows each request through every step it was
scheduled in: 51 million request-steps in a 200,000-step trace at 256 running requests,
too many to visit in Python. What a comparison needs is much less: when each request was
admitted, preempted, resumed and finished and the step of its first sampled token.
`request_events` computes exactly those with NumPy from the trace's entry columns
(tracer.analysis.entry_features), and keeps one small object per request (aggregates only: no
per-step lists); `reference` builds the same record by record.

The index is cached per Trace object, so a comparison and a later search share it.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import orjson

from tracer.analysis import detail, entry_features
from tracer.analysis.memo import DiskForm, kept, memo
from tracer.trace.trace_type import Trace


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
    return lives_of(rec for _, rec in detail.records(trace, range(len(trace))))  # batched


def lives_of(records: Iterable[dict[str, Any]]) -> dict[str, RequestLife]:
    """The lifetimes of the requests these step records (whole, in step order, as `Trace.step`
    gives them) name: `lifetimes` over a trace's records, or over only those naming a request."""
    lives: dict[str, RequestLife] = {}

    def life(rid: str) -> RequestLife:
        return lives.setdefault(rid, RequestLife(rid))

    for rec in records:
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


NO_STEP = np.iinfo(np.int64).min  # a step that is None


@dataclass
class RequestColumns:
    """Every indexed request's events as columns, requests in order of first appearance:
    steps as recorded (NO_STEP for none), the preempted and resumed steps of request i at
    [end[i - 1], end[i]) of their flat arrays. A busy server's trace indexes half a million
    requests: a comparison reads these arrays, and a RequestEvents object is made only for a
    request a view asks about."""

    ids: list[Any]
    admitted: np.ndarray
    prefill_done: np.ndarray
    finished: np.ndarray
    preempted: np.ndarray
    preempted_end: np.ndarray
    resumed: np.ndarray
    resumed_end: np.ndarray

    @classmethod
    def of(cls, events: list[RequestEvents]) -> RequestColumns:
        def steps(values: list[int | None]) -> np.ndarray:
            return np.array([NO_STEP if v is None else v for v in values], dtype=np.int64)

        def flat(lists: list[list[int]]) -> tuple[np.ndarray, np.ndarray]:
            ends = np.cumsum([len(x) for x in lists], dtype=np.int64) if lists else np.zeros(0, np.int64)
            return np.array([s for x in lists for s in x], dtype=np.int64), ends

        return cls(
            [ev.id for ev in events],
            steps([ev.admitted for ev in events]),
            steps([ev.prefill_done for ev in events]),
            steps([ev.finished for ev in events]),
            *flat([ev.preempted for ev in events]),
            *flat([ev.resumed for ev in events]),
        )

    def __len__(self) -> int:
        return len(self.ids)

    def prefill_steps(self) -> np.ndarray:
        """RequestEvents.prefill_steps of each request, NO_STEP where it has none."""
        known = (self.admitted != NO_STEP) & (self.prefill_done != NO_STEP)
        return np.where(known, self.prefill_done - self.admitted + 1, NO_STEP)

    def event(self, i: int) -> RequestEvents:
        def step(values: np.ndarray) -> int | None:
            v = int(values[i])
            return None if v == NO_STEP else v

        def listed(flat: np.ndarray, end: np.ndarray) -> list[int]:
            lo = int(end[i - 1]) if i else 0
            return flat[lo : int(end[i])].tolist()

        return RequestEvents(
            self.ids[i],
            step(self.admitted),
            step(self.prefill_done),
            step(self.finished),
            listed(self.preempted, self.preempted_end),
            listed(self.resumed, self.resumed_end),
        )


class EventsView(Mapping[Any, RequestEvents]):
    """RequestColumns as a read-only mapping from id to RequestEvents, made on access."""

    def __init__(self, columns: RequestColumns) -> None:
        self.columns = columns
        self._position: dict[Any, int] | None = None

    @property
    def position(self) -> dict[Any, int]:
        """Each id's position in the columns (built on first use)."""
        if self._position is None:
            self._position = dict(zip(self.columns.ids, range(len(self.columns.ids)), strict=True))
        return self._position

    def __getitem__(self, rid: Any) -> RequestEvents:
        return self.columns.event(self.position[rid])

    def __contains__(self, rid: object) -> bool:
        return rid in self.position

    def __iter__(self) -> Iterator[Any]:
        return iter(self.columns.ids)

    def __len__(self) -> int:
        return len(self.columns.ids)


class RequestIndex:
    """`events` by request id, in order of first appearance; `since[id]`: the step a request
    was first admitted in (before it, no record names it but to wait)."""

    def __init__(self, columns: RequestColumns, since_of: np.ndarray, since_step: np.ndarray) -> None:
        self.columns = columns
        self.events = EventsView(columns)
        self._since_of, self._since_step = since_of, since_step  # position in the columns, step
        self._since: dict[Any, int] | None = None

    @classmethod
    def of(cls, events: dict[Any, RequestEvents], since: dict[Any, int]) -> RequestIndex:
        order = {rid: i for i, rid in enumerate(events)}
        return cls(
            RequestColumns.of(list(events.values())),
            np.array([order[rid] for rid in since], dtype=np.int64),
            np.array(list(since.values()), dtype=np.int64),
        )

    @property
    def since(self) -> dict[Any, int]:
        if self._since is None:
            ids = self.columns.ids
            at = self._since_of.tolist()
            self._since = dict(zip([ids[i] for i in at], self._since_step.tolist(), strict=True))
        return self._since


def cached_index(trace: Trace) -> RequestIndex | None:
    """The index if it was already built for this Trace object, else None (never builds)."""
    found: RequestIndex | None = memo(trace).get(NAME)
    return found


def request_index(trace: Trace) -> RequestIndex:
    """The per-request index of `trace`, built on first use and cached with the Trace (and,
    for a big trace file, beside it: `<trace>.requests.ssidx`, as tracer.analysis.step_features)."""
    return kept(trace, _KEPT, _build)


def request_events(trace: Trace) -> EventsView:
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
    found = entry_features.computed(trace)
    if found is None:
        return reference(trace)
    return RequestIndex(RequestColumns(*found.events), *found.since)


def reference(trace: Trace) -> RequestIndex:
    """The index record by record (each step parsed whole): the reference `_build` is
    compared with, and what a trace whose records do not fit entry columns gets."""
    b = _Builder()
    for _, rec in detail.records(trace, range(len(trace))):
        b.record(rec["step"], rec)
    return RequestIndex.of(b.events, b.since)


# -- kept beside a big trace -------------------------------------------------------------

NAME = "requests"
VERSION = 1  # bump when what the index holds changes: older files are rebuilt
_PER_REQUEST = ("admitted", "prefill_done", "finished", "n_preempted", "n_resumed")
_ARRAYS = {
    "ids": np.dtype("u1"),  # the ids, as one JSON list
    **{name: np.dtype("<i8") for name in (*_PER_REQUEST, "preempted", "resumed", "since_of", "since_step")},
}


def _pack(index: RequestIndex) -> tuple[dict[str, np.ndarray], dict[str, Any]] | None:
    c = index.columns
    try:
        ids = orjson.dumps(c.ids)
    except TypeError:
        return None  # an id JSON cannot hold (never the recorder's)
    arrays = {
        "ids": np.frombuffer(ids, dtype=np.uint8),
        "admitted": c.admitted,
        "prefill_done": c.prefill_done,
        "finished": c.finished,
        "n_preempted": np.diff(c.preempted_end, prepend=0),
        "n_resumed": np.diff(c.resumed_end, prepend=0),
        "preempted": c.preempted,
        "resumed": c.resumed,
        "since_of": index._since_of,
        "since_step": index._since_step,
    }
    return arrays, {}


def _unpack(meta: dict[str, Any], arrays: dict[str, np.ndarray]) -> RequestIndex | None:
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
    columns = RequestColumns(
        ids,
        *(np.array(arrays[name]) for name in ("admitted", "prefill_done", "finished")),
        np.array(arrays["preempted"]),
        np.cumsum(counts[0]),
        np.array(arrays["resumed"]),
        np.cumsum(counts[1]),
    )
    return RequestIndex(columns, np.array(since_of), np.array(arrays["since_step"]))


_KEPT = DiskForm(NAME, VERSION, _ARRAYS, _pack, _unpack)
