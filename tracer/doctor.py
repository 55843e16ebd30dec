"""`schedscope doctor`: is a trace complete and exact? One verdict per check.

- vLLM version: the release that recorded the trace (its header), and whether this
  schedscope supports it (`schema.SUPPORTED_VLLM`);
- hooks: the scheduler class that recorded (and whether it matches async
  scheduling), the model runner (V1 or V2) and speculator hooks the runner's
  process reported in its `hooks` records, and that runner records exist;
- totals: the trace's requests, prompt and generation tokens, preemptions and
  draft tokens against the server's own Prometheus counters (/metrics);
- records: the footer's dropped records, errors and step count, step numbers
  without holes, no stream gaps, no torn line;
- identity replay: `tracer.whatif.fidelity.check_fidelity` re-makes the run under its recorded policy.

The trace totals below are the one implementation the live tests check too.
"""

from __future__ import annotations

import itertools
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from tracer.render.text import footer_mismatch
from tracer.trace.errors import TraceOrderError
from tracer.trace.schema import OFFLINE_MODEL_NAME, SUPPORTED_VLLM, WAITING_DEMAND_LIMIT
from tracer.trace.trace_type import Trace

PASS, FAIL, SKIP = "PASS", "FAIL", "SKIP"

# Prometheus sample names of the counters the totals are checked against.
METRIC_REQUESTS = "vllm:request_success_total"
METRIC_PROMPT = "vllm:prompt_tokens_total"
METRIC_GENERATION = "vllm:generation_tokens_total"
METRIC_PREEMPTIONS = "vllm:num_preemptions_total"
METRIC_DRAFTS = "vllm:spec_decode_num_draft_tokens_total"
# Methods whose drafter runs no forward pass over a token buffer: no `draft` records.
NO_DRAFT_PASS_METHODS = frozenset({"ngram", "ngram_gpu", "suffix"})
SYNC_CLS, ASYNC_CLS = "tracer.scheduler.TracingScheduler", "tracer.scheduler.TracingAsyncScheduler"
NOT_LOADED = (
    "the model-runner process did not load the hook (is schedscope pip-installed in the server's "
    "environment? the server log names a moved vLLM class in a 'schedscope:' warning)"
)


@dataclass
class RequestTotals:
    """One request as the trace saw it."""

    demand: int = -1  # tokens it needed when first admitted (its prompt); -1: not recorded
    tokens: int = 0  # target tokens scheduled, spec tokens included
    spec: int = 0  # draft tokens scheduled
    spec_counted: int = 0  # of those, in steps where it sampled (the ones vLLM counts)
    sampled: int = 0  # tokens sampled (accepted drafts + 1 per sampling step)
    sampling_steps: int = 0
    last: tuple[int, int] = (0, 0)  # (spec tokens, sampled) of its last scheduled step
    last_sampled: tuple[int, int] = (0, 0)  # sampled in its last two sampling steps (older, newer)
    finished: bool = False
    prompt: int = -1  # its prompt length from its arrival record (format 1.1); -1: none


@dataclass
class TraceTotals:
    """Totals comparable with vLLM's counters, summed over one or more traces.

    Where the trace cannot see what vLLM discards, a total is a range [min, max]:
    vLLM trims tokens sampled past a stop (drafts accepted beyond max_tokens or an
    EOS), and under async scheduling it drops the output of a step that was
    scheduled before a request's finish was known (one step per request).
    """

    admitted: int = 0
    finished: int = 0
    prompt_tokens: int = 0
    prompt_unknown: int = 0  # admitted requests whose prompt length was not recorded
    generation_min: int = 0
    generation_max: int = 0
    preemptions: int = 0
    spec_min: int = 0
    spec_max: int = 0
    requests: dict[str, RequestTotals] = field(default_factory=dict)


