"""The recorder: cheap snapshots on the scheduler thread, records built on the writer's.

Data flows one way: vLLM -> Recorder.before/after_schedule (a `Candidates` and a
`StepSnapshot`: ints, ids and flat lists) -> TraceWriter queue -> Recorder.encode on
the writer thread (build_step, runner_record) -> a `Record` (kind, step, orjson line).

A step's record waits for its update_from_output() so it can carry the tokens
each request sampled (accepted drafts + 1); runner records join it by step.
No vLLM import happens here: everything is read off the objects vLLM passes in.
"""

from __future__ import annotations

import logging
import os
import time
from collections import OrderedDict
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from itertools import chain, islice, repeat
from pathlib import Path
from typing import Any, NamedTuple

import orjson

from tracer import __version__
from tracer.record.engine_config import describe_scheduler, regime_of
from tracer.record.indexer import IndexProcess
from tracer.record.writer import Record, Tap, TraceWriter, open_sink
from tracer.trace import schema

logger = logging.getLogger("schedscope.recorder")

ENV_TRACE = "SCHEDSCOPE_TRACE"
ENV_QUEUE = "SCHEDSCOPE_QUEUE"
DEFAULT_QUEUE = 65536

# A step whose update_from_output never arrives is written without outcomes
# once this many newer steps are pending (async scheduling keeps one or two).
MAX_PENDING = 16

# The runner hook attaches its per-pass notes to the ModelRunnerOutput under this name,
# and, when they changed, which of its hooks are active in the runner's process.
RUNNER_NOTES_ATTR = "_schedscope_runner"
RUNNER_HOOKS_ATTR = "_schedscope_hooks"


# The snapshots are slotted dataclasses built by keyword: as cheap on the scheduler
# thread as a NamedTuple or cheaper (docs/performance.md), and a field can be neither
# shifted nor forgotten silently.
@dataclass(slots=True, kw_only=True)
class Candidates:
    """before_schedule(): the requests schedule() is about to consider."""

    running: list[Any]  # the running Request objects (their ids are read on the writer thread)
    demand: list[int]  # tokens each running request still needs, before clipping
    waiting: list[tuple[str, int]]  # (id, tokens still needed) of the first waiting requests
    waiting_truncated: int  # waiting requests beyond schema.WAITING_DEMAND_LIMIT
    priority: dict[str, int] | None  # non-zero priorities of those waiting (priority scheduling)
    waiting_refs: list[Any]  # the listed waiting Request objects: their status after schedule()
    kv_free: int  # free KV blocks before schedule() (-1: not readable)


# What the engine told the scheduler between two steps (a replay gives it again), taken on
# the scheduler thread and encoded on the writer thread as the record's `inputs` entries.
class Arrival(NamedTuple):  # add_request(): ["a", id, prompt, max_tokens, priority, arrival, prefix]
    rid: str
    prompt: int
    max_tokens: int
    priority: int
    arrival: float
    hashes: list[Any] | None  # vLLM's chained block hashes; the prefix is found from them


class Abort(NamedTuple):  # finish_requests() from outside: ["x", ids, status]
    ids: list[str] | None
    status: str


class Drafts(NamedTuple):  # update_draft_token_ids(): ["d", ids (or positions), counts]
    ids: list[str]
    counts: list[int]


class Applied(NamedTuple):  # a step's output applied: ["u", step] (-1: a step not traced)
    step: int


class Preemption(NamedTuple):  # one _preempt_request() call inside schedule()
    victim: str
    trigger: str | None  # the request whose KV allocation failed; None when not seen
    lost: int  # the victim's computed tokens, dropped (vLLM recomputes them on resume)
    free_before: int  # free KV blocks before its blocks were freed, after
    free_after: int


SchedulerInput = Arrival | Abort | Drafts | Applied


