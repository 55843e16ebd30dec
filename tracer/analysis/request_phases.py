"""Each request's phases on the wall clock: queued, prefill, decode, as vLLM times them.

vLLM's request span (vllm/v1/engine/output_processor.py, `do_tracing`) and its request
histograms split a request at four instants: `queued_ts` (EngineCore took it), `scheduled_ts`
(its first schedule()), `first_token_ts` and `last_token_ts`. A trace has each of them:

- queued: the schedule() call whose inputs first hold the request (its `["a", …]` input; a
  trace without inputs: the first step that listed it). EngineCore took it between the
  previous call and this one, so this is at most one step late;
- scheduled: the first step that scheduled it;
- first token: the end of the first step that sampled a token for it (throughput.Latency's);
- last token: the end of the last step that sampled one; a request that sampled none ends
  with the step that reported it finished, and one still open with the trace.

The span starts at the request's arrival when the trace has it on the steps' clock (TTFT
"from arrival", tracer.analysis.throughput), else at queued. Step times are the scheduler's
monotonic clock; the header's `start_time` (wall) and `t0` (monotonic, read together) put
them on the wall clock.

What schedscope adds: the queue time split by the binding constraint of each step the request
waited through (`step_bindings.bindings`, as `Session.waiting_by_reason` counts it), and each
preemption's trigger and lost tokens (`why.step_why`).

`request_phases` reads one snapshot (a Session); a growing trace's next snapshot can be asked
for the requests that finished since (`finished_only`, `skip`), so a live sender would never
send a request twice.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from typing import Any

import numpy as np

from tracer.analysis import detail, timing, why
from tracer.analysis.reasons import CODES
from tracer.analysis.requests import request_events
from tracer.analysis.session import Session
from tracer.analysis.step_features import step_pass
from tracer.trace.trace_type import Trace


class NoWallClock(ValueError):
    """The header lacks `start_time` or `t0`: the steps cannot be put on the wall clock. Keeps
    the trace's `path`; tracer.render.otlp.no_wall_clock words it."""

    def __init__(self, path: str) -> None:
        self.path = path
        super().__init__(path)


@dataclass(frozen=True)
class Preemption:
    step: int
    time: float  # wall clock, s
    trigger: str  # why.trigger_kind: kv_blocks, priority, self or unknown
    by: str | None  # the request whose KV allocation failed
    lost: int | None  # computed tokens dropped
    resumed: float | None  # wall clock, s: the step that resumed it


@dataclass(frozen=True)
class RequestPhases:
    """One request's instants (wall clock, s) and what the trace says about them."""

    id: str
    start: float  # arrival (ttft_from "arrival"), else queued
    queued: float
    scheduled: float | None
    first_token: float | None
    end: float
    finished: bool  # the trace saw it finish (else it was still open when the trace ends)
    ttft_from: str  # where `start` is (tracer.analysis.throughput.BASES): arrival, engine or seen
    prompt_tokens: int | None
    max_tokens: int | None
    priority: int | None
    output_tokens: int
    waiting: dict[str, float]  # queue seconds by the binding constraint of each step (no zeros)
    preemptions: tuple[Preemption, ...]

    @property
    def time_in_queue(self) -> float | None:
        return None if self.scheduled is None else self.scheduled - self.queued

    @property
    def ttft(self) -> float | None:
        return None if self.first_token is None else self.first_token - self.start

    @property
    def prefill(self) -> float | None:
        if self.scheduled is None or self.first_token is None:
            return None
        return self.first_token - self.scheduled

    @property
    def decode(self) -> float | None:
        return None if self.first_token is None else self.end - self.first_token

    @property
    def binding(self) -> str | None:
        """The constraint that held it in the queue longest."""
        return max(self.waiting, key=self.waiting.__getitem__) if self.waiting else None


def wall_offset(trace: Trace) -> float:
    """What to add to a step's `t` to get wall-clock seconds (`start_time - t0`)."""
    start, t0 = trace.header.get("start_time"), trace.header.get("t0")
    if not isinstance(start, (int, float)) or not isinstance(t0, (int, float)):
        raise NoWallClock(trace.path)
    return float(start) - float(t0)


