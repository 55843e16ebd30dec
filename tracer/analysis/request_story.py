"""One request's life, step by step, with its reason at every step it was held back, its
time to first token in parts and what each of its preemptions cost: `schedscope why REQUEST`
and the views' request search. The trace's request index bounds the rows read, once."""

from __future__ import annotations

import dataclasses
import math
from collections import defaultdict
from dataclasses import dataclass
from typing import Any

import numpy as np
import orjson

from tracer.analysis import detail
from tracer.analysis.reasons import EXACT
from tracer.analysis.requests import RequestEvents, request_index
from tracer.analysis.step_features import step_pass
from tracer.analysis.throughput import steps_clock
from tracer.analysis.why import (
    Cause,
    Config,
    LaterStep,
    PreemptionWhy,
    later_step,
    recomputed_tokens,
    step_why,
)
from tracer.trace.trace_type import Trace


@dataclass(frozen=True)
class LifeStep:
    step: int
    state: str  # arrived, waiting, scheduled, clipped, unscheduled, preempted, resumed, finished
    tokens: int
    demand: int
    cause: Cause | None
    seconds: float  # this step's duration on the scheduler clock


@dataclass(frozen=True)
class RequestStory:
    id: str
    steps: list[LifeStep]
    waiting_by_reason: dict[str, tuple[int, float]]  # code (behind: root) -> (steps, seconds)
    ttft: dict[str, Any]  # waiting by reason, prefill steps and the first token's step, seconds
    preemptions: list[PreemptionWhy]
    finished: int | None

    def as_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "steps": [
                {
                    "step": s.step,
                    "state": s.state,
                    "tokens": s.tokens,
                    "demand": s.demand,
                    "seconds": round(s.seconds, 6),
                    **(s.cause.as_dict() if s.cause else {}),
                }
                for s in self.steps
            ],
            "waiting_by_reason": {
                k: {"steps": n, "seconds": round(t, 6)} for k, (n, t) in self.waiting_by_reason.items()
            },
            "ttft": self.ttft,
            "preemptions": [p.as_dict() for p in self.preemptions],
            "finished": self.finished,
        }


@dataclass(frozen=True)
class StorySpan:
    """Where one request's story lies, from the trace's per-request index (read once): its
    events, and the rows from the first that can name it (its arrival, else its first
    listing) up to the step that finished it."""

    events: RequestEvents | None
    first: int
    stop: int | None  # None: to the trace's end


def story_span(trace: Trace, request_id: str) -> StorySpan:
    """The rows to search for `request_id`: the request index bounds them (the whole trace
    when it does not know the request)."""
    index = request_index(trace)
    events = index.events.get(request_id)
    times = step_pass(trace).requests  # the same entry pass made both, or their sidecars
    try:
        i = times.ids.index(request_id)
    except ValueError:
        i = -1
    if events is None or i < 0:
        return StorySpan(events, 0, None)
    starts = [int(r) for r in (times.arrived[i], times.seen[i]) if r >= 0]
    first = min(starts) if starts else 0
    stop = None
    if events.finished is not None:
        row = int(detail.rows_of_steps(trace, [events.finished])[0])
        stop = row + 1 if row >= 0 else None
    return StorySpan(events, first, stop)


def _seconds(t: np.ndarray, row: int) -> float:
    """A step's duration on the scheduler clock: to the next step's start (the last: the median)."""
    if len(t) < 2:
        return 0.0
    if row + 1 < len(t):
        return float(t[row + 1] - t[row])
    return float(np.median(np.diff(t)))


