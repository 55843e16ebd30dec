"""Export a trace to the Chrome Trace Event Format (JSON) that ui.perfetto.dev opens.

Layout (pids and tids are small fixed integers, not the recorded EngineCore pid):
- pid 1 "vLLM scheduler": counter tracks (budgets, query rows, buffer rows per
  forward pass, running/waiting, KV usage), one "step N" slice per step on the
  `schedule()` thread (dur = the recorded sched_us) and the flags as
  process-scoped instant events.
- pid 2 "requests": one lane (tid) per request with a slice per step it was
  scheduled in ("prefill", "decode" or "resumed") and instants for
  "preempted"/"finished". With more than `max_lanes` requests, lanes are
  reused: a request takes the lowest lane free since its previous occupant's
  last step, so lanes stay bounded by the peak number of live requests, and
  the request id is in every event's args.

Times are integer µs since header `t0` (or the first step): integers, so that
Perfetto's µs→ns conversion cannot make touching slices overlap.

The exporter reads columns, step records and a Session's flags only; budget reasoning stays
in tracer.analysis.budget / tracer.analysis.flags.
"""

from __future__ import annotations

import gzip
import heapq
import math
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import orjson

from tracer.analysis import why
from tracer.analysis.session import Session, request_entries
from tracer.analysis.why import StepWhy
from tracer.render.flags import message
from tracer.render.text import spec_label
from tracer.render.why import cause_text, preemption_line

if TYPE_CHECKING:
    from tracer.analysis.flags import FlagReport
    from tracer.trace.trace_type import Trace

SCHED_PID, REQ_PID = 1, 2
SCHED_TID = 1
MAX_LANES = 512
# A request slice spans its step up to the next step, but at most this many
# median step intervals: an engine idling between bursts must not stretch the
# last slice before the pause across it.
SPAN_CAP_INTERVALS = 4


def _meta(kind: str, pid: int, tid: int, args: dict[str, Any]) -> dict[str, Any]:
    return {"name": kind, "ph": "M", "pid": pid, "tid": tid, "ts": 0, "args": args}


def _counter(name: str, ts: int, args: dict[str, int | float]) -> dict[str, Any]:
    return {"name": name, "ph": "C", "pid": SCHED_PID, "tid": SCHED_TID, "ts": ts, "args": args}


def _timestamps(trace: Trace) -> np.ndarray:
    t = trace.columns["t"]
    t0 = trace.header.get("t0")
    base = float(t0) if isinstance(t0, (int, float)) and math.isfinite(t0) else 0.0
    if len(t) and (not base or base > t[0]):
        base = float(t[0])  # no usable t0: count from the first step
    return np.rint((t - base) * 1e6).astype(np.int64)


def _spans(ts: np.ndarray, sched_dur: np.ndarray) -> np.ndarray:
    """Per step: µs until the next step, capped (see SPAN_CAP_INTERVALS), at least 1."""
    if len(ts) < 2:
        return np.maximum(sched_dur, 1)
    gaps = np.diff(ts)
    positive = gaps[gaps > 0]
    cap = int(np.median(positive)) * SPAN_CAP_INTERVALS if len(positive) else 1
    spans = np.append(np.minimum(gaps, cap), min(cap, int(sched_dur[-1])))
    return np.maximum(spans, 1)


def _counters(trace: Trace, ts: list[int]) -> list[dict[str, Any]]:
    c = {k: v.tolist() for k, v in trace.columns.items()}
    r = {k: v.tolist() for k, v in trace.runner.items()}
    has_query = bool((trace.columns["query_cap"] >= 0).any() or (trace.columns["query_per_req"] > 0).any())
    out = []
    for i, when in enumerate(ts):
        out.append(_counter("target tokens", when, {"used": c["target_used"][i], "cap": c["target_cap"][i]}))
        out.append(
            _counter(
                "input budget",
                when,
                {"used": c["input_used"][i], "reserved": c["input_reserved"][i], "cap": c["input_cap"][i]},
            )
        )
        if has_query:
            q: dict[str, int | float] = {"rows": c["query_rows"][i]}
            if c["query_cap"][i] >= 0:
                q["cap"] = c["query_cap"][i]
            out.append(_counter("query rows", when, q))
        for p in ("target", "draft"):
            # Only steps with a runner record: -1 means "not observed", not zero rows.
            if r[f"{p}_rows"][i] >= 0:
                rows: dict[str, int | float] = {"rows": r[f"{p}_rows"][i]}
                if r[f"{p}_cap"][i] >= 0:
                    rows["cap"] = r[f"{p}_cap"][i]
                out.append(_counter(f"buffer: {p} pass", when, rows))
        out.append(
            _counter("requests", when, {"running": c["num_running"][i], "waiting": c["num_waiting"][i]})
        )
        out.append(_counter("KV cache usage", when, {"usage": c["kv_usage"][i]}))
    return out


