"""Measured throughput and per-request latency, from a trace's step timestamps alone.

Busy time is the sum of step durations (tracer.analysis.timing.step_durations) that are
not idle gaps: stalls and empty steps are time the engine spent, so they count.
A request's first token is back at the end of its first step that sampled one,
and TTFT runs from the start of the first step that saw it (admitted or
waiting): the time between its arrival and that schedule() call, and the API
server's own work, are not in the trace, so TTFT here is a lower bound.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
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

    def latency(self, trace: Trace, durations: Durations) -> Latency:
        """TTFT and TPOT per request (TPOT: time after the first token over the tokens after it)."""
        t, end = trace.columns["t"], durations.end
        ttft, tpot = [], []
        for rid, i in self.seen.items():
            f = self.first.get(rid)
            if f is None or not np.isfinite(end[f]):
                continue
            ttft.append((end[f] - t[i]) * 1e3)
            last, tokens = self.last[rid], self.tokens[rid]
            if tokens > 1 and np.isfinite(end[last]):
                tpot.append((end[last] - end[f]) * 1e3 / (tokens - 1))
        return Latency(
            requests=len(ttft),
            ttft_ms=np.array(ttft),
            tpot_ms=np.array(tpot),
            unmeasured=len(self.seen) - len(ttft),
        )


def measure_latency(trace: Trace, durations: Durations, records: Iterable[Mapping[str, Any]]) -> Latency:
    tracker = LatencyTracker()
    for i, rec in enumerate(records):
        tracker.add(i, rec)
    return tracker.latency(trace, durations)
