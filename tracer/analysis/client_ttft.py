"""A client's TTFT, request by request, against the trace's: where the client's extra time went.

`vllm bench serve --save-detailed` writes, per request, its TTFT and `start_times` (the
client's `time.perf_counter()` when it sent the request) and sends each request with an
`X-Request-Id` of its prefix and index, which vLLM's completions API keeps in the engine's
request id (`cmpl-<prefix><index>-0-<suffix>`). On Linux `perf_counter` and `monotonic` are the
same clock (CLOCK_MONOTONIC), the clock of the trace's step `t`, so when the client ran on the
server's host each request's client TTFT splits exactly into:

- `before_arrival`: from the client's send to vLLM's `arrival_time` stamp (connecting, the
  HTTP server accepting and parsing; a burst's requests wait there one after another);
- `trace`: the trace's TTFT from arrival (tracer.analysis.throughput);
- `way_back`: from the end of the first token's step to the client reading it (output
  processing and detokenising in the API server, the stream, the client's own loop).

A client on another host has another monotonic clock: the split is then meaningless, and
`split` refuses when the parts are not all above -1 ms.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from tracer.analysis import timing
from tracer.analysis.step_features import step_pass
from tracer.trace.trace_type import Trace

# cmpl-<X-Request-Id>-<prompt index>-<suffix>; the bench's id is its prefix (`bench-<hex>-` by
# default: it ends in a separator) and the request's index. vLLM's own ids are bare hex.
_BENCH_ID = re.compile(r"^cmpl-(?P<prefix>.*?[^0-9A-Za-z])(?P<index>\d+)-\d+-[0-9a-f]+$")
PARTS = ("before_arrival", "trace", "way_back")


# Why a client's result cannot be split against the trace (ClientMismatch.why).
NOT_DETAILED = "not detailed"  # no per-request ttfts and start_times (--save-detailed)
NO_ARRIVALS = "no arrivals"  # the trace records no arrival times
SEVERAL_RUNS = "several runs"  # the trace holds several bench runs and no prefix names one
NONE_MATCHED = "none matched"  # no request of the result is in the trace
OTHER_CLOCK = "other clock"  # a part below -1 ms: the client ran on another clock


class ClientMismatch(ValueError):
    """The client's result and the trace do not describe the same requests on one clock:
    `why` (one of the constants above), the trace's `path` and, for SEVERAL_RUNS, the bench
    runs' `prefixes`. tracer.render.timing_report.client_mismatch_sentence words it."""

    def __init__(self, why: str, path: str = "", prefixes: tuple[str, ...] = ()) -> None:
        self.why, self.path, self.prefixes = why, path, prefixes
        super().__init__(why, path, prefixes)


@dataclass
class ClientSplit:
    """Per matched request (ms): the client's TTFT and its parts, which add up to it."""

    client_ms: np.ndarray
    parts_ms: dict[str, np.ndarray]
    unmatched: int  # client requests the trace has no measured first token for

    def percentiles(self, values: np.ndarray) -> dict[str, float] | None:
        if not len(values):
            return None
        return {f"p{p}": float(np.percentile(values, p)) for p in (50, 90, 99)}


def split(trace: Trace, result: Mapping[str, Any], prefix: str | None = None) -> ClientSplit:
    """Match `vllm bench serve --save-detailed`'s `result` to `trace` and split each TTFT.
    `prefix`: the run's `--request-id-prefix`, needed when the trace holds several bench runs
    (the result file does not name its own)."""
    ttfts, starts = result.get("ttfts"), result.get("start_times")
    if not isinstance(ttfts, list) or not isinstance(starts, list) or len(ttfts) != len(starts):
        raise ClientMismatch(NOT_DETAILED)
    times = step_pass(trace).requests
    if times.basis(trace) != "arrival":
        raise ClientMismatch(NO_ARRIVALS, trace.path)
    ids = times.ids
    durations = timing.step_durations(trace)
    arrival = times.arrival_clock(trace)
    first_end = np.where(times.first >= 0, durations.end[np.maximum(times.first, 0)], np.nan)
    found = [(k, m) for k, rid in enumerate(ids) if (m := _BENCH_ID.match(rid)) is not None]
    prefixes = sorted({m.group("prefix") for _, m in found})
    if prefix is None and len(prefixes) > 1:
        raise ClientMismatch(SEVERAL_RUNS, trace.path, tuple(prefixes))
    rows: list[tuple[float, float, float, float]] = []
    for k, m in found:
        if prefix is not None and m.group("prefix") != prefix:
            continue
        i = int(m.group("index"))
        if not (0 <= i < len(ttfts)) or not ttfts[i] or starts[i] is None:
            continue
        if not (np.isfinite(arrival[k]) and np.isfinite(first_end[k])):
            continue
        sent, client = float(starts[i]), float(ttfts[i])
        rows.append((client, arrival[k] - sent, first_end[k] - arrival[k], sent + client - first_end[k]))
    if not rows:
        raise ClientMismatch(NONE_MATCHED, trace.path)
    a = np.array(rows) * 1e3
    if (a[:, 1:] < -1.0).any():
        raise ClientMismatch(OTHER_CLOCK, trace.path)
    matched = len(rows)
    return ClientSplit(
        client_ms=a[:, 0],
        parts_ms={name: a[:, j + 1] for j, name in enumerate(PARTS)},
        unmatched=sum(1 for x in ttfts if x) - matched,
    )
