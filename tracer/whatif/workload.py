"""What a replay re-runs: a recorded run's scheduler inputs, or a synthetic workload.

A trace of format 1.1 or later carries every input the engine gave the scheduler,
in order (each step's `inputs`): arrivals with their prompt length, max_tokens,
priority, arrival time and shared prefix; aborts; the drafts the proposer
offered; and which step's model output was applied when. With those and each
step's sampled tokens, a replay through the same scheduler class re-makes the
run exactly. Older traces lack them: their workload is inferred (arrival at
first sighting, K drafts always, no prefix sharing, no aborts) and marked
approximate, with notes saying what is missing.

For a what-if under another configuration, the per-request behaviour is
re-derived from what was recorded, keyed by the request's output position
(tokens it had sampled so far): drafts offered there (clipped to the new K) and
drafts accepted there (clipped to the drafts the new schedule gave it).
"""

from __future__ import annotations

import bisect
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tracer.opening.door import Spec, open_input
from tracer.trace.trace_type import Trace
from tracer.whatif.notes import Approximate, NoFooter, Note, UnrecordedUpdate
from tracer.whatif.offline import EngineSpec, RequestSpec

# Inputs of one recorded step, in the order the scheduler received them:
#   ("a", request id)             add_request
#   ("x", ids or None, status)    finish_requests (None: every request)
#   ("u", step)                   update_from_output with that step's output
#   ("d", step)                   update_draft_token_ids for that step's batch
Event = tuple[Any, ...]
# finish reasons after which a request is re-ended on a stop token
_LENGTH, _ABORT = "length", "abort"


class WorkloadError(ValueError):
    """A workload that cannot be replayed; names the file and the field."""


@dataclass
class PositionTable:
    """Per request, a value recorded at each output position (tokens sampled so far).

    Lookup takes the entry at that position, or the nearest one before it, so a
    what-if that reaches a position the recording never did reuses what the
    request did last.
    """

    positions: dict[str, list[int]] = field(default_factory=dict)
    values: dict[str, list[int]] = field(default_factory=dict)
    # Per request, the positions whose value holds only there (a censored observation:
    # see add); absent when it has none.
    local: dict[str, set[int]] = field(default_factory=dict)
    # Per request, the positions whose value is a floor: every draft verified there was
    # accepted, so it says nothing of drafts beyond them; absent when it has none.
    floors: dict[str, set[int]] = field(default_factory=dict)

    def add(
        self, rid: str, position: int, value: int, *, only_here: bool = False, floor: bool = False
    ) -> None:
        """`only_here`: the value is right at this position and says nothing of others (the
        drafts accepted in a step that also reached max_tokens or a stop: a lower bound).
        `floor`: the value is all there was to accept (every draft verified was), so it bounds
        what more drafts would have got from below only (`lookup`)."""
        pos = self.positions.setdefault(rid, [])
        vals = self.values.setdefault(rid, [])
        if only_here:
            self.local.setdefault(rid, set()).add(position)
        elif rid in self.local:
            self.local[rid].discard(position)
        if floor:
            self.floors.setdefault(rid, set()).add(position)
        elif rid in self.floors:
            self.floors[rid].discard(position)
        if pos and pos[-1] == position:
            vals[-1] = value  # a re-sample at the same position (after a preemption): the latest
            return
        pos.append(position)
        vals.append(value)

    def get(self, rid: str, position: int) -> int | None:
        found = self.lookup(rid, position)
        return None if found is None else found[0]

    def lookup(self, rid: str, position: int) -> tuple[int, bool] | None:
        """(value, whether it is a floor) for the request at `position`, as `get` finds it."""
        pos = self.positions.get(rid)
        if not pos:
            return None
        i = bisect.bisect_right(pos, position) - 1
        j = max(i, 0)
        local = self.local.get(rid)
        if local is not None and not (i >= 0 and pos[i] == position):
            # Not observed here: the nearest value before that holds elsewhere, else the first after.
            order = (*range(i, -1, -1), *range(i + 1, len(pos)))
            holds = next((k for k in order if pos[k] not in local), None)
            if holds is None:
                return None
            j = holds
        floors = self.floors.get(rid)
        return self.values[rid][j], floors is not None and pos[j] in floors

    def __contains__(self, rid: str) -> bool:
        return rid in self.positions


