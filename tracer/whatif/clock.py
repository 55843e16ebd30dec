"""Pricing a replay: what the clock (tracer.analysis.clock.StepClock) is, in a sentence,
and the recording's idle gaps as waits a timed replay repeats.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from tracer.analysis import timing
from tracer.analysis.clock import StepClock
from tracer.analysis.steppass import step_pass
from tracer.trace.reader import Trace


def clock_sentence(clock: StepClock) -> str:
    """What prices a replayed step, and how far to trust it."""
    if clock.kind == "median":
        ms = clock.model.coef["step"]
        return (
            f"every step priced at the source's measured median step, {ms:,.3f} ms ({clock.steps} usable "
            f"steps: too few to fit a step-time model); error unknown"
        )
    return (
        f"step-time model fitted on the source ({clock.steps} usable steps): held-out error "
        f"{clock.heldout_median_pct:.1f}% median, {clock.heldout_p90_pct:.1f}% p90 per step, "
        f"{clock.heldout_total_pct:+.1f}% summed"
    )


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
