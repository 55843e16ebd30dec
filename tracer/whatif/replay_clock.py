"""Pricing a replay with its clock (tracer.analysis.clock.StepClock, which tracer.render.clock
puts in a sentence): the recording's idle gaps as waits a timed replay repeats, and each
request's time in the frontend, which a replay by arrival time repeats.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from tracer.analysis import timing
from tracer.analysis.clock import StepClock
from tracer.analysis.step_features import step_pass
from tracer.trace.trace_type import Trace


def attach_idle_waits(workload: Any, trace: Trace, clock: StepClock) -> None:
    """The recording's idle gaps as waits a timed replay by step repeats: an idle interval
    is the step before it plus the wait, so the wait is what the clock does not price."""
    durations = timing.step_durations(trace)
    idle = np.flatnonzero(durations.status == timing.IDLE)
    if not len(idle):
        return
    features = step_pass(trace).features
    price = np.asarray(clock.model.predict(features.columns), dtype=float) * np.ones(len(trace))
    steps = trace.columns["step"]
    for i in idle:  # under async scheduling (duration_lag 1) the gap precedes step i + 2
        after = i + 1 + durations.lag
        if after < len(trace):
            workload.idle_waits[int(steps[after])] = max(0.0, float(durations.ms[i] - price[i]) / 1e3)


def attach_frontend_delays(workload: Any, trace: Trace) -> None:
    """How long each request took from its arrival (vLLM's `arrival_time`, stamped by the API
    server before tokenising) to the moment the engine could take it, as the recording shows:
    a replay by arrival time adds it then (Workload.engine_clock), whatever the schedule.

    The recording says only which schedule() call the engine added a request before (step r).
    EngineCore takes every queued request before each schedule(), so this one was not there
    yet at t[r-1]: it spent at least t[r-1] minus its arrival in the frontend, and the replay
    adds it at its first schedule() after that (after its arrival, when that is later). The
    rest of the way to step r was the wait for the engine to finish a step, which the replay
    makes with its own steps. When the engine sat idle before step r it waited for this very
    request, so it had it at t[r]. The frontend's time (tokenising, the hop to EngineCore; a
    burst's requests one after another) does not depend on the scheduler, so it is kept per
    request whatever the replayed schedule."""
    t = workload.step_times
    if workload.start_time is None or workload.t0 is None or not t:
        return
    idle = timing.idle_intervals(trace)
    delays = {}
    for spec in workload.requests:
        r = spec.arrival_step - 1
        if spec.arrival_time is None or not 0 <= r < len(t):
            continue
        arrival = workload.arrival_clock(spec)
        # 1 µs past t[r-1]: a replay whose step r-1 starts just then must not take it there.
        ready = t[r] if r == 0 or idle[r - 1] else max(arrival, t[r - 1] + 1e-6)
        delays[spec.id] = max(0.0, ready - arrival)
    workload.frontend_delays = delays
