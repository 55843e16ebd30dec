"""`schedscope sweep`: one recorded workload replayed over a grid of settings, ranked.

Each setting (policy × max_num_batched_tokens × num_speculative_tokens ×
max_num_seqs × method) is a timed replay (tracer.whatif.replay with the source's
StepClock, tracer.analysis.clock), deterministic, so settings can run in separate
processes in any order. Each is measured with tracer.analysis.clock.performance (its
times are predictions) and ranked by one objective, with the clock's summed
error beside each figure. Every sentence of the report is here; the figure
is web/sweep_figure.py (tracer never imports plotly).
"""

from __future__ import annotations

import copy
import itertools
import os
import tempfile
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import asdict, dataclass
from multiprocessing import get_context
from pathlib import Path
from typing import Any

from tracer.analysis import timing
from tracer.analysis.clock import StepClock, clock_for, performance
from tracer.analysis.step_features import step_pass
from tracer.opening.door import Spec, open_input
from tracer.trace.trace_type import Trace
from tracer.whatif.replay_clock import attach_frontend_delays, attach_idle_waits

# objective -> (result key, label, unit, True when higher is better)
OBJECTIVES: dict[str, tuple[str, str, str, bool]] = {
    "output_tps": ("output_tok_s", "output tok/s", "tok/s", True),
    "ttft_p99": ("ttft_p99_ms", "TTFT p99", "ms", False),
    "drain": ("drain_ms", "time to drain", "ms", False),
}
POLICIES = ("stock", "additive", "cap", "separate", "draft-budget")


@dataclass(frozen=True)
class Setting:
    policy: str
    max_num_batched_tokens: int | None = None  # None: the recorded value
    num_speculative_tokens: int | None = None
    max_num_seqs: int | None = None
    method: str | None = None

    def overrides(self) -> dict[str, Any]:
        return {k: v for k, v in asdict(self).items() if k != "policy" and v is not None}

    def label(self) -> str:
        names = {"max_num_batched_tokens": "B", "num_speculative_tokens": "K", "max_num_seqs": "seqs"}
        parts = [self.policy] + [f"{names.get(k, k)}={v}" for k, v in self.overrides().items()]
        return " ".join(parts)


def grid(
    policies: Sequence[str],
    budgets: Sequence[int | None] = (None,),
    ks: Sequence[int | None] = (None,),
    seqs: Sequence[int | None] = (None,),
    methods: Sequence[str | None] = (None,),
) -> list[Setting]:
    return [Setting(*combo) for combo in itertools.product(policies, budgets, ks, seqs, methods)]


# -- one setting (in a worker process) -------------------------------------------------

_WORKLOADS: dict[str, Any] = {}  # source path -> Workload, once per process


def _workload(source: str) -> Any:
    from tracer.whatif.workload import workload_from_trace

    if source not in _WORKLOADS:
        trace = open_input(Spec(traces=(source,))).session.trace
        _WORKLOADS[source] = (workload_from_trace(trace), trace)
    return _WORKLOADS[source]


def run_setting(
    source: str, setting: Setting, clock_doc: dict[str, Any], arrivals: str, workdir: str
) -> dict:
    """Replay one setting, timed; its figures as a dict (JSON-able, picklable)."""
    from tracer.analysis.flags import detect
    from tracer.whatif.replay import replay

    workload, recorded = _workload(source)
    clock = StepClock.from_dict(clock_doc)
    workload = copy.copy(workload)  # the waits are used up by each replay
    workload.idle_waits = {}
    attach_idle_waits(workload, recorded, clock)
    attach_frontend_delays(workload, recorded)
    out = Path(workdir) / f"{os.getpid()}-{abs(hash(setting)):x}.jsonl"
    header = {"replay": {"source": source, "policy": setting.policy, "sweep": setting.label()}}
    replay(
        workload, setting.policy, out, header=header, clock=clock, arrivals=arrivals, **setting.overrides()
    )
    trace = open_input(Spec(traces=(out,))).session.trace
    perf = performance(trace)
    beyond = extrapolation(recorded, trace, clock)
    flags = detect(trace)
    target = int(trace.columns["target_used"].sum())
    out.unlink()
    return {
        "setting": asdict(setting),
        "label": setting.label(),
        "steps": perf.steps,
        "target_tokens": target,
        "target_tokens_per_step": target / perf.steps if perf.steps else 0.0,
        "tokens_withheld": flags.tokens_withheld,
        "prompt_tok_s": perf.prompt_tok_s,
        "output_tok_s": perf.output_tok_s,
        "ttft_from": perf.ttft_from,
        "ttft_basis": "predicted",  # every figure of a sweep is the clock's
        "ttft_p50_ms": None if perf.ttft_ms is None else perf.ttft_ms["p50"],
        "ttft_p99_ms": None if perf.ttft_ms is None else perf.ttft_ms["p99"],
        "tpot_p50_ms": None if perf.tpot_ms is None else perf.tpot_ms["p50"],
        "tpot_p99_ms": None if perf.tpot_ms is None else perf.tpot_ms["p99"],
        "drain_ms": perf.drain_s * 1e3,
        "beyond_source": beyond,
    }