@dataclass
class Workload:
    engine: EngineSpec
    requests: list[RequestSpec]
    async_scheduling: bool = False
    # Inputs per recorded step (index 0 is step 1); None: arrivals by arrival_step
    # and the engine's own interleaving of schedule and update.
    log: list[list[Event]] | None = None
    accepted: PositionTable = field(default_factory=PositionTable)
    drafts: PositionTable | None = None  # None: the proposer offers K every time
    stops: dict[str, int] = field(default_factory=dict)  # id -> output tokens when it stopped
    # Synthetic workloads: drafts accepted per sampling step, in order (not by position).
    accepted_in_order: dict[str, list[int]] = field(default_factory=dict)
    accept_default: str = "all"  # or "none", where nothing was recorded
    # A recording's share of drafts accepted, over every step that showed one (not cut):
    # what a request never seen verifying drafts accepts where a replay gives it some.
    accept_rate: float | None = None
    # Recorded steps that scheduled nothing: no model ran, so no drafts were proposed after
    # them (with `log`: the only steps a replay's own batch may need drafts after unlogged).
    unrun: set[int] = field(default_factory=set)
    exact: bool = False  # the trace carried every input a replay needs
    notes: list[Note] = field(default_factory=list)  # worded by tracer.render.notes
    source: str = ""
    # The recording's clocks (header start_time and t0, each step's `t`): a timed replay
    # starts where the recording did, and `--arrivals time` turns arrival times into it.
    start_time: float | None = None
    t0: float | None = None
    step_times: list[float] = field(default_factory=list)
    # Timed replays by step: recorded step -> how long the engine waited for requests before
    # it (s), beyond its previous step's predicted time (tracer.whatif.replay_clock.attach_idle_waits).
    idle_waits: dict[int, float] = field(default_factory=dict)
    # Timed replays by arrival time: request id -> its time from arrival to when the engine
    # could take it (s), as recorded (tracer.whatif.replay_clock.attach_frontend_delays).
    frontend_delays: dict[str, float] = field(default_factory=dict)

    def request(self, rid: str) -> RequestSpec:
        return self._by_id[rid]

    def arrival_clock(self, spec: RequestSpec) -> float:
        """When the request arrived on the recording's monotonic clock (steps' `t`)."""
        assert spec.arrival_time is not None and self.start_time is not None and self.t0 is not None
        return spec.arrival_time - self.start_time + self.t0

    def engine_clock(self, spec: RequestSpec) -> float:
        """When the engine could first take the request, on the recording's monotonic clock:
        its arrival plus its recorded time in the frontend."""
        return self.arrival_clock(spec) + self.frontend_delays.get(spec.id, 0.0)

    def check_arrival_times(self) -> None:
        """`--arrivals time` needs wall-clock arrival times from a live server; an offline
        recording (tracer.whatif.offline) stores step numbers there."""
        if self.start_time is None or self.t0 is None or not self.step_times:
            raise WorkloadError(f"{self.source}: --arrivals time needs a recorded trace (format 1.1)")
        span = self.step_times[-1] - self.step_times[0]
        for spec in self.requests:
            at = None if spec.arrival_time is None else self.arrival_clock(spec)
            if at is None or not (self.step_times[0] - 3600 <= at <= self.step_times[-1] + span + 3600):
                raise WorkloadError(
                    f"{self.source}: request {spec.id!r} has arrival_time {spec.arrival_time!r}, not a "
                    "wall time within the run (an offline recording stores step numbers there): "
                    "use --arrivals step"
                )

    def abort_times(self) -> list[tuple[float, Any, str]]:
        """Recorded aborts as (time, ids, status). The trace says only which schedule() an
        abort came before, so it is placed midway between that step's `t` and the previous."""
        if self.log is None or not self.step_times:
            return []
        out = []
        t = self.step_times
        for i, events in enumerate(self.log):
            at = t[i] if i == 0 else (t[i - 1] + t[i]) / 2
            out += [(at, e[1], e[2]) for e in events if e[0] == "x"]
        return out

    def __post_init__(self) -> None:
        self._by_id = {r.id: r for r in self.requests}


