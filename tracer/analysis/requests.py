"""Per-request events of a whole trace, in one pass that parses no step whole.

`lifetimes` follows each request through every step it was
scheduled in: 51 million request-steps in a 200,000-step trace at 256 running requests,
too many to visit in Python. What a comparison needs is much less: when each request was
admitted, preempted, resumed and finished (short lists, `n_new` … `n_finished` say which
steps have any) and the step of its first sampled token (looked up in the `sampled` dict of
the steps after its admission, by key, until found). `request_events` reads exactly
those, from each record's bytes where the recorder's layout allows (see
tracer.analysis.detail) and from the whole record where it does not, and keeps one small
object per request (aggregates only: no per-step lists).

The index is cached per Trace object, so a comparison and a later search share it.
"""

from __future__ import annotations

import contextlib
import re
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import orjson

from tracer.analysis import detail
from tracer.analysis.pertrace import PerTrace
from tracer.trace import schema, sidecar
from tracer.trace.reader import Trace

# Where the bytes of one record's keys start (in the recorder's order) and the
# value of one `sampled` entry.
_NEW, _RESUMED, _RUNNING = detail.needle("new"), detail.needle("resumed"), detail.needle("running")
_PREEMPTED, _UNSCHEDULED = detail.needle("preempted"), detail.needle("unscheduled")
_SAMPLED = detail.needle("sampled") + b"{"
_INT = re.compile(rb"-?[0-9]+(?=[,}])")
_FEW = 8  # pending requests looked up by key; more: the step's sampled dict is parsed


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
        # Admitted, no token sampled yet: id -> (its `sampled` key bytes, its events).
        self.pending: dict[str, tuple[bytes, RequestEvents]] = {}

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
                self.pending[rid] = (orjson.dumps(rid) + b":", ev)

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
            self.pending.pop(rid)[1].prefill_done = step

    def record(self, step: int, rec: dict[str, Any]) -> None:
        """One step from its whole parsed record (the reference order of `lifetimes`)."""
        self.admit(step, rec.get("new") or [])
        self.resume(step, rec.get("resumed") or [])
        self.sampled_dict(step, rec.get("sampled"))
        self.end(step, rec.get("preempted") or [], rec.get("finished") or [])


def _list(data: bytes | bytearray, a: int, b: int, n: int) -> list[Any] | None:
    """The JSON list in data[a:b] if it has n entries, else None (the layout is not the recorder's)."""
    try:
        value = orjson.loads(data[a:b])
    except orjson.JSONDecodeError:
        return None
    return value if type(value) is list and len(value) == n else None


def _step_from_bytes(
    b: _Builder, data: bytes | bytearray, s: int, e: int, step: int, counts: tuple[int, int, int, int]
) -> bool:
    """One step read from its record's bytes data[s:e]; False (nothing applied) when the
    record is not laid out as the recorder writes it."""
    n_new, n_res, n_pre, n_fin = counts
    find = data.find
    new = resumed = None
    r = s
    if n_new or n_res:
        a = find(_NEW, s, e)
        r = find(_RESUMED, a, e) if a >= 0 else -1
        if r < 0:
            return False
        if n_new:
            new = _list(data, a + len(_NEW), r, n_new)
            if new is None:
                return False
        if n_res:
            u = find(_RUNNING, r, e)
            resumed = _list(data, r + len(_RESUMED), u, n_res) if u >= 0 else None
            if resumed is None:
                return False
    ends = None
    q = s
    if n_pre or n_fin or b.pending:
        p = find(_PREEMPTED, r, e)  # after the resumed list when it was found
        q = find(_UNSCHEDULED, p, e) if p >= 0 else -1
        if q < 0:
            return False
    if n_pre or n_fin:
        try:
            ends = orjson.loads(b"{" + data[p + 1 : q] + b"}")
        except orjson.JSONDecodeError:
            return False
        pre, fin = ends.get("preempted"), ends.get("finished")
        if type(pre) is not list or type(fin) is not list or len(pre) != n_pre or len(fin) != n_fin:
            return False
    if new is not None:
        b.admit(step, new)
    if resumed is not None:
        b.resume(step, resumed)
    if b.pending:
        _sampled_from_bytes(b, data, q, e, step)
    if ends is not None:
        b.end(step, ends["preempted"], ends["finished"])
    return True


def _sampled_from_bytes(b: _Builder, data: bytes | bytearray, s: int, e: int, step: int) -> None:
    """Pending requests' samples in the step's `sampled` dict, which follows byte s."""
    p = data.find(_SAMPLED, s, e)
    if p < 0:
        return  # null, or not a dict: no sample known
    start = p + len(_SAMPLED) - 1
    # The dict holds string keys and integer values only, so `},"` ends it (a quote
    # inside a string is escaped); without a key after it, it closes the record.
    stop = data.find(b'},"', start, e)
    stop = e - 1 if stop < 0 else stop + 1
    if len(b.pending) > _FEW:
        with contextlib.suppress(orjson.JSONDecodeError):  # not a dict after all: no sample known
            b.sampled_dict(step, orjson.loads(data[start:stop]))
        return
    done = []
    for rid, (key, ev) in b.pending.items():
        at = data.find(key, start, stop)
        while at >= 0 and data[at - 1] not in b"{,":  # the tail of another key
            at = data.find(key, at + 1, stop)
        if at < 0:
            continue
        m = _INT.match(data, at + len(key))
        if m is None:  # not an integer: the parsed dict decides
            b.sampled_dict(step, orjson.loads(data[start:stop]))
            return
        if int(m.group()) > 0:
            done.append(rid)
            ev.prefill_done = step
    for rid in done:
        del b.pending[rid]


def _is_compact(trace: Trace) -> bool:
    try:
        return schema.parse_version(trace.header.get("schema")) >= (1, 2)
    except ValueError:
        return False


def _build(trace: Trace) -> RequestIndex:
    b = _Builder()
    col = trace.columns
    steps = col["step"].tolist()
    counts = list(
        zip(*(col[c].tolist() for c in ("n_new", "n_resumed", "n_preempted", "n_finished")), strict=True)
    )
    # The byte path reads the 1.1 layout (a list per group, `sampled` keyed by id); format
    # 1.2's arrays and aligned `sampled` are read from the parsed record, expanded.
    compact_layout = _is_compact(trace)
    for lo in range(0, len(steps), detail.BATCH):
        hi = min(len(steps), lo + detail.BATCH)
        pieces = [(line, 0, len(line)) for line in detail.raw_lines(trace, np.arange(lo, hi))]
        for i, (data, s, e) in zip(range(lo, hi), pieces, strict=True):
            c = counts[i]
            if not (any(c) or b.pending):
                continue
            if compact_layout or not _step_from_bytes(b, data, s, e, steps[i], c):
                b.record(steps[i], detail.with_defaults(orjson.loads(data[s:e])))
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