def request_phases(
    source: Session | Trace, *, finished_only: bool = False, skip: Collection[str] = ()
) -> list[RequestPhases]:
    """Every request the trace saw queued, in the order first seen (one scheduled before the
    trace began has no queue, prefill or TTFT to give, so it is left out; one the trace first
    lists waiting is queued from there); `finished_only`: only those it saw finish; `skip`:
    ids already handed on."""
    session = Session.of(source)
    trace = session.trace
    offset = wall_offset(trace)
    n = len(trace)
    if not n:
        return []
    times = step_pass(trace).requests
    basis = times.basis(trace)
    events = request_events(trace)
    t = trace.columns["t"]
    seconds = _step_seconds(t)
    measured = timing.step_durations(trace).end
    # A step's end: when its output was back; where the trace cannot say (its last steps),
    # the next schedule() call, or its start plus the median step.
    end = np.where(np.isfinite(measured), measured, t + seconds) + offset
    t_wall = t + offset
    arrival = times.arrival_clock(trace) + offset
    queued_row = np.where(times.arrived >= 0, times.arrived, times.seen)
    sched_row = times.scheduled
    waiting = _waiting_seconds(session.bindings, seconds, queued_row, np.where(sched_row >= 0, sched_row, n))
    asked = _arrivals(trace, times.arrived)
    preempted = _preemptions(trace, offset)
    out = []
    for i, rid in enumerate(times.ids):
        ev = events.get(rid)
        q, s = int(queued_row[i]), int(sched_row[i])
        if q < 0 or (times.arrived[i] < 0 and s >= 0 and (ev is None or ev.admitted is None)):
            continue  # running before the trace began
        finished = ev is not None and ev.finished is not None
        if (finished_only and not finished) or rid in skip:
            continue
        first, last = int(times.first[i]), int(times.last[i])
        if last >= 0:
            stop = float(end[last])
        elif finished:
            stop = float(t_wall[int(detail.rows_of_steps(trace, [ev.finished])[0])])
        else:
            stop = float(end[-1])
        prompt, max_tokens, priority = asked.get(rid, (None, None, None))
        # Where this request's TTFT starts: the trace's basis where it has one for the request.
        if basis == "arrival" and np.isfinite(arrival[i]):
            start, ttft_from = float(arrival[i]), "arrival"
        else:
            start, ttft_from = float(t_wall[q]), "engine" if times.arrived[i] >= 0 else "seen"
        out.append(
            RequestPhases(
                id=rid,
                start=start,
                queued=float(t_wall[q]),
                scheduled=float(t_wall[s]) if s >= 0 else None,
                first_token=float(end[first]) if first >= 0 else None,
                end=max(stop, start),
                finished=finished,
                ttft_from=ttft_from,
                prompt_tokens=prompt,
                max_tokens=max_tokens,
                priority=priority,
                output_tokens=int(times.tokens[i]),
                waiting={CODES[c]: float(v[i]) for c, v in waiting.items() if v[i] > 0},
                preemptions=tuple(preempted.get(rid, ())),
            )
        )
    return out


def _waiting_seconds(
    codes: np.ndarray, seconds: np.ndarray, lo: np.ndarray, hi: np.ndarray
) -> dict[int, np.ndarray]:
    """Per binding code: each request's seconds in steps [lo, hi) bound by it (one cumulative
    sum per code present, so a request costs two lookups per code)."""
    lo, hi = np.clip(lo, 0, len(codes)), np.clip(hi, 0, len(codes))
    out = {}
    for code in np.unique(codes).tolist():
        cum = np.concatenate([[0.0], np.cumsum(np.where(codes == code, seconds, 0.0))])
        out[code] = np.maximum(cum[hi] - cum[lo], 0.0)
    return out


def _arrivals(trace: Trace, arrived: np.ndarray) -> dict[str, tuple[Any, Any, Any]]:
    """(prompt tokens, max_tokens, priority) of each request from its `["a", …]` input: only
    the steps that hold arrivals are read, and only their inputs."""
    rows = np.unique(arrived[arrived >= 0])
    out: dict[str, tuple[Any, Any, Any]] = {}
    for _, rec in detail.region(trace, rows, "inputs", "ends"):
        for e in rec.get("inputs") or ():
            if e and e[0] == "a" and len(e) > 4:
                out[e[1]] = tuple(v if isinstance(v, int) else None for v in e[2:5])  # type: ignore[assignment]
    return out


def _preemptions(trace: Trace, offset: float) -> dict[str, list[Preemption]]:
    """Each victim's preemptions, with when it resumed; only the preempting steps are read."""
    t = trace.columns["t"]
    rows = np.flatnonzero(trace.columns["n_preempted"] > 0)
    events = request_events(trace)
    out: dict[str, list[Preemption]] = {}
    config = why.Config(trace)
    for row, rec in detail.records(trace, rows):
        sw = why.step_why(trace, row, rec, config=config, resume_costs=False)
        for p in sw.preemptions:
            ev = events.get(p.victim)
            later = [s for s in (ev.resumed if ev is not None else ()) if s > sw.step]
            back = int(detail.rows_of_steps(trace, later[:1])[0]) if later else -1
            out.setdefault(p.victim, []).append(
                Preemption(
                    step=sw.step,
                    time=float(t[sw.row]) + offset,
                    trigger=why.trigger_kind(p),
                    by=p.trigger,
                    lost=p.lost,
                    resumed=float(t[back]) + offset if back >= 0 else None,
                )
            )
    return out


def _step_seconds(t: np.ndarray) -> np.ndarray:
    """Each step's duration on the scheduler clock: to the next step's start (the last: the
    median), as why's per-step figures count it."""
    if len(t) < 2:
        return np.zeros(len(t))
    d = np.diff(t)
    return np.append(d, float(np.median(d)))