def _why_args(why: StepWhy) -> dict[str, Any]:
    """The step's reasons (`schedscope why --step`): its binding constraint in words and as a
    code, and each held-back request's."""
    args: dict[str, Any] = {
        "binding": why.binding.code,
        "binding_certainty": why.binding.certainty,
        "why": cause_text(why.binding),
    }
    if why.requests:
        args["held_back"] = {r.id: cause_text(r.cause) for r in why.requests}
    if why.preemptions:
        args["preemptions"] = [preemption_line(p) for p in why.preemptions]
    return args


def _step_args(rec: dict[str, Any]) -> dict[str, Any]:
    query = rec.get("query") or {}
    args = {
        "step": rec["step"],
        "target_used": rec["target"]["used"],
        "target_cap": rec["target"]["cap"],
        "input_used": rec["input"]["used"],
        "input_reserved": rec["input"].get("reserved", 0),
        "input_cap": rec["input"]["cap"],
        "scheduled": len(rec["new"]) + len(rec["resumed"]) + len(rec["running"]),
        "new": len(rec["new"]),
        "resumed": len(rec["resumed"]),
        "preempted": len(rec["preempted"]),
        "finished": len(rec["finished"]),
        "num_running": rec["num_running"],
        "num_waiting": rec["num_waiting"],
        "kv_usage": rec["kv_usage"],
        "sched_us": rec["sched_us"],
    }
    if query:
        args["query_rows"] = query.get("rows", 0)
        args["query_cap"] = query.get("cap")
    return args


def _slice_name(group: str, tokens: int, spec: int) -> str:
    if group == "new":
        return "prefill"
    if group == "resumed":
        return "resumed"
    # A running request scheduled more than one token plus its drafts is in a chunked prefill.
    return "prefill" if tokens > spec + 1 else "decode"


def _assign_lanes(first: dict[str, int], last: dict[str, int], reuse: bool) -> dict[str, int]:
    """Request id -> lane (0-based) in order of first appearance."""
    lanes: dict[str, int] = {}
    busy: list[tuple[int, int]] = []  # (last step row, lane)
    free: list[int] = []
    n_lanes = 0
    for rid in sorted(first, key=first.__getitem__):  # dicts keep insertion order: ties stay stable
        if reuse:
            while busy and busy[0][0] < first[rid]:
                heapq.heappush(free, heapq.heappop(busy)[1])
        if free:
            lane = heapq.heappop(free)
        else:
            lane, n_lanes = n_lanes, n_lanes + 1
        lanes[rid] = lane
        heapq.heappush(busy, (last[rid], lane))
    return lanes


def _requests(
    records: list[dict[str, Any]], ts: list[int], spans: list[int], max_lanes: int
) -> list[dict[str, Any]]:
    events: list[tuple[str, int, dict[str, Any]]] = []  # (request id, row, event without pid/tid)
    for i, rec in enumerate(records):
        sampled = rec.get("sampled") or {}
        for entry in request_entries(rec, ("running", "resumed", "new")):
            rid = str(entry.id)
            args: dict[str, Any] = {
                "req": rid,
                "step": rec["step"],
                "tokens": entry.tokens,
                "spec_tokens": entry.spec,
            }
            if entry.demand >= 0:
                args["demand"] = entry.demand
            if entry.id in sampled:
                args["sampled"] = sampled[entry.id]
            name = _slice_name(entry.kind, entry.tokens, entry.spec)
            events.append((rid, i, {"name": name, "ph": "X", "ts": ts[i], "dur": spans[i], "args": args}))
        for kind in ("preempted", "finished"):
            for rid in rec[kind]:
                args = {"req": str(rid), "step": rec["step"]}
                events.append((str(rid), i, {"name": kind, "ph": "i", "s": "t", "ts": ts[i], "args": args}))
    first: dict[str, int] = {}
    last: dict[str, int] = {}
    for rid, i, _ in events:
        first.setdefault(rid, i)
        last[rid] = i
    lanes = _assign_lanes(first, last, reuse=len(first) > max_lanes)
    out = [_meta("process_name", REQ_PID, 0, {"name": "requests"})]
    out.append(_meta("process_sort_index", REQ_PID, 0, {"sort_index": REQ_PID}))
    occupants: dict[int, list[str]] = {}
    for rid, lane in lanes.items():
        occupants.setdefault(lane, []).append(rid)
    for lane, rids in occupants.items():
        name = rids[0] if len(rids) == 1 else f"lane {lane + 1} ({len(rids)} requests)"
        out.append(_meta("thread_name", REQ_PID, lane + 1, {"name": name}))
        out.append(_meta("thread_sort_index", REQ_PID, lane + 1, {"sort_index": lane + 1}))
    for rid, _, ev in events:
        ev["pid"], ev["tid"] = REQ_PID, lanes[rid] + 1
        out.append(ev)
    return out