@dataclass(slots=True, kw_only=True)
class StepSnapshot:
    """One step, taken in after_schedule() and completed in after_update(); the writer
    thread builds its record (Recorder.build_step)."""

    step: int
    t: float  # the scheduler clock when schedule() began
    dt_ns: int  # schedule()'s duration
    total: int  # SchedulerOutput.total_num_scheduled_tokens
    num_sched: dict[str, int]  # tokens scheduled per request
    new_ids: list[str]
    cached_ids: list[str]
    resumed: set[str]
    spec: tuple[list[str], list[int]]  # (ids, draft counts) scheduled for verification
    preempted: list[str]
    finished: list[str]
    n_running: int
    n_waiting: int
    kv: float  # KV cache usage
    candidates: Candidates | None  # None when before_schedule failed
    inputs: list[SchedulerInput]  # what the scheduler was told since the step before
    # The facts a "why" rests on (format 1.3), all read on the scheduler thread.
    kv_free: tuple[int, int] | None = None  # free KV blocks before schedule(), after
    admitted: tuple[list[str], list[int]] | None = None  # new/resumed ids, computed tokens after
    statuses: list[Any] | None = None  # status of each Candidates.waiting_refs after schedule()
    preemptions: list[Preemption] | None = None
    paused: str | None = None
    # From update_from_output, when it arrives: (ids, tokens sampled per request), and
    # how requests ended, {id: (reason, tokens kept)}.
    sampled: tuple[list[str], list[int]] | None = None
    ends: dict[str, tuple[str, int]] | None = None


class RunnerNote(NamedTuple):
    """What the runner hook noted about one forward pass; pickled back to EngineCore
    on the ModelRunnerOutput (RUNNER_NOTES_ATTR)."""

    pass_: str  # "target" | "draft"
    rows: int
    cap: int | None  # rows of the input buffer
    reqs: int | None
    padded: int | None = None  # rows after CUDA-graph/DP padding, where observed
    # From a hook that observes padding (V2 prepare_inputs, a V2 speculator's propose):
    # its record carries `padded`, null when the padded size was not seen this pass.
    notes_padding: bool = False


class RunnerPass(NamedTuple):
    """A runner note joined to its step: one `runner` record."""

    step: int
    note: RunnerNote


@dataclass(frozen=True)
class RecorderConfig:
    """What a tracing scheduler records and serves. A server reads it from the environment
    (`from_env`); the offline harness passes one (`configured`) and leaves the environment be."""

    trace: Path | None = None  # the trace file; None: no file
    stream: str = ""  # SCHEDSCOPE_STREAM: HOST:PORT of the live stream, "" for none
    stream_token: str | None = None
    metrics: str = ""  # SCHEDSCOPE_METRICS: HOST:PORT, "off", or "" (on the stream server only)
    queue: int = DEFAULT_QUEUE  # the writer's bounded queue, in records
    metrics_token: str | None = None  # SCHEDSCOPE_METRICS_TOKEN, else the stream's token
    header: Mapping[str, Any] = field(default_factory=dict)  # extra header fields (a replay's source)

    @property
    def active(self) -> bool:
        return self.trace is not None or bool(self.stream) or self.metrics.lower() not in ("", "off")

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> RecorderConfig:
        """The server's configuration. A bad value is logged and falls back to its default:
        it never turns the trace off silently, nor stops the server."""
        env = os.environ if env is None else env
        raw = env.get(ENV_TRACE, "").strip()
        queue = DEFAULT_QUEUE
        text = env.get(ENV_QUEUE, "").strip()
        if text:
            try:
                queue = int(text)
                if queue <= 0:
                    raise ValueError("not positive")
            except ValueError:
                queue = DEFAULT_QUEUE
                logger.warning(
                    "schedscope: %s=%r is not a positive integer; using %d", ENV_QUEUE, text, queue
                )
        return cls(
            trace=Path(raw.replace("{pid}", str(os.getpid()))) if raw else None,
            stream=env.get("SCHEDSCOPE_STREAM", "").strip(),
            stream_token=env.get("SCHEDSCOPE_STREAM_TOKEN") or None,
            metrics=env.get("SCHEDSCOPE_METRICS", "").strip(),
            queue=queue,
            metrics_token=env.get("SCHEDSCOPE_METRICS_TOKEN") or env.get("SCHEDSCOPE_STREAM_TOKEN") or None,
        )


