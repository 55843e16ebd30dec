"""A replay's clock, and the throughput and latency of a trace.

A replay has no forward passes to time, so each replayed step is priced: by the
step-time model fitted on the source trace (tracer.analysis.timing), or, where the trace
is too short or too idle to fit one, by its measured median step (one price
for every step, error unknown). `StepClock` carries either, with its held-out
error, into a replay's header and across a sweep's worker processes.

`performance(trace)` applies tracer.analysis.throughput's measures to a trace: measured
for a recording, predicted for a timed replay (its `t` are the clock's), and
priced with a given clock for an untimed replay (its `t` are the offline
scheduler's own CPU time). Both read a trace only, so they live in analysis: a comparison
prices a replay with them. tracer.whatif.replay_clock says what prices a replay and gives it the
recording's idle waits; tracer.render.compare holds the sentences about these figures.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

import numpy as np

from tracer.analysis import step_features, timing
from tracer.analysis.step_features import step_pass
from tracer.analysis.throughput import BASES, busy_mask, measure_throughput
from tracer.trace.trace_type import Trace


@dataclass(frozen=True)
class StepClock:
    """What a replayed step costs. kind "fitted": the model fitted on the source trace;
    "median": too short to fit, every step costs the source's measured median step."""

    model: timing.TimingModel
    kind: str
    steps: int  # the source's usable steps behind it
    heldout_median_pct: float | None = None  # a single step's error (fitted only)
    heldout_p90_pct: float | None = None
    heldout_total_pct: float | None = None  # signed error of the held-out steps' sum
    # Why no model, for "median": TimingRefused's facts, {"what", "counts"}, which
    # tracer.render.clock words (a replay's header and `sweep --json` keep the sentence).
    refused: dict[str, Any] | None = None
    # A fresh server's first forward pass (lazy initialisation) beyond its predicted time, when
    # the recording began with the server and that step was a stall: a replay's first step too.
    warmup_ms: float | None = None

    @property
    def sum_error_pct(self) -> float | None:
        """The error of anything summed over many steps (time to drain, tok/s): the held-out total's."""
        return None if self.heldout_total_pct is None else abs(self.heldout_total_pct)

    def to_dict(self) -> dict[str, Any]:
        doc = dataclasses.asdict(self)
        doc["model"] = self.model.to_dict()
        return doc

    @classmethod
    def from_dict(cls, doc: dict[str, Any]) -> StepClock:
        fields = {k: v for k, v in doc.items() if k in cls.__dataclass_fields__}
        fields["model"] = timing.TimingModel.from_dict(doc["model"])
        return cls(**fields)


class NoClock(ValueError):
    """Neither a model nor a measured step to price a replay's steps with: the trace's `path`
    and why the fit refused (TimingRefused's `what` and `counts`); tracer.render.clock words it."""

    def __init__(self, path: str, what: str, counts: dict[str, int]) -> None:
        self.path, self.what, self.counts = path, what, counts
        super().__init__(path, what, counts)


def clock_for(trace: Trace) -> StepClock:
    """The fitted model when the trace supports one, else its measured median step."""
    try:
        f = timing.fit(trace, step_pass(trace).features)
    except timing.TimingRefused as exc:
        durations = timing.step_durations(trace)
        usable = durations.ms[durations.status == timing.USABLE]
        if not len(usable):
            raise NoClock(trace.path, exc.what, exc.counts) from None
        median = float(np.median(usable))
        refused = {"what": exc.what, "counts": exc.counts}
        return StepClock(timing.TimingModel({"step": median}), "median", len(usable), refused=refused)
    y, pred = f.durations.ms, f.predicted
    measured, predicted = float(y[f.test].sum()), float(pred[f.test].sum())
    warmup = None
    if len(trace) and int(trace.columns["step"][0]) == 1 and 0 in f.stalls:
        warmup = float(y[0] - pred[0])
    return StepClock(
        f.model,
        "fitted",
        len(f.train) + len(f.test),
        heldout_median_pct=float(np.median(f.heldout_ape)),
        heldout_p90_pct=float(np.percentile(f.heldout_ape, 90)),
        heldout_total_pct=100.0 * (predicted - measured) / measured,
        warmup_ms=warmup,
    )


# -- throughput and latency of a trace -------------------------------------------------