def per_request(trace: Trace) -> dict[str, RequestTotals]:
    """Per request id: demand at admission, tokens, spec tokens and sampled tokens."""
    reqs: dict[str, RequestTotals] = {}
    for rec in trace.steps():
        sampled = rec["sampled"]
        for event in rec.get("inputs") or ():
            if event[0] == "a":  # every arrival, not only the head of the waiting queue
                reqs.setdefault(event[1], RequestTotals()).prompt = int(event[2])
        for rid, _, _, demand in rec["new"]:
            reqs.setdefault(rid, RequestTotals()).demand = demand
        for rid, tokens, spec, _ in rec["new"] + rec["resumed"] + rec["running"]:
            r = reqs.setdefault(rid, RequestTotals())
            n = sampled.get(rid, 0) if isinstance(sampled, dict) else None
            r.tokens += tokens
            r.spec += spec
            # vLLM counts a step's drafts only if the request sampled in it.
            r.spec_counted += spec if n is None or n > 0 else 0
            r.last = (spec, n or 0)
        for rid, n in (sampled or {}).items():
            r = reqs.setdefault(rid, RequestTotals())
            r.sampled += n
            if n > 0:
                r.sampling_steps += 1
                r.last_sampled = (r.last_sampled[1], n)
        for rid in rec["finished"]:
            reqs.setdefault(rid, RequestTotals()).finished = True
    return reqs


def trace_totals(traces: Sequence[Trace]) -> TraceTotals:
    totals = TraceTotals()
    for trace in traces:
        reqs = per_request(trace)
        ahead = bool(trace.config.get("async_scheduling"))
        col = trace.columns
        for r in reqs.values():
            admitted = r.demand != -1 or r.tokens > 0
            totals.admitted += admitted
            totals.finished += r.finished
            if r.demand >= 0:
                totals.prompt_tokens += r.demand
            elif admitted and r.prompt >= 0:
                totals.prompt_tokens += r.prompt
            elif admitted:
                totals.prompt_unknown += 1
            older, newer = r.last_sampled
            totals.generation_max += r.sampled
            totals.spec_max += r.spec_counted
            if ahead:  # the last step's output may be dropped whole, the one before trimmed
                totals.generation_min += r.sampled - newer - max(0, older - 1)
                totals.spec_min += r.spec_counted - r.last[0]
            else:  # a request's last sampling step keeps at least one token
                totals.generation_min += r.sampled - max(0, newer - 1)
                totals.spec_min += r.spec_counted
        totals.preemptions += int(col["n_preempted"].sum())
        totals.requests.update(reqs)
    return totals


# -- /metrics ---------------------------------------------------------------------------
@dataclass
class Metrics:
    values: dict[str, float]  # sample name -> sum over its label sets
    engines: set[str]  # values of the `engine` label (one per EngineCore)
    source: str

    def get(self, name: str) -> float | None:
        return self.values.get(name)


def parse_metrics(text: str, source: str = "/metrics") -> Metrics:
    """Sum every sample of the Prometheus text exposition by sample name."""
    from prometheus_client.parser import text_string_to_metric_families

    values: dict[str, float] = {}
    engines: set[str] = set()
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            values[sample.name] = values.get(sample.name, 0.0) + float(sample.value)
            if sample.name.startswith("vllm:") and "engine" in sample.labels:
                engines.add(sample.labels["engine"])
    return Metrics(values, engines, source)


def metrics_url(url: str) -> str:
    """The server's /metrics URL from its base URL (or the /metrics URL itself)."""
    url = url.rstrip("/")
    return url if url.endswith("/metrics") else f"{url}/metrics"


def fetch_metrics(url: str, timeout: float = 10.0) -> str:
    with urllib.request.urlopen(metrics_url(url), timeout=timeout) as resp:
        return resp.read().decode()


# -- checks -----------------------------------------------------------------------------
@dataclass(frozen=True)
class Verdict:
    status: str  # PASS, FAIL or SKIP
    check: str
    sentence: str

    def line(self) -> str:
        return f"{self.status}  {self.check}: {self.sentence}"


def vllm_release(version: object) -> tuple[int, int] | None:
    """(major, minor) of a version string ("0.31.0", "0.32.0+cpu", "0.34.0rc1"); None if not one."""
    parts = str(version or "").split(".")
    if len(parts) < 2 or not parts[0].isdigit():
        return None
    minor = "".join(itertools.takewhile(str.isdigit, parts[1]))
    return (int(parts[0]), int(minor)) if minor else None