def engine_from_config(config: dict[str, Any]) -> EngineSpec:
    method = config.get("spec_method")
    return EngineSpec(
        max_num_batched_tokens=int(config.get("max_num_batched_tokens") or 8192),
        max_num_seqs=int(config.get("max_num_seqs") or 256),
        max_model_len=int(config.get("max_model_len") or 65536),
        method=method,
        num_speculative_tokens=int(config.get("num_speculative_tokens") or 0) if method else 0,
        block_size=int(config.get("block_size") or 16),
        num_kv_blocks=int(config.get("num_kv_blocks") or 10_000),
        scheduling_policy=str(config.get("scheduling_policy") or "fcfs"),
        long_prefill_token_threshold=int(config.get("long_prefill_token_threshold") or 0),
        enable_prefix_caching=bool(config.get("enable_prefix_caching")),
        enable_chunked_prefill=config.get("enable_chunked_prefill") is not False,
        scheduler_reserve_full_isl=config.get("scheduler_reserve_full_isl"),
        kv_watermark=float(config.get("kv_watermark") or 0.0),
    )


def workload_from_trace(trace: Trace) -> Workload:
    steps = trace.steps()
    engine = engine_from_config(trace.config)
    # The recorded scheduler class decides (vLLM 0.33 turns async scheduling on in its
    # config by default, whatever class serves); the config only where the class is unknown.
    cls = trace.header.get("scheduler_cls")
    is_async = "Async" in cls if isinstance(cls, str) else bool(trace.config.get("async_scheduling"))
    if steps and all(s.get("inputs") is not None for s in steps) and not trace.gaps:
        return _recorded_workload(trace, steps, engine, is_async)
    return _inferred_workload(trace, steps, engine, is_async)


def _bad(trace: Trace, step: int, what: str, entry: Any) -> WorkloadError:
    return WorkloadError(f"{trace.path}: step {step}: field 'inputs': {what}: {entry!r}")


