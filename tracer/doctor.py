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

from tracer.render import doctor as words
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
        return words.verdict_line(self.status, self.check, self.sentence)


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
    release = vllm_release(version)
    if release is None:
        return Verdict(SKIP, "vLLM version", words.version(repr(version), None, low, high))
    if release in SUPPORTED_VLLM:
        return Verdict(PASS, "vLLM version", words.version(str(version), True, low, high))
    return Verdict(FAIL, "vLLM version", words.version(str(version), False, low, high))


def _scheduler_verdict(trace: Trace) -> Verdict:
    cls = trace.header.get("scheduler_cls") or words.UNKNOWN_CLASS
    on = bool(trace.config.get("async_scheduling"))
    is_async = "Async" in cls.rsplit(".", 1)[-1]
    if on != is_async:
        use = ASYNC_CLS if on else SYNC_CLS
        return Verdict(FAIL, "scheduler hook", words.scheduler_mismatch(cls, on, use))
    return Verdict(PASS, "scheduler hook", words.scheduler_ok(cls, len(trace), on))


def _runner_verdict(trace: Trace, hooks: dict[str, Any] | None) -> Verdict:
    busy = trace.columns["target_used"] > 0
    noted = trace.runner["target_rows"] >= 0
    if hooks is None:
        if trace.config.get("model") == OFFLINE_MODEL_NAME:
            return Verdict(SKIP, "runner hook", words.runner_offline())
        if noted.any():
            return Verdict(PASS, "runner hook", words.runner_unnamed())
        if not busy.any():
            return Verdict(SKIP, "runner hook", words.nothing_scheduled("forward pass"))
        return Verdict(FAIL, "runner hook", words.runner_missing())
    name = words.runner_name(hooks.get("runner"), hooks.get("runner_cls"))
    missing = int((busy & ~noted).sum())
    if missing:
        return Verdict(FAIL, "runner hook", words.runner_gaps(name, missing, int(busy.sum())))
    padded = "target" in (hooks.get("padded") or ())
    return Verdict(PASS, "runner hook", words.runner_ok(name, padded))


def _speculator_verdict(trace: Trace, hooks: dict[str, Any] | None) -> Verdict:
    method = trace.config.get("spec_method")
    if not method:
        return Verdict(SKIP, "speculator hook", words.no_speculation())
    run = trace.runner
    drafted = run["draft_rows"] >= 0
    name = (hooks or {}).get("speculator") or method
    if method in NO_DRAFT_PASS_METHODS:
        if drafted.any():
            return Verdict(FAIL, "speculator hook", words.passless_drafted(method))
        return Verdict(PASS, "speculator hook", words.passless_ok(method))
    if hooks is not None and not hooks.get("speculator_rows"):
        return Verdict(FAIL, "speculator hook", words.speculator_unhooked(name, method))
    if not drafted.any():
        if not (trace.columns["target_used"] > 0).any():
            return Verdict(SKIP, "speculator hook", words.nothing_scheduled("drafter pass"))
        if trace.config.get("model") == OFFLINE_MODEL_NAME:
            return Verdict(SKIP, "speculator hook", words.speculator_offline())
        return Verdict(FAIL, "speculator hook", words.speculator_silent(method))
    over = int((drafted & (run["draft_cap"] >= 0) & (run["draft_rows"] > run["draft_cap"])).sum())
    rows = None if hooks is None else hooks["speculator_rows"]
    padded = hooks is not None and "draft" in (hooks.get("padded") or ())
    return Verdict(PASS, "speculator hook", words.speculator_ok(name, int(drafted.sum()), rows, padded, over))


def hook_verdicts(trace: Trace) -> list[Verdict]:
    """The scheduler class, the runner and speculator the runner's process reported."""
    hooks = trace.hooks[-1] if trace.hooks else None
    out = [_scheduler_verdict(trace), _runner_verdict(trace, hooks), _speculator_verdict(trace, hooks)]
    inactive = sorted({reason for rec in trace.hooks for reason in rec.get("inactive") or ()})
    if inactive:
        out.append(Verdict(FAIL, "inactive hooks", words.inactive(inactive)))
    return out


def total_verdicts(traces: Sequence[Trace], metrics: Metrics | None) -> list[Verdict]:
    if metrics is None:
        return [Verdict(SKIP, "totals", words.no_metrics())]
    out: list[Verdict] = []
    if len(metrics.engines) > len(traces):
        out.append(Verdict(FAIL, "engines", words.engines_missing(sorted(metrics.engines), len(traces))))
    t = trace_totals(traces)

    def ranged(check: str, name: str, lo: int, hi: int, what: str) -> None:
        theirs = metrics.get(name)
        if theirs is None:
            out.append(Verdict(SKIP, check, words.not_exported(name)))
            return
        if lo == hi:
            exact(check, name, lo, what)
            return
        n = int(theirs)
        ok = lo <= n <= hi
        out.append(Verdict(PASS if ok else FAIL, check, words.in_range(name, n, lo, hi, what, ok)))

    def exact(check: str, name: str, ours: int, what: str) -> None:
        theirs = metrics.get(name)
        if theirs is None:
            out.append(Verdict(SKIP, check, words.not_exported(name)))
        else:
            same = int(theirs) == ours
            out.append(Verdict(PASS if same else FAIL, check, words.equal(name, ours, int(theirs), what)))

    exact("requests", METRIC_REQUESTS, t.finished, words.finished_requests(t.admitted))
    if t.prompt_unknown:
        unknown = words.prompts_unknown(t.prompt_unknown, t.admitted, WAITING_DEMAND_LIMIT)
        out.append(Verdict(SKIP, "prompt tokens", unknown))
    else:
        exact("prompt tokens", METRIC_PROMPT, t.prompt_tokens, words.PROMPT_TOKENS)
    ranged("generation tokens", METRIC_GENERATION, t.generation_min, t.generation_max, words.SAMPLED_TOKENS)
    exact("preemptions", METRIC_PREEMPTIONS, t.preemptions, words.PREEMPTIONS)
    if any(tr.config.get("spec_method") for tr in traces) or metrics.get(METRIC_DRAFTS):
        ranged("draft tokens", METRIC_DRAFTS, t.spec_min, t.spec_max, words.DRAFT_TOKENS)
    return out