def version_verdict(trace: Trace) -> Verdict:
    """Which vLLM recorded the trace (its header), and whether this schedscope supports it."""
    version = trace.header.get("vllm_version")
    low, high = (".".join(map(str, v)) for v in (SUPPORTED_VLLM[0], SUPPORTED_VLLM[-1]))
    supported = f"this schedscope supports {low} to {high}"
    release = vllm_release(version)
    if release is None:
        return Verdict(SKIP, "vLLM version", f"the header names no vLLM release ({version!r}); {supported}")
    if release in SUPPORTED_VLLM:
        return Verdict(PASS, "vLLM version", f"recorded by vLLM {version}, supported ({supported})")
    return Verdict(
        FAIL,
        "vLLM version",
        f"recorded by vLLM {version}, not supported: {supported}; "
        "a field it moved may be missing from the records",
    )


def _scheduler_verdict(trace: Trace) -> Verdict:
    cls = trace.header.get("scheduler_cls") or "an unknown class"
    on = bool(trace.config.get("async_scheduling"))
    is_async = "Async" in cls.rsplit(".", 1)[-1]
    if on and not is_async:
        return Verdict(FAIL, "scheduler hook", f"async scheduling is on but {cls} recorded: use {ASYNC_CLS}")
    if is_async and not on:
        return Verdict(FAIL, "scheduler hook", f"{cls} recorded with async scheduling off: use {SYNC_CLS}")
    mode = "async" if on else "sync"
    return Verdict(PASS, "scheduler hook", f"{cls} recorded {len(trace)} steps ({mode} scheduling)")


def _runner_verdict(trace: Trace, hooks: dict[str, Any] | None) -> Verdict:
    busy = trace.columns["target_used"] > 0
    noted = trace.runner["target_rows"] >= 0
    if hooks is None:
        if trace.config.get("model") == OFFLINE_MODEL_NAME:
            return Verdict(
                SKIP,
                "runner hook",
                "recorded offline (a replay or the offline harness): no model runner ran",
            )
        if noted.any():
            return Verdict(PASS, "runner hook", "runner records present (no runner named: a pre-1.1 trace)")
        if not busy.any():
            return Verdict(SKIP, "runner hook", "no step scheduled tokens, so no forward pass to record")
        return Verdict(FAIL, "runner hook", f"no runner records: {NOT_LOADED}")
    name = f"{hooks.get('runner')} runner {hooks.get('runner_cls')}"
    missing = int((busy & ~noted).sum())
    if missing:
        return Verdict(
            FAIL, "runner hook", f"{name}: {missing} of {int(busy.sum())} busy steps lack a record"
        )
    pad = ", padded rows included" if "target" in (hooks.get("padded") or ()) else ""
    return Verdict(PASS, "runner hook", f"{name}: a target-pass record for every busy step{pad}")


def _speculator_verdict(trace: Trace, hooks: dict[str, Any] | None) -> Verdict:
    method = trace.config.get("spec_method")
    if not method:
        return Verdict(SKIP, "speculator hook", "no speculative decoding in this run")
    run = trace.runner
    drafted = run["draft_rows"] >= 0
    name = (hooks or {}).get("speculator") or method
    if method in NO_DRAFT_PASS_METHODS:
        if drafted.any():
            return Verdict(FAIL, "speculator hook", f"{method} runs no drafter pass, yet draft records exist")
        return Verdict(PASS, "speculator hook", f"{method} runs no drafter forward pass: none to record")
    if hooks is not None and not hooks.get("speculator_rows"):
        return Verdict(FAIL, "speculator hook", f"{name} ({method}) is not hooked: draft rows not recorded")
    if not drafted.any():
        if not (trace.columns["target_used"] > 0).any():
            return Verdict(SKIP, "speculator hook", "no step scheduled tokens, so no drafter pass to record")
        if trace.config.get("model") == OFFLINE_MODEL_NAME:
            return Verdict(SKIP, "speculator hook", "recorded offline: no drafter ran")
        return Verdict(FAIL, "speculator hook", f"{method}: not one draft-pass record in a run that drafted")
    detail = f"{name}: {int(drafted.sum())} draft-pass records"
    if hooks is not None:
        detail += f" (rows: {hooks['speculator_rows']})"
        if "draft" in (hooks.get("padded") or ()):
            detail += ", padded rows included"
    over = int((drafted & (run["draft_cap"] >= 0) & (run["draft_rows"] > run["draft_cap"])).sum())
    if over:
        detail += f"; {over} passes overflow the drafter buffer (schedscope flags)"
    return Verdict(PASS, "speculator hook", detail)