# Set by the offline harness around building a scheduler (tracer.whatif.replay.recording_to);
# never in a server, where the environment decides.
_configured: ContextVar[RecorderConfig | None] = ContextVar("schedscope_recorder_config", default=None)


def current_config() -> RecorderConfig:
    return _configured.get() or RecorderConfig.from_env()


@contextmanager
def configured(config: RecorderConfig) -> Iterator[None]:
    """Tracing schedulers built inside this block record as `config` says."""
    token = _configured.set(config)
    try:
        yield
    finally:
        _configured.reset(token)


def trace_path_from_env() -> Path | None:
    """The trace path a scheduler built here would record to; `{pid}` is replaced (one file per engine)."""
    return current_config().trace


def _vllm_version() -> str | None:
    try:
        import vllm

        return str(getattr(vllm, "__version__", None))
    except Exception:
        return None


class Recorder:
    """Turns scheduler calls into trace records; every public method is exception-safe
    at the call site (the scheduler wrapper catches and counts)."""

    def __init__(
        self,
        writer: TraceWriter,
        config: dict[str, Any],
        *,
        policy: str,
        scheduler_cls: str,
        header_extra: dict[str, Any] | None = None,
    ):
        self.writer = writer
        self.config = config
        self.draft_slots = int(config.get("draft_slots") or 0)
        self.q = int(config.get("query_rows_per_req") or 0)
        self.target_cap = int(config.get("max_num_scheduled_tokens") or 0)
        self.input_cap = int(config.get("max_num_batched_tokens") or 0)
        self.buffer_cap = config.get("buffer_capacity")
        self.step = 0
        self._by_priority = config.get("scheduling_policy") == "priority"
        self.steps_built = 0
        self.errors = 0
        self._pending: OrderedDict[int, StepSnapshot] = OrderedDict()  # by id(SchedulerOutput)
        self._preempted: set[str] = set()  # ids preempted and not yet back
        # What the scheduler was told since the last schedule(), in order: arrivals,
        # aborts, drafts and model outputs. A replay re-tells it in the same order.
        self._inputs: list[SchedulerInput] = []
        self._preemptions: list[Preemption] = []  # this schedule()'s, by on_preempt
        self._prefix = _PrefixIndex()  # writer thread only
        self._closed = False
        self._fast_demand = True  # until the canary in _fast_demand_ok disagrees once
        # Output placeholders (async scheduling) are 0 for good under a synchronous scheduler.
        self._no_placeholders = not config.get("async_scheduling")
        writer.bind(self.encode)
        writer.emit(
            {
                "kind": schema.HEADER,
                "schema": schema.SCHEMA_VERSION,
                "schedscope_version": __version__,
                "vllm_version": _vllm_version(),
                "scheduler_cls": scheduler_cls,
                "policy": policy,
                "regime": regime_of(config) if policy == "stock" else policy,
                "start_time": time.time(),
                "t0": time.monotonic(),
                "pid": os.getpid(),
                "config": config,
                **(header_extra or {}),
            }
        )

    @classmethod
    def for_scheduler(
        cls,
        sched: Any,
        path: str | Path | None,
        *,
        policy: str = "stock",
        max_queue: int | None = None,
        taps: Sequence[Tap] = (),
        header: Mapping[str, Any] | None = None,
    ) -> Recorder:
        """A recorder writing to `path` (None: no file, e.g. stream only) and `taps`."""
        queue = max_queue or current_config().queue
        if path is None:
            sink = open(os.devnull, "ab")  # noqa: SIM115 - owned and closed by the writer
        else:
            path = Path(path)
            if path.exists():
                path.unlink()  # one run per file; `{pid}` in the path keeps engines apart
            sink = open_sink(path)
        # The Recorder binds its encoder; a plain file gets its born index, from a process beside.
        writer = TraceWriter(sink, max_queue=queue, taps=taps, index=IndexProcess.start(path))
        name = f"{type(sched).__module__}.{type(sched).__qualname__}"
        extra = dict(header) if header else None
        recorder = cls(
            writer, describe_scheduler(sched), policy=policy, scheduler_cls=name, header_extra=extra
        )
        if path is not None:  # a kill before close() leaves the footer's facts beside the trace
            writer.keep_footer(path.with_name(path.name + schema.KEPT_FOOTER_SUFFIX), recorder._footer)
        return recorder

    # -- scheduler thread: snapshots only ----------------------------------------------
    def before_schedule(self, sched: Any) -> Candidates:
        """Each candidate's demand (tokens still needed, before clipping).

        The hottest tracer code (every running request, every step): one Python
        loop, for the demands; the running requests themselves are kept as a C
        copy of the list, and their ids (immutable) are read on the writer thread.
        The token count is read without the `num_tokens_with_spec` property call
        when a canary says it is equivalent, and `num_output_placeholders` only
        where it can be non-zero: AsyncScheduler is the only code that raises it.
        """
        running = sched.running
        refs = list(running)
        if running:
            if self._fast_demand and not _fast_demand_ok(running[0]):
                self._fast_demand = False  # vLLM redefined the property: the plain path for good
            if self._no_placeholders and running[0].num_output_placeholders:
                self._no_placeholders = False  # they are in use after all: read them for good
        if self._fast_demand and self._no_placeholders:
            demand = [len(r._all_token_ids) + len(r.spec_token_ids) - r.num_computed_tokens for r in running]
        elif self._fast_demand:
            demand = [
                len(r._all_token_ids)
                + len(r.spec_token_ids)
                + r.num_output_placeholders
                - r.num_computed_tokens
                for r in running
            ]
        else:
            demand = [
                r.num_tokens_with_spec + r.num_output_placeholders - r.num_computed_tokens for r in running
            ]
        # The waiting loop drains KV-holding requests (e.g. async loads) first.
        queues = [q for q in (getattr(sched, "kv_holding_waiting", None), sched.waiting) if q]
        n_waiting = sum(map(len, queues))
        limit = schema.WAITING_DEMAND_LIMIT
        head = list(islice(chain.from_iterable(queues), limit))
        waiting = [(r.request_id, r.num_tokens - r.num_computed_tokens) for r in head]
        # Under priority scheduling the replay needs each arrival's priority.
        priority = {r.request_id: r.priority for r in head if r.priority} if self._by_priority else None
        return Candidates(
            running=refs,
            demand=demand,
            waiting=waiting,
            waiting_truncated=max(0, n_waiting - limit),
            priority=priority,
            waiting_refs=head,
            kv_free=_free_blocks(sched),
        )

    def after_schedule(
        self, sched: Any, out: Any, pre: Candidates | None, t_start: float, dt_ns: int
    ) -> None:
        self.step += 1
        cached = out.scheduled_cached_reqs
        resumed = getattr(cached, "resumed_req_ids", None)
        if resumed is None:  # older releases flagged resumption per entry
            flags = getattr(cached, "resumed_from_preemption", ()) or ()
            resumed = {rid for rid, f in zip(cached.req_ids, flags, strict=False) if f}
        resumed = set(resumed)
        new_ids = [r.req_id for r in out.scheduled_new_reqs]
        preempted = list(getattr(out, "preempted_req_ids", None) or ())
        finished = list(getattr(out, "finished_req_ids", None) or ())
        if self._preempted:
            # The V2 model runner (0.33 with Triton) re-sends resumed requests as new.
            resumed.update(rid for rid in new_ids if rid in self._preempted)
            self._preempted.difference_update(resumed)
            self._preempted.difference_update(finished)
        self._preempted.update(preempted)
        kv = getattr(sched, "kv_cache_manager", None)
        n_running, n_waiting = _request_counts(sched)
        # The facts a "why" needs (1.3): cheap reads; the admitted requests' computed tokens
        # (after schedule(), so the prefix-cache hit is that minus the tokens scheduled). A vLLM
        # that moved one of them costs those fields only, never the step.
        admitted = statuses = None
        try:
            if new_ids or resumed:
                ids = new_ids
                if resumed:
                    fresh = set(new_ids)
                    ids = new_ids + [r for r in resumed if r not in fresh]
                requests = sched.requests
                admitted = (ids, [requests[r].num_computed_tokens for r in ids])
            if pre is not None and n_waiting:
                statuses = [r.status for r in pre.waiting_refs]
        except Exception:
            self.fail("after schedule(): the why facts")
        preemptions = self._preemptions
        if preemptions:
            self._preemptions = []
        pause = getattr(sched, "_pause_state", 0)
        snap = StepSnapshot(
            step=self.step,
            t=t_start,
            dt_ns=dt_ns,
            total=out.total_num_scheduled_tokens,
            num_sched=dict(out.num_scheduled_tokens),
            new_ids=new_ids,
            cached_ids=list(cached.req_ids),
            resumed=resumed,
            spec=_spec_lengths(out),
            preempted=preempted,
            finished=finished,
            n_running=n_running,
            n_waiting=n_waiting,
            kv=float(getattr(kv, "usage", 0.0) or 0.0),
            candidates=pre,
            inputs=self._inputs,
            kv_free=(pre.kv_free, _free_blocks(sched)) if pre is not None else None,
            admitted=admitted,
            statuses=statuses,
            preemptions=preemptions or None,
            paused=getattr(pause, "name", str(pause)) if pause else None,
        )
        self._inputs = []
        self._pending[id(out)] = snap
        while len(self._pending) > MAX_PENDING:
            self.writer.emit(self._pending.popitem(last=False)[1])

    # -- scheduler thread: what the engine tells the scheduler between steps ------------
    def on_add(self, request: Any) -> None:
        """A request reached the scheduler: what a replay needs to re-create it."""
        hashes = getattr(request, "block_hashes", None)
        self._inputs.append(
            Arrival(
                rid=request.request_id,
                prompt=int(getattr(request, "num_prompt_tokens", 0) or 0),
                max_tokens=int(getattr(request, "max_tokens", 0) or 0),
                priority=int(getattr(request, "priority", 0) or 0),
                arrival=float(getattr(request, "arrival_time", 0.0) or 0.0),
                hashes=list(hashes) if hashes else None,
            )
        )

    def on_preempt(self, victim: Any, trigger: Any, free_before: int, lost: int, sched: Any) -> None:
        """_preempt_request() inside schedule(): who was evicted, for whom, and what it lost."""
        rid = getattr(trigger, "request_id", None)
        self._preemptions.append(Preemption(victim.request_id, rid, lost, free_before, _free_blocks(sched)))

    def on_finish(self, request_ids: Any, status: Any) -> None:
        """finish_requests() from outside the scheduler: a client abort, mostly."""
        if request_ids is None:
            ids = None
        elif isinstance(request_ids, str):
            ids = [request_ids]
        else:
            ids = list(request_ids)
        self._inputs.append(Abort(ids, str(getattr(status, "name", status))))

    def on_drafts(self, draft_token_ids: Any) -> None:
        """update_draft_token_ids(): how many drafts the proposer offered each request."""
        ids = list(getattr(draft_token_ids, "req_ids", None) or ())
        drafts = getattr(draft_token_ids, "draft_token_ids", None) or ()
        self._inputs.append(Drafts(ids, [len(d) for d in drafts]))

    def after_update(self, out: Any, runner_output: Any, result: Any = None) -> None:
        snap = self._pending.pop(id(out), None)
        hooks = getattr(runner_output, RUNNER_HOOKS_ATTR, None)
        if hooks:
            self.writer.emit({"kind": schema.HOOKS, "step": snap.step if snap else None, **hooks})
        if snap is None:
            self._inputs.append(Applied(-1))
            return
        step = snap.step
        self._inputs.append(Applied(step))
        if result:
            snap.ends = _ends(result)
        req_ids = getattr(runner_output, "req_ids", None) or ()
        sampled = getattr(runner_output, "sampled_token_ids", None)
        if isinstance(sampled, list) and len(sampled) == len(req_ids):
            # Flat copies (C loops); the writer thread zips them into the step's dict.
            snap.sampled = (list(req_ids), list(map(len, sampled)))
        emit = self.writer.emit
        for note in getattr(runner_output, RUNNER_NOTES_ATTR, None) or ():
            emit(RunnerPass(step, note))
        # Steps finish in order: an older step still pending will never get its update.
        while self._pending:
            key, oldest = next(iter(self._pending.items()))
            if oldest.step > step:
                break
            del self._pending[key]
            emit(oldest)
        emit(snap)

    def fail(self, where: str) -> None:
        """Called by the wrappers when tracer code raised: log once, keep serving."""
        self.errors += 1
        if self.errors == 1:
            logger.exception("schedscope: tracer error in %s; the server is unaffected", where)

    @property
    def closed(self) -> bool:
        return self._closed

    def close(self, timeout: float = 5.0) -> None:
        if self._closed:
            return
        self._closed = True
        for snap in self._pending.values():
            self.writer.emit(snap)
        self._pending.clear()
        self.writer.shutdown(timeout, last=self._footer)

    def _footer(self) -> dict[str, Any]:
        return {
            "kind": schema.FOOTER,
            "steps_written": self.steps_built,
            "records_dropped": self.writer.dropped,
            "errors": self.errors + self.writer.errors,
            "end_time": time.time(),
            "writer_failure": self.writer.failed,
        }

    # -- writer thread: build and encode -----------------------------------------------
    def encode(self, item: StepSnapshot | RunnerPass | dict[str, Any]) -> Record:
        """The writer's encoder: the record an item stands for, built and encoded."""
        if type(item) is StepSnapshot:
            record = self.build_step(item)
            return Record(schema.STEP, item.step, _dumps(record))
        if type(item) is RunnerPass:
            record = runner_record(item)
            return Record(schema.RUNNER, item.step, _dumps(record))
        if isinstance(item, dict):  # header, hooks and footer: built already
            return Record(item["kind"], item.get("step"), _dumps(item))
        raise TypeError(f"not a trace item: {type(item).__name__}")

    def build_step(self, snap: StepSnapshot) -> dict[str, Any]:
        step, t, dt_ns, total = snap.step, snap.t, snap.dt_ns, snap.total
        num_sched, new_ids, cached_ids, resumed = snap.num_sched, snap.new_ids, snap.cached_ids, snap.resumed
        spec, preempted, finished = snap.spec, snap.preempted, snap.finished
        n_running, n_waiting, kv = snap.n_running, snap.n_waiting, snap.kv
        sampled, inputs, ends = snap.sampled, snap.inputs, snap.ends
        cand = snap.candidates
        if cand is None:  # before_schedule failed: no demands this step
            running_refs, running_demand, waiting_pre, truncated, priority = (), (), (), 0, None
        else:
            running_refs, running_demand, waiting_pre = cand.running, cand.demand, cand.waiting
            truncated, priority = cand.waiting_truncated, cand.priority
        running_ids = [r.request_id for r in running_refs]  # fixed at construction: safe off-thread
        demand = dict(zip(running_ids, running_demand, strict=True))
        demand.update(waiting_pre)
        # Format 1.2: per-request fields as parallel arrays, built in C-level map() calls.
        tokens_of, spec_of, demand_of = num_sched.get, dict(zip(*spec, strict=True)).get, demand.get

        def group(ids: list[Any]) -> dict[str, list[Any]] | list[Any]:
            if not ids:
                return []  # an empty group: the same in 1.1 and 1.2
            return {
                "id": ids,
                "tokens": list(map(tokens_of, ids, repeat(0))),
                "spec": list(map(spec_of, ids, repeat(0))),
                "demand": list(map(demand_of, ids, repeat(-1))),
            }

        if resumed:
            new_group = [r for r in new_ids if r not in resumed]
            resumed_group = [r for r in (*new_ids, *cached_ids) if r in resumed]
            running_group = [r for r in cached_ids if r not in resumed]
        else:
            new_group, resumed_group, running_group = new_ids, [], cached_ids
        # The scheduled order: `sampled` and the drafts inputs' refs count positions in it.
        order = new_group + resumed_group + running_group if new_group or resumed_group else running_group
        n = len(num_sched)
        reserved = n * self.draft_slots
        input_used = total + reserved
        gone = set(preempted) if preempted else ()
        record: dict[str, Any] = {
            "kind": schema.STEP,
            "step": step,
            "t": t,
            "sched_us": dt_ns / 1000.0,
            "target": {"cap": self.target_cap, "used": total, "left": self.target_cap - total},
            "input": {
                "cap": self.input_cap,
                "used": input_used,
                "reserved": reserved,
                "left": self.input_cap - input_used,
            },
            "query": ({"per_req": self.q, "rows": self.q * n, "cap": self.buffer_cap} if self.q else None),
            "new": group(new_group),
            "resumed": group(resumed_group),
            "running": group(running_group),
            "preempted": preempted,
            "finished": finished,
            # Running requests left out of this step (budget spent, or nothing to do).
            "unscheduled": [
                [r, d]
                for r, d in zip(running_ids, running_demand, strict=True)
                if d > 0 and r not in num_sched and r not in gone
            ],
            "waiting_demand": [[r, d] for r, d in waiting_pre if r not in num_sched],
            "waiting_demand_truncated": truncated,
            "priority": priority or None,
            "num_waiting": n_waiting,
            "num_running": n_running,
            "kv_usage": round(kv, 6),
            "sampled": None if sampled is None else _aligned(order, *sampled),
            "inputs": self._input_entries(inputs, order),
            "ends": ends or None,
            **_why_fields(snap, num_sched),
        }
        self.steps_built += 1
        return record

    def _input_entries(self, events: list[SchedulerInput], order: list[Any]) -> list[list[Any]]:
        out: list[list[Any]] = []
        position: dict[Any, int] | None = None
        for event in events:
            kind = type(event)
            if kind is Applied:
                out.append(["u", event.step])
            elif kind is Arrival:
                rid, prompt, max_tokens, priority, arrival, hashes = event
                out.append(["a", rid, prompt, max_tokens, priority, arrival, self._prefix.add(rid, hashes)])
            elif kind is Drafts:
                ids = event.ids
                if order:
                    # A request this step schedules by its position in the scheduled order, any
                    # other (finished since its drafts were made) by its id.
                    if position is None:
                        position = dict(zip(order, range(len(order)), strict=True))
                    ids = list(map(position.get, ids, ids))
                out.append(["d", ids, event.counts])
            else:
                out.append(["x", event.ids, event.status])
        return out