def _recorded_workload(
    trace: Trace, steps: list[dict[str, Any]], engine: EngineSpec, is_async: bool
) -> Workload:
    """Format 1.1+: the scheduler's inputs as recorded, and each request's behaviour by position."""
    requests: list[RequestSpec] = []
    log: list[list[Event]] = []
    accepted, drafts = PositionTable(), PositionTable()
    stops: dict[str, int] = {}
    limits: dict[str, int] = {}  # max_tokens per request
    verified = [0, 0]  # drafts accepted, drafts scheduled: where a step showed acceptance
    sampled_by_step: dict[int, dict[str, int]] = {}
    out: dict[str, int] = {}  # tokens sampled so far, per request, in update order
    last_update = -1
    index = {s["step"]: i for i, s in enumerate(steps)}
    notes: list[Note] = []
    updated: set[int] = set()

    def apply_update(k: int) -> None:
        """Step k's output reached the scheduler: what each request sampled, and where it stopped."""
        updated.add(k)
        rec = steps[index[k]]
        sampled = rec.get("sampled") or {}
        # Acceptance is observed only where a request verified real drafts: a running one
        # with drafts scheduled. One without drafts accepted nothing for want of any, and an
        # admission's drafts (new or resumed, from vLLM's waiting loop) are placeholders
        # (pad_spec_decode): neither says what it would accept where a replay gives it drafts.
        drafted = {e[0]: e[2] for e in rec.get("running") or () if len(e) > 2 and e[2]}
        ends = rec.get("ends") or {}
        for rid, n in sampled.items():
            if n > 0:
                at = out.get(rid, 0)
                if rid in drafted:
                    # vLLM cuts what a step sampled at max_tokens or a stop: fewer accepted
                    # than drafted there may be that cut, not a rejection.
                    cut = rid in ends or at + n >= limits.get(rid, at + n + 1)
                    only_here = cut and n - 1 < drafted[rid]
                    # Every draft it verified accepted: what it would accept of more drafts (a
                    # policy that leaves it more of the budget here) was never tried.
                    floor = n - 1 >= drafted[rid]
                    accepted.add(rid, at, n - 1, only_here=only_here, floor=floor)
                    if not only_here:
                        verified[0] += min(n - 1, drafted[rid])
                        verified[1] += drafted[rid]
                out[rid] = at + n
        for rid, (reason, kept) in (rec.get("ends") or {}).items():
            if reason not in (_LENGTH, _ABORT):
                stops[rid] = out.get(rid, 0) - sampled.get(rid, 0) + int(kept)
        sampled_by_step[k] = sampled

    for rec in steps:
        number = rec["step"]
        if number != len(log) + 1:
            raise WorkloadError(f"{trace.path}: step {number}: steps must be numbered 1, 2, … without gaps")
        events: list[Event] = []
        for entry in rec["inputs"]:
            if not isinstance(entry, list) or not entry:
                raise _bad(trace, number, "expected a non-empty list", entry)
            kind = entry[0]
            if kind == "a":
                try:
                    _, rid, prompt, max_tokens, priority, arrival, prefix = entry
                    spec = RequestSpec(
                        str(rid),
                        int(prompt),
                        int(max_tokens),
                        arrival_step=number,
                        priority=int(priority),
                        arrival_time=float(arrival),
                        prefix=None if prefix is None else (str(prefix[0]), int(prefix[1])),
                    )
                except (TypeError, ValueError, IndexError) as exc:
                    raise _bad(trace, number, f"an arrival ({exc})", entry) from None
                requests.append(spec)
                limits[spec.id] = spec.max_tokens
                events.append(("a", spec.id))
            elif kind == "x":
                if len(entry) != 3 or not (entry[1] is None or isinstance(entry[1], list)):
                    raise _bad(trace, number, "an abort must be ['x', ids or null, status]", entry)
                events.append(("x", entry[1], str(entry[2])))
            elif kind == "u":
                k = entry[1] if len(entry) == 2 else None
                if type(k) is not int:
                    raise _bad(trace, number, "an update must be ['u', step]", entry)
                if k < 0 or k not in index:
                    notes.append(UnrecordedUpdate(number, k))
                    continue
                last_update = k
                apply_update(k)
                events.append(("u", k))
            elif kind == "d":
                try:
                    _, ids, counts = entry
                    pairs = list(zip(ids, counts, strict=True))
                except (TypeError, ValueError) as exc:
                    raise _bad(trace, number, f"drafts must be ['d', ids, counts] ({exc})", entry) from None
                batch = sampled_by_step.get(last_update, {})
                for rid, n in pairs:
                    # The scheduler drops drafts for a request still in prefill (it sampled nothing).
                    if batch.get(rid, 0) > 0:
                        drafts.add(rid, out.get(rid, 0), int(n))
                events.append(("d", last_update))
            else:
                raise _bad(trace, number, f"unknown input kind {kind!r}", entry)
        log.append(events)
    # The outputs of the last steps reach the scheduler after the last schedule(), so no
    # step's inputs name them: the engine applied them in order.
    for k in sorted(set(index) - updated):
        apply_update(k)
    if trace.torn is not None or trace.footer is None:
        notes.append(NoFooter())
    has_drafts = any(e[0] == "d" for events in log for e in events)
    return Workload(
        engine,
        requests,
        async_scheduling=is_async,
        log=log,
        accepted=accepted,
        drafts=drafts if has_drafts else None,  # None: the proposer offers K (no drafts recorded)
        stops=stops,
        unrun={rec["step"] for rec in steps if not rec["target"]["used"]},
        accept_rate=verified[0] / verified[1] if verified[1] else None,
        exact=True,
        notes=notes,
        source=trace.path,
        **_clock_of(trace),
    )


def _clock_of(trace: Trace) -> dict[str, Any]:
    """The recording's clock, for a timed replay: its wall/monotonic anchors and step times."""

    def number(value: Any) -> float | None:
        return float(value) if isinstance(value, (int, float)) else None

    return {
        "start_time": number(trace.header.get("start_time")),
        "t0": number(trace.header.get("t0")),
        "step_times": [float(x) for x in trace.columns["t"]],
    }


