"""One pass over every step's requests, shared and kept: the step-time features
(tracer.analysis.timing.FeatureBuilder) and each request's token rows (LatencyTracker).

Throughput, latency, the step-time fit and a replay's clock all need it. It is computed
with NumPy from the trace's entry columns (tracer.analysis.entry_features); record by record
(`reference`, 0.3 ms a step at 256 running) only for a trace whose records do not fit
them, and in the tests that compare the two. It runs once per Trace object, and a big
trace file (one that has a reader sidecar) keeps the result beside it,
`<trace>.steppass.ssidx`, valid for exactly the file state the Trace was loaded from (the
reader's fingerprint: size, mtime and hashes) and that many steps. Rows, not times, are
kept: a retimed trace shares them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import orjson

from tracer.analysis import entry_features, timing
from tracer.analysis.memo import DiskForm, kept, memo
from tracer.analysis.throughput import LatencyTracker, RequestTimes
from tracer.trace.trace_type import Trace

NAME = "steppass"
# Bump when FeatureBuilder or LatencyTracker changes what it computes: older files are rebuilt.
VERSION = 2  # 2: arrivals (the `a` inputs' rows and times), first scheduled rows, the ids
_REQUEST_ARRAYS = ("seen", "first", "last", "tokens", "arrived", "scheduled", "arrival")
_DTYPES = {
    **{f"f_{name}": np.dtype("<f8") for name in timing.FEATURES},
    **{f"r_{name}": np.dtype("<f8" if name == "arrival" else "<i8") for name in _REQUEST_ARRAYS},
    "r_ids": np.dtype("u1"),  # the ids as one JSON list
}


@dataclass
class StepPass:
    features: timing.StepFeatures
    requests: RequestTimes


def step_pass(trace: Trace) -> StepPass:
    """The pass for `trace`: remembered in the Trace's memo, else read back from its file's
    cache, else run (and saved there when the trace has a fingerprint): tracer.analysis.memo.kept."""
    return kept(trace, _KEPT, _run)


def share(trace: Trace, copy: Trace) -> None:
    """`copy` holds `trace`'s records (a retimed copy, say): it shares the pass, not run again."""
    memo(copy).put(NAME, step_pass(trace))


def _run(trace: Trace) -> StepPass:
    found = entry_features.computed(trace)
    if found is None:
        return reference(trace)
    return StepPass(found.features, found.times)


def reference(trace: Trace) -> StepPass:
    """The pass record by record: the reference `_run` is compared with."""
    tracker = LatencyTracker()
    features = timing.step_features(timing.records_of(trace), len(trace), also=tracker.add)
    return StepPass(features, tracker.times())


def _unpack(meta: dict[str, Any], arrays: dict[str, np.ndarray]) -> StepPass | None:
    n = int(meta["steps"])  # the trace's: the sidecar was checked to hold as many
    columns = {name: np.array(arrays[f"f_{name}"]) for name in timing.FEATURES}
    requests: dict[str, Any] = {name: np.array(arrays[f"r_{name}"]) for name in _REQUEST_ARRAYS}
    try:
        requests["ids"] = orjson.loads(bytes(arrays["r_ids"]))
    except orjson.JSONDecodeError:
        return None
    if not isinstance(requests["ids"], list) or len(requests["ids"]) != len(requests["seen"]):
        return None
    lengths = {len(requests[name]) for name in _REQUEST_ARRAYS}
    if any(len(c) != n for c in columns.values()) or len(lengths) != 1:
        return None
    rows = np.concatenate([requests[k] for k in ("seen", "first", "last", "arrived", "scheduled")])
    if len(rows) and (rows.min() < -1 or rows.max() >= n):
        return None  # rows outside the trace: not this trace's
    features = timing.StepFeatures(columns, context_recorded=bool(meta.get("context_recorded")))
    return StepPass(features, RequestTimes(**requests))


def _pack(found: StepPass) -> tuple[dict[str, np.ndarray], dict[str, Any]] | None:
    arrays = {f"f_{name}": found.features.columns[name] for name in timing.FEATURES}
    arrays.update({f"r_{name}": getattr(found.requests, name) for name in _REQUEST_ARRAYS})
    try:
        arrays["r_ids"] = np.frombuffer(orjson.dumps(found.requests.ids), dtype=np.uint8)
    except TypeError:
        return None  # an id JSON cannot hold (never the recorder's)
    return arrays, {"context_recorded": found.features.context_recorded}


_KEPT = DiskForm(NAME, VERSION, _DTYPES, _pack, _unpack)