class _PrefixIndex:
    """Which earlier request a new prompt shares its leading full KV blocks with.

    vLLM chains block hashes (each covers every token before it), so a prompt
    whose block i matches request X's block i matches X's first i+1 blocks: one
    (source id, block count) pair describes the whole shared prefix, and a
    replay re-creates the same prefix-cache structure from it. Bounded: the
    oldest hashes are forgotten past LIMIT (a prefix older than that is far
    likelier evicted than cached).
    """

    LIMIT = 1 << 20

    def __init__(self) -> None:
        self._owner: dict[Any, str] = {}

    def add(self, rid: str, hashes: list[Any] | None) -> list[Any] | None:
        if not hashes:
            return None
        owner = self._owner
        shared, source = 0, None
        for h in hashes:
            found = owner.get(h)
            if found is None:
                break
            shared, source = shared + 1, found
        for h in hashes[shared:]:
            owner[h] = rid
        if len(owner) > self.LIMIT:
            for h in list(islice(owner, len(owner) - self.LIMIT // 2)):
                del owner[h]
        return [source, shared] if shared else None


def _aligned(order: list[Any], ids: list[Any], counts: list[int]) -> list[int] | dict[Any, int]:
    """`sampled` in 1.2: the counts in the scheduled order when the model runner's requests
    are exactly the scheduled ones (always, in every trace seen so far), else `{id: n}`."""
    if ids == order:
        return counts
    by_id = dict(zip(ids, counts, strict=True))
    if len(by_id) == len(order):
        aligned = list(map(by_id.get, order))
        if None not in aligned:
            return aligned
    return by_id


def _ends(result: Any) -> dict[str, tuple[str, int]] | None:
    """{request id: (finish reason, tokens kept in this step)} from update_from_output's
    EngineCoreOutputs. A stop token ends a request mid-way through its sampled tokens;
    the tokens kept say where, so a replay stops it at the same token."""
    ends: dict[str, tuple[str, int]] = {}
    outputs = result.values() if isinstance(result, dict) else ()
    for eco in outputs:
        for o in getattr(eco, "outputs", None) or ():
            reason = getattr(o, "finish_reason", None)
            if reason is not None:
                name = str(getattr(reason, "name", reason)).lower()  # "stop", "length", "abort", …
                ends[o.request_id] = (name, len(getattr(o, "new_token_ids", None) or ()))
    return ends or None


def _spec_lengths(out: Any) -> tuple[list[str], list[int]]:
    """(ids, draft counts) of scheduled_spec_decode_tokens: lengths only, as flat lists
    (C loops), so the step keeps none of vLLM's per-request token lists alive."""
    spec = getattr(out, "scheduled_spec_decode_tokens", None) or {}
    return list(spec), list(map(len, spec.values()))


def _fast_demand_ok(request: Any) -> bool:
    """Canary for before_schedule's fast path: vLLM's `num_tokens_with_spec` property is
    `len(_all_token_ids) + len(spec_token_ids)` (0.32, 0.33); checked on one request a step."""
    try:
        return len(request._all_token_ids) + len(request.spec_token_ids) == request.num_tokens_with_spec
    except Exception:
        return False


def _free_blocks(sched: Any) -> int:
    """Free KV blocks in the scheduler's block pool; -1 when this vLLM does not say."""
    try:
        return int(sched.kv_cache_manager.block_pool.get_num_free_blocks())
    except Exception:
        return -1


def _why_fields(snap: StepSnapshot, num_sched: dict[str, int]) -> dict[str, Any]:
    """The 1.3 fields of a step record, built on the writer thread from the snapshot."""
    cached = None
    if snap.admitted is not None:
        ids, computed = snap.admitted
        hits = {rid: c - num_sched.get(rid, 0) for rid, c in zip(ids, computed, strict=True)}
        cached = {rid: h for rid, h in hits.items() if h > 0} or None
    status = None
    cand = snap.candidates
    if snap.statuses is not None and cand is not None:
        # Only the states in which the waiting loop skips a request: plain WAITING (and
        # PREEMPTED) requests wait in line, RUNNING ones were admitted.
        pairs = zip(cand.waiting_refs, snap.statuses, strict=True)
        named = ((r.request_id, getattr(st, "name", str(st))) for r, st in pairs)
        status = {rid: name for rid, name in named if name.startswith("WAITING_FOR")} or None
    kv_free = snap.kv_free
    return {
        "kv_free": list(kv_free) if kv_free is not None and min(kv_free) >= 0 else None,
        "cached": cached,
        "waiting_status": status,
        "preemptions": [list(p) for p in snap.preemptions] if snap.preemptions else None,
        "paused": snap.paused,
    }


def _request_counts(sched: Any) -> tuple[int, int]:
    """(running, waiting), waiting including KV-holding requests where vLLM has them."""
    counts = getattr(sched, "get_request_counts", None)
    if counts is not None:
        running, waiting = counts()
        return int(running), int(waiting)
    return len(sched.running), len(sched.waiting)


def runner_record(item: RunnerPass) -> dict[str, Any]:
    note = item.note
    record = {
        "kind": schema.RUNNER,
        "step": item.step,
        "pass": note.pass_,
        "rows": note.rows,
        "cap": note.cap,
        "reqs": note.reqs,
    }
    if note.notes_padding:  # the V2 runner hook notes the rows after CUDA-graph/DP padding too
        record["padded"] = note.padded
    return record


def _dumps(record: dict[str, Any]) -> bytes:
    return orjson.dumps(record, option=orjson.OPT_APPEND_NEWLINE | orjson.OPT_NON_STR_KEYS)