def request_story(trace: Trace, request_id: str) -> RequestStory | None:
    """A request's life step by step, with its reason at every step it was held back: the
    trace's request index is read once, and only the records of the request's span."""
    span = story_span(trace, request_id)
    cfg = Config(trace)
    steps: list[LifeStep] = []
    preempted: list[tuple[PreemptionWhy, int]] = []
    after: list[LaterStep] = []  # what a preemption's cost reads of each later step
    waited: dict[str, list[float]] = defaultdict(lambda: [0, 0.0])
    ttft_wait: dict[str, float] = defaultdict(float)
    prefill_s = first_s = 0.0
    prefill_steps = 0
    first_token: int | None = None
    t = trace.columns["t"]
    added_t = scheduled_t = frontend_s = None
    finished: int | None = None
    named = False
    # The trace reads the span's bytes and parses only the records naming the request.
    for row, rec in trace.steps_containing(orjson.dumps(request_id), span.first, span.stop):
        named = True
        why = step_why(trace, row, rec, config=cfg, resume_costs=False)  # only its own, below
        if span.events is not None and span.events.resumed:
            after.append(later_step(rec, request_id))
        seconds = _seconds(t, row)
        arrival = next((e for e in rec.get("inputs") or () if e[0] == "a" and e[1] == request_id), None)
        if arrival is not None:
            steps.append(LifeStep(why.step, "arrived", 0, -1, None, 0.0))
            added_t = float(t[row])
            frontend_s = _frontend_seconds(trace, arrival, added_t)
        mine = next((r for r in why.requests if r.id == request_id), None)
        entry = next((e for g in ("new", "resumed", "running") for e in rec[g] if e[0] == request_id), None)
        if entry is not None:
            group = next(g for g in ("new", "resumed", "running") if any(e[0] == request_id for e in rec[g]))
            state = {"new": "admitted", "resumed": "resumed", "running": "scheduled"}[group]
            if mine is not None and mine.state == "clipped":
                state = f"{state}, clipped"
            steps.append(
                LifeStep(why.step, state, int(entry[1]), int(entry[3]), mine.cause if mine else None, seconds)
            )
            sampled = _sampled(rec, request_id)
            if scheduled_t is None:
                scheduled_t = float(t[row])
            if first_token is None:
                if sampled:
                    first_token = why.step
                    first_s = seconds
                else:
                    prefill_s += seconds
                    prefill_steps += 1
        elif mine is not None:
            steps.append(LifeStep(why.step, mine.state, 0, mine.demand, mine.cause, seconds))
            if mine.state == "waiting":
                bucket = waited[mine.cause.root]
                bucket[0] += 1
                bucket[1] += seconds
                if first_token is None:
                    ttft_wait[mine.cause.root] += seconds
        for p in why.preemptions:
            if p.victim == request_id:
                preempted.append((p, why.step))
                steps.append(LifeStep(why.step, "preempted", 0, -1, None, 0.0))
        if request_id in (rec.get("finished") or ()):
            steps.append(LifeStep(why.step, "finished", 0, -1, None, 0.0))
            finished = why.step
    if not named:
        return None
    exact = cfg.exact == EXACT
    preemptions = [_resumed_cost(p, step, span.events, after, exact) for p, step in preempted]
    # Steps the request waited through without being listed (a step lists at most 32 waiting
    # requests): the engine had it, so it waited, but the trace cannot say why.
    unlisted = None
    if added_t is not None and scheduled_t is not None:
        unlisted = max(0.0, scheduled_t - added_t - sum(ttft_wait.values()))
    ttft = {
        "frontend_seconds": None if frontend_s is None else round(frontend_s, 6),
        "unlisted_seconds": None if unlisted is None else round(unlisted, 6),
        "waiting": {k: round(v, 6) for k, v in ttft_wait.items()},
        "prefill_steps": prefill_steps,
        "prefill_seconds": round(prefill_s, 6),
        "first_token_step": first_token,
        "first_token_seconds": round(first_s, 6),
        "total_seconds": round(
            (frontend_s or 0.0) + (unlisted or 0.0) + sum(ttft_wait.values()) + prefill_s + first_s, 6
        )
        if first_token
        else None,
        "from": "arrival" if frontend_s is not None else "engine" if added_t is not None else "seen",
    }
    return RequestStory(
        id=request_id,
        steps=steps,
        waiting_by_reason={k: (int(v[0]), float(v[1])) for k, v in waited.items()},
        ttft=ttft,
        preemptions=preemptions,
        finished=finished,
    )


def _resumed_cost(
    p: PreemptionWhy, step: int, events: RequestEvents | None, later: list[LaterStep], exact: bool
) -> PreemptionWhy:
    """resume_cost from the story's own records (every later step naming the victim)."""
    looked = dataclasses.replace(p, looked_for_resume=True)
    resumed = next((s for s in events.resumed if s > step), None) if events is not None else None
    at = next((i for i, s in enumerate(later) if s.step == resumed), None)
    if resumed is None or at is None:
        return looked
    cached = later[at].cached if exact else None
    owed = None if p.lost is None else max(0, p.lost - (cached or 0))
    spent = 0 if owed is None else recomputed_tokens(owed, later[at:])
    return dataclasses.replace(
        looked,
        resumed_step=resumed,
        steps_until_resumed=resumed - step,
        recomputed=spent if owed is not None else None,
        cached_on_resume=cached,
    )


def _frontend_seconds(trace: Trace, arrival: list[Any], added_t: float) -> float | None:
    """From the request's arrival (its `a` input) to the schedule() call it was added before;
    None where the arrival is not a wall time within the run (throughput.steps_clock)."""
    at = arrival[5] if len(arrival) > 5 and isinstance(arrival[5], (int, float)) else np.nan
    on_clock = float(steps_clock(trace, np.array([at]))[0])
    return None if math.isnan(on_clock) else added_t - on_clock


def _sampled(rec: dict[str, Any], rid: str) -> int:
    sampled = rec.get("sampled") or {}
    return int(sampled.get(rid, 0)) if isinstance(sampled, dict) else 0