@dataclass
class Performance:
    """tracer.analysis.throughput's measures of one trace; `basis` says where its times come from."""

    basis: str  # "measured", "predicted" (a timed replay) or "priced" (an untimed replay, priced here)
    prompt_tok_s: float | None
    output_tok_s: float | None
    ttft_ms: dict[str, float] | None  # p50, p90, p99
    tpot_ms: dict[str, float] | None
    drain_s: float  # first schedule() to the end of the last step that scheduled tokens
    steps: int  # steps to drain
    prefill_s: float  # summed durations of the steps that ran prefill tokens
    median_prefill_ms: float | None  # median duration of those steps
    error_pct: float | None = None  # the clock's summed error, where the times are predictions
    ttft_from: str = "seen"  # where TTFT starts (tracer.analysis.throughput.BASES)
    ttft_parts_ms: dict[str, float] | None = None  # mean frontend/waiting/prefill/first_step (from arrival)

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def retimed(trace: Trace, model: timing.TimingModel) -> Trace:
    """The trace with each step's `t` rebuilt from the model's predicted durations."""
    features = step_pass(trace).features
    ms = np.asarray(model.predict(features.columns), dtype=float) * np.ones(len(trace))
    t0 = float(trace.columns["t"][0]) if len(trace) else 0.0
    t = t0 + np.concatenate([[0.0], np.cumsum(ms[:-1])]) / 1e3
    out = dataclasses.replace(trace, columns={**trace.columns, "t": t})
    step_features.share(trace, out)  # the same records: one pass
    return out


def is_timed(trace: Trace) -> bool:
    return bool((trace.header.get("replay") or {}).get("timed"))


def is_replay(trace: Trace) -> bool:
    return "replay" in trace.header


def ttft_from(trace: Trace) -> str:
    """The best start of TTFT this trace has (tracer.analysis.throughput.RequestTimes.basis)."""
    return step_pass(trace).requests.basis(trace)


def common_ttft_from(*traces: Trace) -> str:
    """The best TTFT start every one of `traces` has: figures compared side by side must
    start at the same point."""
    return max((ttft_from(t) for t in traces), key=BASES.index, default="seen")


def performance(trace: Trace, clock: StepClock | None = None, ttft_start: str | None = None) -> Performance:
    """Measured for a recording, predicted for a timed replay; an untimed replay is priced with
    `clock` (its own timestamps are the offline scheduler's CPU time). TTFT starts at
    `ttft_start` (default: the best this trace has)."""
    basis, error = "measured", None
    if is_timed(trace):
        basis = "predicted"
        doc = trace.header["replay"].get("clock")
        if doc:
            error = StepClock.from_dict(doc).sum_error_pct
    elif is_replay(trace):
        if clock is None:
            basis = "unpriced"
        else:
            trace, basis, error = retimed(trace, clock.model), "priced", clock.sum_error_pct
    done = step_pass(trace)
    features = done.features
    durations = timing.step_durations(trace)
    tp = measure_throughput(trace, durations, features)
    lat = done.requests.latency(trace, durations, ttft_start)
    col = trace.columns
    busy = np.flatnonzero(col["target_used"] > 0)
    drain, steps = 0.0, 0
    if len(busy):
        last = int(busy[-1])
        steps = int(col["step"][last])
        # The end of the last busy step: the next schedule(), else its own typical length.
        end = float(col["t"][last + 1]) if last + 1 < len(trace) else float(col["t"][last])
        if last + 1 >= len(trace):
            ok = durations.ms[busy_mask(durations)]
            end += float(np.median(ok)) / 1e3 if len(ok) else 0.0
        drain = end - float(col["t"][0])
    pre = busy_mask(durations) & (features.columns["prefill_tokens"] > 0)
    return Performance(
        basis=basis,
        prompt_tok_s=tp.prompt_tok_s,
        output_tok_s=tp.output_tok_s,
        ttft_ms=lat.percentiles(lat.ttft_ms),
        tpot_ms=lat.percentiles(lat.tpot_ms),
        drain_s=drain,
        steps=steps,
        prefill_s=tp.prefill_s,
        median_prefill_ms=float(np.median(durations.ms[pre])) if pre.any() else None,
        error_pct=error,
        ttft_from=lat.basis,
        ttft_parts_ms=lat.mean_parts(),
    )
