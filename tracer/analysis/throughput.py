"""Measured throughput and per-request latency, from a trace's step timestamps alone.

Busy time is the sum of step durations (tracer.analysis.timing.step_durations) that are
not idle gaps: stalls and empty steps are time the engine spent, so they count.
A request's first token is back at the end of its first step that sampled one,
and TTFT runs from the start of the first step that saw it (admitted or
waiting): the time between its arrival and that schedule() call, and the API
server's own work, are not in the trace, so TTFT here is a lower bound.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from itertools import repeat
from typing import Any

import numpy as np

from tracer.analysis.timing import BAD, GAP, IDLE, Durations, StepFeatures
from tracer.trace.reader import Trace

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


@dataclass
class Latency:
    requests: int  # with a first token and a known end of that step
    ttft_ms: np.ndarray
    tpot_ms: np.ndarray  # requests with 2+ tokens
    unmeasured: int  # sampled nothing, or their step's end is past the trace

    def percentiles(self, values: np.ndarray) -> dict[str, float] | None:
        if not len(values):
            return None
        return {f"p{p}": float(np.percentile(values, p)) for p in PERCENTILES}


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
    """Per request, from step records fed in order: the step that first saw it, its first
    and last sampling steps, and its tokens."""

    def __init__(self) -> None:
        self.seen: dict[str, int] = {}
        self.first: dict[str, int] = {}
        self.last: dict[str, int] = {}
        self.tokens: dict[str, int] = {}

    def add(self, i: int, rec: Mapping[str, Any]) -> None:
        seen = self.seen
        for group in (rec["new"], rec["resumed"], rec["running"], rec["waiting_demand"]):
            for entry in group:
                seen.setdefault(entry[0], i)
        for rid, n in (rec["sampled"] or {}).items():
            if n > 0:
                self.first.setdefault(rid, i)
                self.last[rid] = i
                self.tokens[rid] = self.tokens.get(rid, 0) + n

    def times(self) -> RequestTimes:
        """Each request's rows, in the order they were first seen."""
        first, last, tokens = self.first, self.last, self.tokens
        return RequestTimes(
            seen=np.fromiter(self.seen.values(), np.int64, len(self.seen)),
            first=np.fromiter(map(first.get, self.seen, repeat(-1)), np.int64, len(self.seen)),
            last=np.fromiter(map(last.get, self.seen, repeat(-1)), np.int64, len(self.seen)),
            tokens=np.fromiter(map(tokens.get, self.seen, repeat(0)), np.int64, len(self.seen)),
        )


@dataclass
class RequestTimes:
    """Per request, in the order first seen: the row of the first step that saw it, of its
    first and last sampled token (-1: none), and the tokens sampled. Rows, not times, so a
    retimed trace (tracer.analysis.clock.retimed) shares them."""

    seen: np.ndarray
    first: np.ndarray
    last: np.ndarray
    tokens: np.ndarray

    def latency(self, trace: Trace, durations: Durations) -> Latency:
        """TTFT and TPOT per request (TPOT: time after the first token over the tokens after it)."""
        t, end = trace.columns["t"], durations.end
        sampled = self.first >= 0
        first_end = np.where(sampled, end[np.where(sampled, self.first, 0)], np.nan)
        measured = np.isfinite(first_end)
        last_end = end[np.where(measured, self.last, 0)]
        more = measured & (self.tokens > 1) & np.isfinite(last_end)
        return Latency(
            requests=int(measured.sum()),
            ttft_ms=(first_end[measured] - t[self.seen[measured]]) * 1e3,
            tpot_ms=(last_end[more] - first_end[more]) * 1e3 / (self.tokens[more] - 1),
            unmeasured=int(len(self.seen) - measured.sum()),
        )