def _inferred_workload(
    trace: Trace, steps: list[dict[str, Any]], engine: EngineSpec, is_async: bool
) -> Workload:
    """Format 1.0 (or a trace with gaps): requests as the trace saw them. First sighting
    (admitted or waiting) is the arrival, its demand then the prompt, its sampled tokens
    the output."""
    arrival: dict[str, int] = {}
    priority: dict[str, int] = {}
    prompt: dict[str, int] = {}
    output: dict[str, int] = {}
    accepted = PositionTable()
    for rec in steps:
        step = rec["step"]
        for rid, p in (rec.get("priority") or {}).items():
            priority.setdefault(rid, int(p))
        # Queue order within a step: the admitted requests came first.
        for rid, tokens, _spec, demand in rec["new"]:
            if rid not in arrival:
                arrival[rid], prompt[rid] = step, demand if demand >= 0 else tokens
        for rid, demand in rec["waiting_demand"]:
            if rid not in arrival:
                arrival[rid], prompt[rid] = step, demand
        for rid, n in (rec["sampled"] or {}).items():
            if n > 0:
                accepted.add(rid, output.get(rid, 0), n - 1)
                output[rid] = output.get(rid, 0) + n
    requests = [
        RequestSpec(
            rid,
            prompt[rid],
            max(1, output.get(rid, 1)),
            arrival_step=arrival[rid],
            priority=priority.get(rid, 0),
        )
        for rid in arrival
    ]
    notes: list[Note] = [Approximate(gaps=bool(trace.gaps))]
    return Workload(
        engine,
        requests,
        async_scheduling=is_async,
        accepted=accepted,
        notes=notes,
        source=trace.path,
        **_clock_of(trace),
    )


def workload_from_file(path: str | Path) -> Workload:
    """A synthetic workload:

    engine: {max_num_batched_tokens: 16, method: dspark, num_speculative_tokens: 4}
    requests:
      - {id: a, prompt_len: 8, max_tokens: 3}
      - {id: o, prompt_len: 1, max_tokens: 3, arrival_step: 4, count: 5}
    accept: all            # or none, or {request_id: [accepted per sampling step]}
    """
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as exc:
        raise WorkloadError(f"{path}: cannot read ({exc})") from None
    if path.suffix in (".yaml", ".yml"):
        try:
            import yaml  # optional: PyYAML, present wherever vLLM is
        except ImportError:
            raise WorkloadError(f"{path}: reading YAML needs PyYAML; or write the workload as JSON") from None
        doc = yaml.safe_load(text)
    else:
        try:
            doc = json.loads(text)
        except json.JSONDecodeError as exc:
            raise WorkloadError(f"{path}:{exc.lineno}: not JSON ({exc.msg})") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("requests"), list):
        raise WorkloadError(f"{path}: field 'requests': a list of requests is required")
    engine_doc = doc.get("engine") or {}
    known = set(EngineSpec.__dataclass_fields__)
    unknown = set(engine_doc) - known
    if unknown:
        raise WorkloadError(f"{path}: field 'engine': unknown keys {sorted(unknown)}; known: {sorted(known)}")
    engine = EngineSpec(**engine_doc)
    requests: list[RequestSpec] = []
    for i, r in enumerate(doc["requests"]):
        try:
            count = int(r.get("count", 1))
            for j in range(count):
                rid = str(r["id"]) if count == 1 else f"{r['id']}{j}"
                requests.append(
                    RequestSpec(
                        rid,
                        int(r["prompt_len"]),
                        int(r["max_tokens"]),
                        arrival_step=int(r.get("arrival_step", 1)),
                        priority=int(r.get("priority", 0)),
                    )
                )
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            message = f"{path}: field 'requests[{i}]': {exc!r} (needs id, prompt_len, max_tokens)"
            raise WorkloadError(message) from None
    accept = doc.get("accept", "all")
    if isinstance(accept, dict):
        in_order = {str(k): [int(x) for x in v] for k, v in accept.items()}
        return Workload(engine, requests, accepted_in_order=in_order, source=str(path))
    if accept not in ("all", "none"):
        raise WorkloadError(f"{path}: field 'accept': 'all', 'none' or a mapping, got {accept!r}")
    return Workload(engine, requests, accept_default=accept, source=str(path))


def load_workload(source: str | Path) -> Workload:
    """A trace (.jsonl, .jsonl.gz, .zst) or a workload file (.json, .yaml, .yml)."""
    name = str(source)
    if name.endswith((".json", ".yaml", ".yml")):
        return workload_from_file(source)
    return workload_from_trace(open_input(Spec(traces=(source,))).session.trace)