# A replay's step beyond this multiple of the source's largest is outside what the clock saw.
BEYOND = 1.5


def extrapolation(source: Trace, replayed: Trace, clock: StepClock) -> list[dict[str, Any]]:
    """The step features the replay takes beyond the source's range (its largest step times
    BEYOND): the clock extrapolates there, and prices nothing for a feature it dropped (a
    recording at max_num_seqs 4 runs 4 requests in almost every step, so it cannot price a
    request, and a replay at 16 is priced as if a request cost nothing)."""
    src = step_pass(source).features.columns
    rep = step_pass(replayed).features.columns
    out = []
    for name in timing.FEATURES:
        if name == "step" or not len(rep[name]):
            continue
        hi_src, hi_rep = float(src[name].max(initial=0)), float(rep[name].max())
        if hi_rep > max(hi_src * BEYOND, hi_src + 1):
            out.append(
                {
                    "feature": name,
                    "replay_max": hi_rep,
                    "source_max": hi_src,
                    "priced": name in clock.model.coef,
                }
            )
    return out


# -- the sweep ---------------------------------------------------------------------------

Progress = Callable[[int, int, str], None]


def sweep(
    source: str | Path,
    settings: Iterable[Setting],
    *,
    objective: str = "output_tps",
    arrivals: str = "step",
    workers: int = 1,
    progress: Progress | None = None,
    trace: Trace | None = None,
) -> dict[str, Any]:
    """Replay every setting (in `workers` processes when > 1) and rank them by `objective`."""
    if objective not in OBJECTIVES:
        raise ValueError(f"objective must be one of {', '.join(OBJECTIVES)}")
    source = str(source)
    settings = list(dict.fromkeys(settings))
    recorded = trace if trace is not None else open_input(Spec(traces=(source,))).session.trace
    if arrivals == "time":  # refuse here, once, rather than in every worker
        from tracer.whatif.workload import workload_from_trace

        workload_from_trace(recorded).check_arrival_times()
    clock = clock_for(recorded)
    doc = clock.to_dict()
    results: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="schedscope-sweep-") as workdir:
        if workers <= 1:
            for i, s in enumerate(settings):
                results.append(run_setting(source, s, doc, arrivals, workdir))
                if progress:
                    progress(i + 1, len(settings), s.label())
        else:
            # spawn: a fresh interpreter per worker, whatever the parent has imported (vLLM, threads).
            with ProcessPoolExecutor(max_workers=workers, mp_context=get_context("spawn")) as pool:
                futures = {pool.submit(run_setting, source, s, doc, arrivals, workdir): s for s in settings}
                for i, fut in enumerate(as_completed(futures)):
                    results.append(fut.result())
                    if progress:
                        progress(i + 1, len(settings), futures[fut].label())
    key, _, _, higher = OBJECTIVES[objective]
    order = {s.label(): i for i, s in enumerate(settings)}

    def rank_key(r: dict[str, Any]) -> tuple[Any, ...]:
        value = r[key]
        missing = value is None
        v = 0.0 if missing else (-value if higher else value)
        return (missing, v, r["steps"], order[r["label"]])

    results.sort(key=rank_key)
    best = results[0][key] if results else None
    err = clock.sum_error_pct
    for i, r in enumerate(results):
        # Ties (same figure, same steps) share a rank: the order among them means nothing.
        same = i and rank_key(results[i - 1])[:3] == rank_key(r)[:3]
        r["rank"] = results[i - 1]["rank"] if same else i + 1
        # Within the clock's error of the best: the model cannot tell them apart.
        r["within_error_of_best"] = (
            best is not None
            and r[key] is not None
            and err is not None
            and abs(r[key] - best) <= err / 100 * abs(best)
        )
    return {
        "trace": source,
        "objective": objective,
        "arrivals": arrivals,
        "clock": doc,
        "error_pct": err,
        "results": results,
    }


def default_workers(settings: int) -> int:
    """One: on the 2-core host of docs/performance.md two workers took 86 s where one took
    56 s (each worker imports vLLM, ~15-30 s, and the cores are shared). More cores: --workers."""
    return 1


class SweepFileError(ValueError):
    """A saved sweep that cannot be read; names the file."""


def load_sweep(path: str) -> dict[str, Any]:
    """A `schedscope sweep --json` document, for the web app's Sweep page."""
    import orjson

    try:
        with open(path, "rb") as fh:
            doc = orjson.loads(fh.read())
    except OSError as exc:
        raise SweepFileError(f"{path}: cannot read ({exc.strerror or exc})") from None
    except orjson.JSONDecodeError as exc:
        raise SweepFileError(f"{path}: not a sweep's JSON ({exc})") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("results"), list):
        raise SweepFileError(f"{path}: field 'results': not a `schedscope sweep --json` document")
    return doc