def _flags(report: FlagReport, ts_by_step: dict[int, int]) -> list[dict[str, Any]]:
    return [
        {
            "name": f.kind,
            "ph": "i",
            "s": "p",
            "pid": SCHED_PID,
            "tid": SCHED_TID,
            "ts": ts_by_step.get(f.step, 0),
            "args": {"step": f.step, "severity": f.severity, "message": message(f), **f.numbers},
        }
        for f in report.flags
    ]


def to_chrome_trace(source: Session | Trace, *, max_lanes: int = MAX_LANES) -> dict[str, Any]:
    """The trace as a Chrome Trace Event Format object, with its session's flags."""
    session = Session.of(source)
    trace, report = session.trace, session.report
    cfg = trace.config
    ts_arr = _timestamps(trace)
    sched_dur = np.maximum(np.rint(trace.columns["sched_us"]).astype(np.int64), 1)
    ts, spans = ts_arr.tolist(), _spans(ts_arr, sched_dur).tolist()
    # The step slice is the schedule() call; trimmed to the next step so slices never overlap.
    step_dur = [min(d, s) for d, s in zip(sched_dur.tolist(), spans, strict=True)]
    records = trace.steps()
    config = why.Config(trace)

    label = f"vLLM scheduler ({spec_label(cfg)}, {trace.header.get('policy')})"
    events = [
        _meta("process_name", SCHED_PID, 0, {"name": label}),
        _meta("process_sort_index", SCHED_PID, 0, {"sort_index": SCHED_PID}),
        _meta("thread_name", SCHED_PID, SCHED_TID, {"name": "schedule()"}),
    ]
    events += [
        {
            "name": f"step {rec['step']}",
            "ph": "X",
            "pid": SCHED_PID,
            "tid": SCHED_TID,
            "ts": ts[i],
            "dur": step_dur[i],
            "args": {
                **_step_args(rec),
                **_why_args(why.step_why(trace, i, rec, config=config, resume_costs=False)),
            },
        }
        for i, rec in enumerate(records)
    ]
    events += _counters(trace, ts)
    events += _flags(report, dict(zip(trace.columns["step"].tolist(), ts, strict=True)))
    events += _requests(records, ts, spans, max_lanes)
    # Metadata first, then time order (stable: per-track order is kept for equal ts).
    events.sort(key=lambda e: (e["ph"] != "M", e["ts"]))

    other = {
        "source": trace.path,
        "schedscope_version": trace.header.get("schedscope_version"),
        "vllm_version": trace.header.get("vllm_version"),
        "policy": trace.header.get("policy"),
        "regime": trace.header.get("regime"),
        "steps": len(trace),
        "flags": len(report.flags),
        "tokens_withheld": report.tokens_withheld,
    }
    for key in ("spec_method", "num_speculative_tokens", "draft_slots", "query_rows_per_req"):
        other[key] = cfg.get(key)
    other["max_num_batched_tokens"] = cfg.get("max_num_batched_tokens")
    return {"traceEvents": events, "displayTimeUnit": "ms", "otherData": other}


def export(source: Session | Trace, out_path: str | Path) -> Path:
    """Write to_chrome_trace(source) as JSON; gzip when the name ends in .gz."""
    out = Path(out_path)
    data = orjson.dumps(to_chrome_trace(source))
    if out.name.endswith(".gz"):
        data = gzip.compress(data, mtime=0)  # mtime 0: same trace, same bytes
    out.write_bytes(data)
    return out


def written_line(path: str | Path, steps: int) -> str:
    """What `export` prints once the timeline is written."""
    return f"wrote {path} ({steps} steps); open it at https://ui.perfetto.dev"
