"""Step-time model: each step's wall duration fitted from the trace's own timestamps.

A step's duration is the time between two schedule() calls: t[i+1] - t[i] (under
async scheduling, t[i+2] - t[i+1], see `duration_lag`). It is fitted as a linear
function of what the step did, one coefficient in ms per unit of each feature:

    duration = a·1 + b·prefill_tokens + c·decode_tokens + d·requests
               + e·finished_requests + f·context_tokens + g·query_rows

Features a trace cannot price (constant, varying on too few steps, collinear,
fitted negative, or more than the fitted steps support) are dropped, and the fit
says which and why.

The model predicts a step's *mean* duration, so that summed over steps (what a
replay does) it comes out right. Each step is weighted by 1/predicted², so it
counts by its relative error: a 500 ms prefill step and a 5 ms decode step count
alike (a gamma GLM with identity link, fitted by iteratively reweighted least
squares). Stalls are found with the first iteration, weighted by 1/measured²,
which a stall cannot drag. docs/what-if.md explains the choices.

Replay (or anything that produces step records) predicts a step with

    builder = FeatureBuilder()
    ms = model.predict(builder.add(step_record))   # one record at a time, in order

`tracer.render.timing_report` holds the sentences the CLI prints, the refusal's included:
TimingRefused carries only its facts.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from tracer.trace.trace_type import Trace

# Candidate features in priority order: when the steps support fewer coefficients,
# the last ones go first.
FEATURES: tuple[str, ...] = (
    "step",
    "prefill_tokens",
    "decode_tokens",
    "requests",
    "finished_requests",
    "context_tokens",
    "query_rows",
)
UNITS: dict[str, str] = {
    "step": "per step",
    "prefill_tokens": "per prefill token",
    "decode_tokens": "per decode token (drafts verified included)",
    "requests": "per scheduled request",
    "finished_requests": "per request reported finished in the step",
    "context_tokens": "per KV-context token (tokens already computed, of the scheduled requests)",
    "query_rows": "per drafter query row",
}
# A step record key the recorder may write: the sum of num_computed_tokens of the
# scheduled requests before schedule(). Used as is when present, estimated otherwise.
CONTEXT_KEY = "context_tokens"

MIN_FIT_STEPS = 20  # usable steps below this: refuse (every 5th held out leaves >= 4 to test on)
HOLDOUT_EVERY = 5  # every 5th usable step, in step order, is held out
STEPS_PER_COEF = 5  # at most one coefficient per 5 fitted steps
MIN_SUPPORT = 5  # a feature must differ from its most common value on this many fitted steps
STALL_FACTOR = 3.0  # a step over 3x its predicted time is a stall (warm-up, GC, host contention)
GROSS_FACTOR = 10.0  # left out before the mean model that decides the stalls is fitted
COLLINEAR_R2 = 0.99  # a feature this well explained by the kept ones adds nothing the fit can trust

# Why a step has no duration to fit, or was left out.
USABLE, LAST, EMPTY, IDLE, GAP, BAD = "usable", "last", "empty", "idle", "gap", "bad"


class TimingRefused(ValueError):
    """The trace cannot support a step-time model. `what` is "too short" or "too idle";
    `counts` the steps behind it (usable, idle, gap, empty, stall, last, recorded).
    tracer.render.timing_report.refusal_sentence words it (analysis holds no sentence)."""

    def __init__(self, what: str, counts: dict[str, int]) -> None:
        self.what = what
        self.counts = counts
        super().__init__(what, counts)

    def __reduce__(self) -> tuple[Any, ...]:  # across a process pool (a sweep's workers)
        return (type(self), (self.what, self.counts))


@dataclass(frozen=True)
class Drop:
    """A candidate feature the fit left out: why ("constant", "rare", "collinear", "too few",
    "negative"), with the number behind it (the constant value, the steps that vary it, R²,
    the fitted steps, the coefficient)."""

    feature: str
    why: str
    value: float
    other: str | None = None  # collinear: the kept feature it tracks; rare: its usual value


# -- durations ---------------------------------------------------------------------------


@dataclass
class Durations:
    """Per step row: its measured duration in ms (nan: none) and why it is (not) usable."""

    ms: np.ndarray
    status: np.ndarray  # USABLE, LAST, EMPTY, IDLE, GAP or BAD (stalls are decided by the fit)
    lag: int  # 0: sync scheduling; 1: async (a step's forward runs while the next is scheduled)
    end: np.ndarray  # per step: when its output was back (s, the trace's clock; nan: unknown)

    def count(self, status: str) -> int:
        return int((self.status == status).sum())


def duration_lag(trace: Trace) -> int:
    """Under async scheduling EngineCore schedules step i+1 before step i's output is
    back (a batch queue of two), so the interval t[i+2] - t[i+1] is the one step i's
    forward pass fills, not t[i+1] - t[i]. vLLM 0.33 turns async scheduling on in its
    config by default, so the recorded order of outputs decides where the trace has it."""
    # Format 1.1 says it directly: which step's output each schedule() call had seen.
    lags = []
    for i in range(min(len(trace), 64)):
        rec = trace.step(i)
        for event in rec.get("inputs") or ():
            if event and event[0] == "u" and isinstance(event[1], int) and event[1] > 0:
                lags.append(rec["step"] - event[1] - 1)
    if lags:
        return 1 if sorted(lags)[len(lags) // 2] >= 1 else 0
    return 1 if trace.config.get("async_scheduling") else 0


def idle_intervals(trace: Trace) -> np.ndarray:
    """Per interval j (schedule() j to j+1; n-1 of them): the engine waited for requests in it,
    because no unfinished request was left after step j and step j+1 scheduled something."""
    col = trace.columns
    if len(trace) < 2:
        return np.zeros(0, dtype=bool)
    remaining = col["num_running"][:-1] + col["num_waiting"][:-1] - col["n_finished"][1:]
    return (remaining <= 0) & (col["target_used"][1:] > 0)


def step_durations(trace: Trace) -> Durations:
    """Each step's wall duration from its schedule() timestamps, with idle gaps marked.

    Interval j runs from schedule() j to schedule() j+1. It is idle (the engine
    waited for requests) when no unfinished request was left after step j
    (running + waiting after schedule(), minus those the next step reports
    finished) and the next step scheduled something: the next step's work then
    arrived during the interval. When the next step is the empty one vLLM runs
    at once to report the last finish, the wait comes after that one instead.
    """
    col = trace.columns
    n = len(trace)
    t = col["t"]
    lag = duration_lag(trace)
    # Statuses as codes into one object array of the labels: a cell refers to its label's
    # str (np.full or np.where would make a str per cell).
    labels = np.array([LAST, GAP, IDLE, USABLE, BAD, EMPTY], dtype=object)
    interval = np.full(n, np.nan)
    kind = np.zeros(n, np.int8)  # LAST
    if n > 1:
        dt = np.diff(t) * 1e3
        idle = idle_intervals(trace)
        contiguous = np.diff(col["step"]) == 1  # `attach --save` gaps: steps missing in between
        interval[:-1] = dt
        kind[:-1] = np.where(~contiguous, 1, np.where(idle, 2, np.where(dt > 0, 3, 4)))
    ms = np.full(n, np.nan)
    status = np.zeros(n, np.int8)
    end = np.full(n, np.nan)
    if n > lag:
        ms[: n - lag] = interval[lag:]
        status[: n - lag] = kind[lag:]
        end[: n - lag - 1] = t[lag + 1 :]
    empty = col["target_used"] == 0
    status[empty & (status == 3)] = 5  # USABLE, but nothing scheduled: EMPTY
    return Durations(ms=ms, status=labels[status], lag=lag, end=end)


# -- features ----------------------------------------------------------------------------


class FeatureBuilder:
    """Step features from step records, fed in order (it tracks per-request state).

    - prefill_tokens: tokens of requests still computing their prompt (new, resumed,
      or running without a sampled token since their last admission); decode_tokens:
      the rest (1 + drafts per request).
    - context_tokens: the record's `context_tokens` when the recorder wrote one, else
      rebuilt: a request's computed tokens grow by its scheduled tokens minus the
      drafts rejected (spec + 1 - sampled) and restart at 0 on admission and
      preemption. Prefix-cache hits are invisible to it (an underestimate then).
    """

    def __init__(self) -> None:
        self._computed: dict[str, int] = {}
        self._sampled: set[str] = set()  # sampled since its last (re)admission
        self.context_recorded = True  # until a record lacks CONTEXT_KEY

    def add(self, rec: Mapping[str, Any]) -> dict[str, float]:
        new = rec.get("new") or []
        resumed = rec.get("resumed") or []
        running = rec.get("running") or []
        sampled = rec.get("sampled")
        computed = self._computed
        for rid, *_ in (*new, *resumed):
            computed[rid] = 0
            self._sampled.discard(rid)
        prefill = decode = context = 0
        groups = ((False, entry) for entry in (*new, *resumed))
        for was_running, entry in (*groups, *((True, entry) for entry in running)):
            rid, tokens = entry[0], int(entry[1])
            spec = int(entry[2]) if len(entry) > 2 else 0
            context += computed.get(rid, 0)
            if sampled is None:  # outcomes unknown: a decode step schedules 1 + drafts
                is_decode = was_running and tokens <= 1 + spec
            else:
                is_decode = was_running and rid in self._sampled
            if is_decode:
                decode += tokens
            else:
                prefill += tokens
            n = sampled.get(rid, 0) if isinstance(sampled, dict) else spec + 1
            rejected = spec + 1 - n if n > 0 else 0
            computed[rid] = computed.get(rid, 0) + tokens - max(0, rejected)
            if n > 0:
                self._sampled.add(rid)
        for rid in rec.get("preempted") or ():
            computed[rid] = 0
            self._sampled.discard(rid)
        for rid in rec.get("finished") or ():
            computed.pop(rid, None)
            self._sampled.discard(rid)
        if CONTEXT_KEY in rec and rec[CONTEXT_KEY] is not None:
            context = int(rec[CONTEXT_KEY])
        else:
            self.context_recorded = False
        query = rec.get("query") or {}
        return {
            "step": 1.0,
            "prefill_tokens": float(prefill),
            "decode_tokens": float(decode),
            "requests": float(len(new) + len(resumed) + len(running)),
            "finished_requests": float(len(rec.get("finished") or ())),
            "context_tokens": float(context),
            "query_rows": float(query.get("rows") or 0),
        }


@dataclass
class StepFeatures:
    columns: dict[str, np.ndarray]  # feature -> value per step row
    context_recorded: bool  # False: context_tokens is the FeatureBuilder's estimate

    def matrix(self, names: Iterable[str], rows: np.ndarray | slice = slice(None)) -> np.ndarray:
        return np.column_stack([self.columns[name][rows] for name in names])


def records_of(trace: Trace) -> Iterator[dict[str, Any]]:
    """A trace's step records one at a time (Trace.steps() holds them all: GBs at 1M steps),
    read from the store in blocks rather than one read per step."""
    return trace.iter_steps()


def step_features(
    records: Iterable[Mapping[str, Any]],
    n: int | None = None,
    also: Callable[[int, Mapping[str, Any]], None] | None = None,
) -> StepFeatures:
    """Features of every record, in one pass; `n`: how many (preallocates); `also(i,
    record)`: another consumer of the same pass (e.g. the latency tracker)."""
    if n is None:
        records = list(records)
        n = len(records)
    table = np.zeros((n, len(FEATURES)))
    builder = FeatureBuilder()
    count = 0
    for i, rec in enumerate(records):
        x = builder.add(rec)
        table[i] = [x[name] for name in FEATURES]
        if also is not None:
            also(i, rec)
        count += 1
    columns = {name: table[:count, j].copy() for j, name in enumerate(FEATURES)}
    return StepFeatures(columns, context_recorded=builder.context_recorded and count > 0)


# -- the model ---------------------------------------------------------------------------


@dataclass(frozen=True)
class TimingModel:
    """duration_ms = sum(coef[f] * features[f]); a feature not given counts as 0, except
    `step`, which is 1 (one step)."""

    coef: dict[str, float]

    def predict(self, features: Mapping[str, Any]) -> Any:
        """ms for one step (a dict of floats, as FeatureBuilder.add returns) or for
        many (a dict of arrays, as StepFeatures.columns)."""
        total: Any = 0.0
        for name, c in self.coef.items():
            total = total + c * np.asarray(features.get(name, 1.0 if name == "step" else 0.0), dtype=float)
        return float(total) if np.ndim(total) == 0 else total

    def to_dict(self) -> dict[str, Any]:
        return {"coefficients_ms": dict(self.coef)}

    @classmethod
    def from_dict(cls, doc: Mapping[str, Any]) -> TimingModel:
        return cls({str(k): float(v) for k, v in doc["coefficients_ms"].items()})


@dataclass
class Fit:
    model: TimingModel
    stderr: dict[str, float]  # standard error of each coefficient, ms per unit
    dropped: list[Drop]
    train: np.ndarray  # step rows fitted on
    test: np.ndarray  # step rows held out
    stalls: np.ndarray  # step rows left out: over STALL_FACTOR x their prediction
    durations: Durations
    features: StepFeatures
    heldout_ape: np.ndarray  # absolute % error per held-out step
    train_ape: np.ndarray

    @property
    def predicted(self) -> np.ndarray:
        return self.model.predict(self.features.columns)


def _ape(measured: np.ndarray, predicted: np.ndarray) -> np.ndarray:
    return 100.0 * np.abs(predicted - measured) / measured


def _irls(x: np.ndarray, y: np.ndarray, rounds: int = 50) -> tuple[np.ndarray, np.ndarray]:
    """Coefficients minimising sum(((y - x·b) / mu)^2), mu the previous round's
    prediction (the first round: y itself, plain relative least squares), and their
    standard errors (the weighted residual variance times (XᵀWX)⁻¹)."""
    floor = 0.05 * float(np.median(y))  # a prediction near 0 must not take all the weight
    mu = y
    coef = np.zeros(x.shape[1])
    for _ in range(rounds):
        new = np.linalg.lstsq(x / mu[:, None], y / mu, rcond=None)[0]
        done = np.allclose(new, coef, rtol=1e-9, atol=1e-12)
        coef = new
        if done:
            break
        mu = np.maximum(x @ coef, floor)
    xw, rw = x / mu[:, None], (y - x @ coef) / mu
    dof = max(1, len(y) - x.shape[1])
    cov = float(rw @ rw) / dof * np.linalg.pinv(xw.T @ xw)
    return coef, np.sqrt(np.clip(np.diag(cov), 0, None))


def _select(
    x: np.ndarray, names: list[str], y: np.ndarray, rounds: int = 50
) -> tuple[list[str], np.ndarray, np.ndarray, list[Drop]]:
    """Features the rows support, their coefficients and standard errors (_irls), and the
    features dropped, with why."""
    dropped: list[Drop] = []
    keep = [0]  # the per-step term always stays
    for j in range(1, len(names)):
        col = x[:, j]
        if np.ptp(col) == 0:
            dropped.append(Drop(names[j], "constant", float(col[0])))
            continue
        values, counts = np.unique(col, return_counts=True)
        support = len(col) - int(counts.max())
        if support < MIN_SUPPORT:  # its coefficient would be those few steps' noise
            dropped.append(Drop(names[j], "rare", float(support), f"{values[np.argmax(counts)]:g}"))
            continue
        basis = x[:, keep]
        resid = col - basis @ np.linalg.lstsq(basis, col, rcond=None)[0]
        r2 = 1.0 - float(resid @ resid) / float(((col - col.mean()) ** 2).sum())
        if r2 > COLLINEAR_R2:
            # Name the kept feature it tracks most closely.
            corr = [abs(np.corrcoef(col, x[:, k])[0, 1]) if k else 0.0 for k in keep]
            other = names[keep[int(np.argmax(corr))]] if max(corr) > 0 else "step"
            dropped.append(Drop(names[j], "collinear", r2, other))
            continue
        keep.append(j)
    limit = max(1, len(y) // STEPS_PER_COEF)
    while len(keep) > limit:
        j = keep.pop()
        dropped.append(Drop(names[j], "too few", float(len(y))))
    while True:
        coef, stderr = _irls(x[:, keep], y, rounds)
        negative = [(coef[i] * x[:, j].mean(), i) for i, j in enumerate(keep) if j and coef[i] < 0]
        if not negative:
            return [names[j] for j in keep], coef, stderr, dropped
        _, i = min(negative)
        j = keep.pop(i)
        dropped.append(Drop(names[j], "negative", float(coef[i])))


def fit(trace: Trace, features: StepFeatures | None = None) -> Fit:
    """Fit the step-time model on a trace; raises TimingRefused when it cannot.

    Usable steps (a duration, something scheduled, not idle) are split in step
    order: every HOLDOUT_EVERY-th is held out, the rest fitted. Stalls are left out
    of fit and error alike (and listed): steps over STALL_FACTOR x the mean model
    fitted without the gross outliers, those over GROSS_FACTOR x the typical step.
    The typical step is the first, plain relative-least-squares round (refitted
    without them until none is new): there an outlier's residual is at most 1,
    while the reweighted rounds can explain away a step they overpredict (its
    weight 1/predicted² goes to 0) and fit a 1.3 s warm-up instead.
    """
    durations = step_durations(trace)
    features = features or step_features(records_of(trace), len(trace))
    usable = np.flatnonzero(durations.status == USABLE)
    if len(usable) < MIN_FIT_STEPS:
        raise _refusal(trace, durations, len(usable))
    y_all = durations.ms
    names = list(FEATURES)

    def split(stalls: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        rows = np.setdiff1d(usable, stalls)
        if len(rows) < MIN_FIT_STEPS:
            raise _refusal(trace, durations, len(rows), stalls=len(stalls))
        held = np.zeros(len(rows), dtype=bool)
        held[HOLDOUT_EVERY - 1 :: HOLDOUT_EVERY] = True
        return rows[~held], rows[held]

    def over(factor: float, rounds: int, train: np.ndarray) -> np.ndarray:
        """Usable rows over `factor` x the prediction of a model fitted on `train`."""
        kept, coef, _, _ = _select(features.matrix(names, train), names, y_all[train], rounds)
        pred = TimingModel(dict(zip(kept, map(float, coef), strict=True))).predict(
            {k: v[usable] for k, v in features.columns.items()}
        )
        return usable[y_all[usable] > factor * np.maximum(pred, 1e-9)]

    # Gross outliers (over 10x the typical step: the first round), refitted until stable.
    gross = np.zeros(0, dtype=np.int64)
    for _ in range(10):
        grown = np.union1d(gross, over(GROSS_FACTOR, 1, split(gross)[0]))
        if len(grown) == len(gross):
            break
        gross = grown
    # Stalls: over 3x the mean model fitted without the gross outliers. Not 3x the typical
    # step: where step times are bimodal the slow mode can be that, and it is real time.
    stalls = over(STALL_FACTOR, 50, split(gross)[0])
    train, test = split(stalls)
    kept, coef, stderr, dropped = _select(features.matrix(names, train), names, y_all[train])
    model = TimingModel({name: float(c) for name, c in zip(kept, coef, strict=True)})
    pred = model.predict(features.columns)
    return Fit(
        model=model,
        stderr={name: float(e) for name, e in zip(kept, stderr, strict=True)},
        dropped=dropped,
        train=train,
        test=test,
        stalls=stalls,
        durations=durations,
        features=features,
        heldout_ape=_ape(y_all[test], pred[test]),
        train_ape=_ape(y_all[train], pred[train]),
    )


def _refusal(trace: Trace, durations: Durations, usable: int, *, stalls: int = 0) -> TimingRefused:
    """Too short, or too idle (the waits and stalls at least match the usable steps)."""
    counts = {
        "recorded": len(trace),
        "usable": usable,
        "idle": durations.count(IDLE),
        "gap": durations.count(GAP),
        "empty": durations.count(EMPTY),
        "stall": stalls,
        "last": durations.count(LAST),
    }
    idle = counts["idle"] + counts["gap"] + stalls
    return TimingRefused("too idle" if idle and idle >= usable else "too short", counts)
