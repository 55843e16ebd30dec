"""Measured throughput and per-request latency, from a trace's step timestamps alone.

Busy time is the sum of step durations (tracer.analysis.timing.step_durations) that are
not idle gaps: stalls and empty steps are time the engine spent, so they count.
A request's first token is back at the end of its first step that sampled one.

TTFT starts where the trace lets it (`Latency.basis`, in order of preference):
- "arrival": the request's `arrival_time`, stamped by vLLM's frontend when the request
  reached the server, put on the steps' monotonic clock with the header's `start_time` and
  `t0` (read together when the tracer started). This is TTFT as a client measures it, less
  the network, the HTTP parsing before the stamp and the detokenizer after the step.
- "engine": the schedule() call the engine added the request before (its `["a", ...]`
  input): what the engine alone adds. A replay by recorded step has only this.
- "seen": the first step that listed the request (admitted or waiting), for traces without
  inputs (format 1.0): a lower bound, late for requests beyond the 32 a step lists waiting.

The parts of an arrival TTFT add up to it: `frontend` (arrival to the schedule() call that
first had it), `waiting` (to the step that first scheduled it), `prefill` (to the start of the
step that sampled its first token) and `first_step` (that step, to its end).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from itertools import repeat
from typing import Any

import numpy as np

from tracer.analysis.timing import BAD, GAP, IDLE, Durations, StepFeatures
from tracer.trace.trace_type import Trace

PERCENTILES = (50, 90, 99)


@dataclass
class Throughput:
    busy_s: float  # engine time: step durations, idle gaps excluded
    span_s: float  # first to last schedule() call
    idle_s: float
    prefill_steps: int
    prompt_tokens: int  # prefill tokens of those steps
    prefill_s: float  # their durations
    output_tokens: int  # sampled in busy steps
    target_steps: int  # busy steps that scheduled tokens
    decode_tokens_in_prefill_steps: int

    @property
    def prompt_tok_s(self) -> float | None:
        return self.prompt_tokens / self.prefill_s if self.prefill_s > 0 else None

    @property
    def output_tok_s(self) -> float | None:
        return self.output_tokens / self.busy_s if self.busy_s > 0 else None

    @property
    def target_steps_s(self) -> float | None:
        return self.target_steps / self.busy_s if self.busy_s > 0 else None


BASES = ("arrival", "engine", "seen")
# What each TTFT basis measures, for every view's label (tracer.render owns the sentences).
BASIS_LOWER_BOUND = {"arrival": False, "engine": True, "seen": True}
PARTS = ("frontend", "waiting", "prefill", "first_step")


@dataclass
class Latency:
    requests: int  # with a first token and a known end of that step
    ttft_ms: np.ndarray
    tpot_ms: np.ndarray  # requests with 2+ tokens
    unmeasured: int  # sampled nothing, or their step's end is past the trace
    basis: str = "seen"  # where TTFT starts: one of BASES
    # Per measured request (basis "arrival" only, else empty), ms: the parts of its TTFT.
    parts_ms: dict[str, np.ndarray] | None = None

    def percentiles(self, values: np.ndarray) -> dict[str, float] | None:
        if not len(values):
            return None
        return {f"p{p}": float(np.percentile(values, p)) for p in PERCENTILES}

    def mean_parts(self) -> dict[str, float] | None:
        """The mean of each TTFT part over the measured requests (means add up; percentiles do not)."""
        if not self.parts_ms or not self.requests:
            return None
        return {k: float(v.mean()) for k, v in self.parts_ms.items()}


def busy_mask(durations: Durations) -> np.ndarray:
    return np.isfinite(durations.ms) & ~np.isin(durations.status, (IDLE, GAP, BAD))


def measure_throughput(
    trace: Trace, durations: Durations, features: StepFeatures, *, without: np.ndarray | None = None
) -> Throughput:
    """Throughput over busy time; `without`: step rows to leave out (e.g. the fit's stalls)."""
    col = trace.columns
    busy = busy_mask(durations)
    if without is not None:
        busy[without] = False
    ms = np.where(busy, durations.ms, 0.0)
    prefill = features.columns["prefill_tokens"]
    pre = busy & (prefill > 0)
    idle = np.isfinite(durations.ms) & np.isin(durations.status, (IDLE, GAP))
    t = col["t"]
    return Throughput(
        busy_s=float(ms.sum()) / 1e3,
        span_s=float(t[-1] - t[0]) if len(t) else 0.0,
        idle_s=float(durations.ms[idle].sum()) / 1e3,
        prefill_steps=int(pre.sum()),
        prompt_tokens=int(prefill[pre].sum()),
        prefill_s=float(ms[pre].sum()) / 1e3,
        output_tokens=int(np.clip(col["sampled_tokens"][busy], 0, None).sum()),
        target_steps=int((busy & (col["target_used"] > 0)).sum()),
        decode_tokens_in_prefill_steps=int(features.columns["decode_tokens"][pre].sum()),
    )


class LatencyTracker:
    """Per request, from step records fed in order: the step whose inputs added it and its
    arrival time, the step that first listed it, first scheduled it, its first and last
    sampling steps, and its tokens."""

    def __init__(self) -> None:
        self.seen: dict[str, int] = {}  # first listed; a request only ever added gets -1
        self.arrived: dict[str, int] = {}
        self.arrival: dict[str, float] = {}  # wall clock, as recorded
        self.scheduled: dict[str, int] = {}
        self.first: dict[str, int] = {}
        self.last: dict[str, int] = {}
        self.tokens: dict[str, int] = {}
        self.order: dict[str, None] = {}  # every request, in the order it first appeared

    def add(self, i: int, rec: Mapping[str, Any]) -> None:
        seen, order = self.seen, self.order
        for e in rec.get("inputs") or ():
            if e[0] == "a" and e[1] not in self.arrived:
                self.arrived[e[1]] = i
                order.setdefault(e[1])
                if isinstance(e[5], (int, float)):
                    self.arrival[e[1]] = float(e[5])
        for group in (rec["new"], rec["resumed"], rec["running"]):
            for entry in group:
                self.scheduled.setdefault(entry[0], i)
                seen.setdefault(entry[0], i)
                order.setdefault(entry[0])
        for entry in rec["waiting_demand"]:
            seen.setdefault(entry[0], i)
            order.setdefault(entry[0])
        for rid, n in (rec["sampled"] or {}).items():
            if n > 0:
                self.first.setdefault(rid, i)
                self.last[rid] = i
                self.tokens[rid] = self.tokens.get(rid, 0) + n

    def times(self) -> RequestTimes:
        """Each request's rows, in the order they first appeared."""
        ids, n = self.order, len(self.order)

        def rows(d: dict[str, int]) -> np.ndarray:
            return np.fromiter(map(d.get, ids, repeat(-1)), np.int64, n)

        return RequestTimes(
            seen=rows(self.seen),
            first=rows(self.first),
            last=rows(self.last),
            tokens=np.fromiter(map(self.tokens.get, ids, repeat(0)), np.int64, n),
            arrived=rows(self.arrived),
            scheduled=rows(self.scheduled),
            arrival=np.fromiter(map(self.arrival.get, ids, repeat(np.nan)), np.float64, n),
            ids=list(ids),
        )


def steps_clock(trace: Trace, arrival: np.ndarray) -> np.ndarray:
    """Recorded arrival times (wall clock) on the steps' monotonic clock: `arrival_time -
    start_time + t0`. NaN where there is none, or where it is not a wall time within an hour
    of the run (an offline recording stores step numbers there)."""
    h = trace.header
    start, t0 = h.get("start_time"), h.get("t0")
    t = trace.columns["t"]
    arrival = np.asarray(arrival, dtype=np.float64)
    if not isinstance(start, (int, float)) or not isinstance(t0, (int, float)) or not len(t):
        return np.full(arrival.shape, np.nan)
    at = arrival - float(start) + float(t0)
    span = float(t[-1] - t[0])
    inside = (at >= t[0] - 3600) & (at <= t[-1] + span + 3600)
    return np.where(inside, at, np.nan)


@dataclass
class RequestTimes:
    """Per request, in the order first seen: the row of the step whose inputs added it, of
    the first step that listed it, first scheduled it, of its first and last sampled token
    (-1: none), the tokens sampled, and its recorded arrival time (wall clock; NaN: none).
    Rows, not times, so a retimed trace (tracer.analysis.clock.retimed) shares them."""

    seen: np.ndarray
    first: np.ndarray
    last: np.ndarray
    tokens: np.ndarray
    arrived: np.ndarray
    scheduled: np.ndarray
    arrival: np.ndarray
    ids: list[str] = field(default_factory=list)  # each request's id, in the same order

    def arrival_clock(self, trace: Trace) -> np.ndarray:
        """Each arrival on the steps' monotonic clock (steps_clock)."""
        return steps_clock(trace, self.arrival)

    def basis(self, trace: Trace) -> str:
        """The best TTFT start this trace has for its requests (module docstring)."""
        if not len(self.arrived) or (self.arrived < 0).all():
            return "seen"
        replay = trace.header.get("replay")
        if replay is not None and (replay.get("arrivals") != "time"):
            return "engine"  # arrivals by step: the recorded wall times are not on this clock
        added = self.arrived >= 0
        return "arrival" if np.isfinite(self.arrival_clock(trace)[added]).all() else "engine"

    def latency(self, trace: Trace, durations: Durations, basis: str | None = None) -> Latency:
        """TTFT and TPOT per request (TPOT: time after the first token over the tokens after it);
        TTFT from `basis` (default: the best this trace has)."""
        basis = basis or self.basis(trace)
        t, end = trace.columns["t"], durations.end
        sampled = self.first >= 0
        first_end = np.where(sampled, end[np.where(sampled, self.first, 0)], np.nan)
        engine_row = self.seen if basis == "seen" else np.where(self.arrived >= 0, self.arrived, self.seen)
        known = np.isfinite(first_end) & (engine_row >= 0)
        engine_t = np.where(known, t[np.where(known, engine_row, 0)], np.nan)
        start = self.arrival_clock(trace) if basis == "arrival" else engine_t
        measured = known & np.isfinite(start)
        last_end = end[np.where(measured, self.last, 0)]
        more = measured & (self.tokens > 1) & np.isfinite(last_end)
        parts = None
        if basis == "arrival":
            m = measured
            sched_t = t[np.where(m & (self.scheduled >= 0), self.scheduled, 0)][m]
            first_t = t[np.where(m, self.first, 0)][m]
            parts = {
                "frontend": (engine_t[m] - start[m]) * 1e3,
                "waiting": (sched_t - engine_t[m]) * 1e3,
                "prefill": (first_t - sched_t) * 1e3,
                "first_step": (first_end[m] - first_t) * 1e3,
            }
        return Latency(
            requests=int(measured.sum()),
            ttft_ms=(first_end[measured] - start[measured]) * 1e3,
            tpot_ms=(last_end[more] - first_end[more]) * 1e3 / (self.tokens[more] - 1),
            unmeasured=int(len(self.seen) - measured.sum()),
            basis=basis,
            parts_ms=parts,
        )