def record_verdicts(trace: Trace) -> list[Verdict]:
    foot = trace.footer
    steps = trace.columns["step"]
    problems: list[str] = []
    if len(steps) and not bool((steps == np.arange(1, len(steps) + 1)).all()):
        problems.append(words.steps_missing(len(steps)))
    if trace.gaps:
        problems.append(words.stream_gaps(len(trace.gaps)))
    if trace.torn is not None:
        problems.append(words.torn(trace.torn.describe()))
    if trace.problems:
        unordered = [p for p in trace.problems if isinstance(p, TraceOrderError)]
        if malformed := len(trace.problems) - len(unordered):
            problems.append(words.malformed_skipped(malformed))
        if unordered:  # the first says where: a second writer or a joined copy begins there
            problems.append(words.unordered_skipped(len(unordered), unordered[0]))
    if foot is None:
        return [Verdict(SKIP if not problems else FAIL, "records", words.no_footer(problems))]
    if foot.get("records_dropped"):
        problems.append(words.dropped(foot["records_dropped"]))
    if foot.get("errors"):
        problems.append(words.tracer_errors(foot["errors"]))
    if foot.get("writer_failure"):
        problems.append(words.writing_stopped(foot["writer_failure"]))
    if (mismatch := footer_mismatch(trace.footer_count())) is not None:
        problems.append(mismatch)
    if problems:
        return [Verdict(FAIL, "records", words.problems(problems))]
    return [Verdict(PASS, "records", words.footer_ok(len(steps), bool(foot.get("kept"))))]


def cost_verdicts(trace: Trace) -> list[Verdict]:
    """What the tracer took of EngineCore while it recorded (the footer's `hooks_s` and
    `writer_thread_s`), a step's share beside the median time between steps; nothing for a
    trace whose footer does not say (older traces, a thread-less offline recording)."""
    foot = trace.footer or {}
    hooks, thread = foot.get("hooks_s"), foot.get("writer_thread_s")
    steps = len(trace)
    if hooks is None or thread is None or steps < 2:
        return []
    interval = float(np.median(np.diff(trace.columns["t"])))
    hooks_us, thread_us = hooks / steps * 1e6, thread / steps * 1e6
    share = (hooks_us + thread_us) / (interval * 1e6) if interval > 0 else None
    return [Verdict(PASS, "tracer cost", words.tracer_cost(hooks_us, thread_us, interval, share))]


def replay_verdicts(trace: Trace) -> list[Verdict]:
    from tracer.render.fidelity import fidelity_lines
    from tracer.whatif import fidelity
    from tracer.whatif.workload import WorkloadError, workload_from_trace

    try:
        exact = workload_from_trace(trace).exact
    except WorkloadError as exc:
        return [Verdict(FAIL, "identity replay", str(exc))]
    if not exact:
        return [Verdict(SKIP, "identity replay", words.replay_approximate())]
    try:
        result = fidelity.check_fidelity(trace)
    except ImportError as exc:
        return [Verdict(SKIP, "identity replay", words.replay_needs_vllm(exc))]
    except Exception as exc:
        return [Verdict(FAIL, "identity replay", words.replay_raised(exc))]
    summary = words.replay_summary(fidelity_lines(result)[0])
    return [Verdict(PASS if result.identical else FAIL, "identity replay", summary)]


def diagnose(traces: Sequence[Trace], metrics: Metrics | None) -> list[tuple[str, list[Verdict]]]:
    """(section title, verdicts) for each trace, then the totals over all of them."""
    sections: list[tuple[str, list[Verdict]]] = []
    for trace in traces:
        verdicts = [
            version_verdict(trace),
            *hook_verdicts(trace),
            *record_verdicts(trace),
            *cost_verdicts(trace),
            *replay_verdicts(trace),
        ]
        sections.append((words.trace_title(trace.path, len(trace), trace.header), verdicts))
    title = words.totals_title(metrics.source if metrics else None)
    sections.append((title, total_verdicts(traces, metrics)))
    return sections


def run(
    paths: Sequence[str | Path],
    *,
    url: str | None = None,
    metrics_file: str | Path | None = None,
    strict: bool = True,
) -> tuple[int, list[str]]:
    """Load the traces (and the metrics), diagnose; (exit code, output lines)."""
    from tracer.opening.door import Spec, open_input

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
    lines.append(words.tally(counts[PASS], counts[FAIL], counts[SKIP]))
    return (1 if counts[FAIL] else 0), lines
