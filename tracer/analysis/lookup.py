"""Lookups over a loaded trace that touch only the steps they need.

`tracer.analysis.requests.lifetimes` parses every step, far too slow to answer one search
in a million-step trace. Here a request id is found in the steps' raw records first
(`Trace.steps_containing`: the rows are read once, in blocks), and only the steps that
mention it are parsed; the lifetime itself is still built by `lifetimes`' own loop
(`requests.lives_of`), so both agree. When the trace's request index is already built (a
comparison builds it), the search starts at the request's admission instead of the first step.
"""

from __future__ import annotations

import numpy as np
import orjson

from tracer.analysis.detail import rows_of_steps
from tracer.analysis.flags import FlagReport
from tracer.analysis.requests import RequestLife, cached_index, lives_of
from tracer.trace.trace_type import Trace


def flag_rows(trace: Trace, report: FlagReport) -> tuple[np.ndarray, np.ndarray]:
    """(row of each flag, kind of each flag), in the report's order (by step)."""
    return rows_of_steps(trace, report.flags.steps), report.flags.kinds


def request_life(trace: Trace, request_id: str) -> RequestLife | None:
    """One request's lifetime (admitted, scheduled, preempted, resumed, finished), or None."""
    first = 0
    index = cached_index(trace)
    since = index.since.get(request_id) if index is not None else None
    if since is not None:  # before its first admission only the waiting lists name it
        first = max(0, int(rows_of_steps(trace, [since])[0]))
    mentioning = trace.steps_containing(orjson.dumps(request_id), first)
    return lives_of(record for _, record in mentioning).get(request_id)


def matching_ids(trace: Trace, prefix: str, *, limit: int = 20) -> list[str]:
    """Request ids that start with `prefix`, in order of first appearance (at most `limit`)."""
    needle = b'"' + orjson.dumps(prefix)[1:-1]
    found: dict[str, None] = {}
    if limit <= 0:
        return []
    for _, raw in trace.raw_many(range(len(trace))):
        # Request entries come before a step's "sampled"; after it, "inputs" and "ends"
        # hold format words (event kinds, finish reasons) in the same list shapes.
        stop = raw.find(b',"sampled":')
        if stop < 0:
            stop = len(raw)
        pos = raw.find(needle, 0, stop)
        while pos >= 0:
            end = raw.find(b'"', pos + len(needle))
            if end < 0:
                break
            # Ids are list entries ([id, ...] or ["a", "b"]); keys are followed by ':' and
            # string values ("kind":"step") preceded by ':', so neither is taken for an id.
            if raw[pos - 1 : pos] in (b"[", b",") and raw[end + 1 : end + 2] in (b",", b"]"):
                try:
                    rid = orjson.loads(raw[pos : end + 1])
                except orjson.JSONDecodeError:
                    rid = None
                if isinstance(rid, str):
                    found.setdefault(rid, None)
                    if len(found) >= limit:
                        return list(found)
            pos = raw.find(needle, end + 1, stop)
    return list(found)