def hook_verdicts(trace: Trace) -> list[Verdict]:
    """The scheduler class, the runner and speculator the runner's process reported."""
    hooks = trace.hooks[-1] if trace.hooks else None
    out = [_scheduler_verdict(trace), _runner_verdict(trace, hooks), _speculator_verdict(trace, hooks)]
    inactive = sorted({reason for rec in trace.hooks for reason in rec.get("inactive") or ()})
    if inactive:
        out.append(Verdict(FAIL, "inactive hooks", "; ".join(inactive)))
    return out


def total_verdicts(traces: Sequence[Trace], metrics: Metrics | None) -> list[Verdict]:
    if metrics is None:
        return [Verdict(SKIP, "totals", "not compared with the server's counters (no --metrics-url/-file)")]
    out: list[Verdict] = []
    if len(metrics.engines) > len(traces):
        engines = ", ".join(sorted(metrics.engines))
        out.append(
            Verdict(
                FAIL,
                "engines",
                f"the server reports engines {engines}, {len(traces)} trace(s) given: "
                "pass every engine's trace (SCHEDSCOPE_TRACE with {pid})",
            )
        )
    t = trace_totals(traces)

    def ranged(check: str, name: str, lo: int, hi: int, what: str) -> None:
        theirs = metrics.get(name)
        if theirs is None:
            out.append(Verdict(SKIP, check, f"the server does not export {name}"))
            return
        if lo == hi:
            exact(check, name, lo, what)
            return
        n = int(theirs)
        ok = lo <= n <= hi
        relation = "within" if ok else "outside"
        why = "what vLLM discards is not in the trace"
        out.append(
            Verdict(
                PASS if ok else FAIL, check, f"{name} {n} is {relation} the trace's {lo}–{hi} {what} ({why})"
            )
        )

    def exact(check: str, name: str, ours: int, what: str) -> None:
        theirs = metrics.get(name)
        if theirs is None:
            out.append(Verdict(SKIP, check, f"the server does not export {name}"))
        elif int(theirs) == ours:
            out.append(Verdict(PASS, check, f"{ours} {what} in the trace = {name} {int(theirs)}"))
        else:
            out.append(
                Verdict(
                    FAIL,
                    check,
                    f"{ours} {what} in the trace ≠ {name} {int(theirs)} (differ by {int(theirs) - ours})",
                )
            )

    exact("requests", METRIC_REQUESTS, t.finished, f"finished requests ({t.admitted} admitted)")
    if t.prompt_unknown:
        out.append(
            Verdict(
                SKIP,
                "prompt tokens",
                f"{t.prompt_unknown} of {t.admitted} admitted requests have no recorded prompt length "
                f"(a step admitted more than {WAITING_DEMAND_LIMIT})",
            )
        )
    else:
        exact("prompt tokens", METRIC_PROMPT, t.prompt_tokens, "prompt tokens at admission")
    ranged("generation tokens", METRIC_GENERATION, t.generation_min, t.generation_max, "sampled tokens")
    exact("preemptions", METRIC_PREEMPTIONS, t.preemptions, "preemptions")
    if any(tr.config.get("spec_method") for tr in traces) or metrics.get(METRIC_DRAFTS):
        ranged("draft tokens", METRIC_DRAFTS, t.spec_min, t.spec_max, "draft tokens scheduled")
    return out


def record_verdicts(trace: Trace) -> list[Verdict]:
    foot = trace.footer
    steps = trace.columns["step"]
    problems: list[str] = []
    if len(steps) and not bool((steps == np.arange(1, len(steps) + 1)).all()):
        problems.append(f"step numbers are not 1..{len(steps)}: steps are missing")
    if trace.gaps:
        problems.append(f"{len(trace.gaps)} gaps from a live stream (`attach --save`)")
    if trace.torn is not None:
        problems.append(f"the file is {trace.torn.describe()}")
    if trace.problems:
        unordered = [p for p in trace.problems if isinstance(p, TraceOrderError)]
        if malformed := len(trace.problems) - len(unordered):
            problems.append(f"{malformed} malformed lines skipped")
        if unordered:  # the first says where: a second writer or a joined copy begins there
            problems.append(f"{len(unordered)} out-of-order step records skipped, the first {unordered[0]}")
    if foot is None:
        why = "; ".join(problems) or "records dropped are counted at a clean shutdown"
        return [
            Verdict(
                SKIP if not problems else FAIL,
                "records",
                f"no footer yet (the server is running, or was killed): {why}",
            )
        ]
    if foot.get("records_dropped"):
        problems.append(
            f"{foot['records_dropped']} records dropped (raise SCHEDSCOPE_QUEUE, or a faster disk)"
        )
    if foot.get("errors"):
        problems.append(f"{foot['errors']} tracer errors (the server log has the first one)")
    if foot.get("writer_failure"):
        problems.append(f"writing stopped: {foot['writer_failure']}")
    if (mismatch := footer_mismatch(trace.footer_count())) is not None:
        problems.append(mismatch)
    if problems:
        return [Verdict(FAIL, "records", "; ".join(problems))]
    kept = (
        " (kept beside the trace: EngineCore was killed before it wrote its footer)"
        if foot.get("kept")
        else ""
    )
    return [
        Verdict(PASS, "records", f"footer: {len(steps)} steps written, 0 records dropped, 0 errors{kept}")
    ]


def replay_verdicts(trace: Trace) -> list[Verdict]:
    from tracer.render.fidelity import fidelity_lines
    from tracer.whatif import fidelity
    from tracer.whatif.workload import WorkloadError, workload_from_trace

    try:
        exact = workload_from_trace(trace).exact
    except WorkloadError as exc:
        return [Verdict(FAIL, "identity replay", str(exc))]
    if not exact:
        why = "no recorded scheduler inputs (format 1.0, or stream gaps): a replay would be approximate"
        return [Verdict(SKIP, "identity replay", why)]
    try:
        result = fidelity.check_fidelity(trace)
    except ImportError as exc:
        return [Verdict(SKIP, "identity replay", f"needs vLLM installed here ({exc})")]
    except Exception as exc:
        return [Verdict(FAIL, "identity replay", f"the replay raised {type(exc).__name__}: {exc}")]
    summary = fidelity_lines(result)[0].removeprefix("identity replay ")
    return [Verdict(PASS if result.identical else FAIL, "identity replay", summary)]


def diagnose(traces: Sequence[Trace], metrics: Metrics | None) -> list[tuple[str, list[Verdict]]]:
    """(section title, verdicts) for each trace, then the totals over all of them."""
    sections: list[tuple[str, list[Verdict]]] = []
    for trace in traces:
        verdicts = [
            version_verdict(trace),
            *hook_verdicts(trace),
            *record_verdicts(trace),
            *replay_verdicts(trace),
        ]
        sections.append((_describe(trace), verdicts))
    sections.append((f"totals ({metrics.source})" if metrics else "totals", total_verdicts(traces, metrics)))
    return sections


def _describe(trace: Trace) -> str:
    h = trace.header
    return (
        f"{trace.path}: {len(trace)} steps, vLLM {h.get('vllm_version')}, "
        f"schema {h.get('schema')}, EngineCore pid {h.get('pid')}"
    )


def run(
    paths: Sequence[str | Path],
    *,
    url: str | None = None,
    metrics_file: str | Path | None = None,
    strict: bool = True,
) -> tuple[int, list[str]]:
    """Load the traces (and the metrics), diagnose; (exit code, output lines)."""
    from tracer.analysis.opening import Spec, open_input

    # Each trace through the one way in, on its own: doctor checks every trace it is given
    # (`Spec(engines=...)` would refuse traces that are not one run's).
    traces = [open_input(Spec(traces=(p,), strict=strict)).session.trace for p in paths]
    metrics = None
    if metrics_file is not None:
        metrics = parse_metrics(Path(metrics_file).read_text(), str(metrics_file))
    elif url is not None:
        metrics = parse_metrics(fetch_metrics(url), metrics_url(url))
    lines: list[str] = []
    counts = {PASS: 0, FAIL: 0, SKIP: 0}
    for title, verdicts in diagnose(traces, metrics):
        lines.append(title)
        for v in verdicts:
            counts[v.status] += 1
            lines.append(f"  {v.line()}")
    lines.append(f"{counts[PASS]} passed, {counts[FAIL]} failed, {counts[SKIP]} skipped")
    return (1 if counts[FAIL] else 0), lines
