"""The recorder: cheap snapshots on the scheduler thread, records built elsewhere.

Data flows one way: vLLM -> Recorder.before/after_schedule (the fields of a `Candidates` and
a `StepSnapshot` in plain lists: ints, ids and flat lists) -> the writer's queue -> the encoder
(tracer.record.encoder), on the writer thread or in the trace process
(tracer.record.shipper) -> a `Record` (kind, step, orjson line).

A step's record waits for its update_from_output() so it can carry the tokens
each request sampled (accepted drafts + 1); runner records join it by step.
No vLLM import happens here: everything is read off the objects vLLM passes in.

Which thread runs what: the scheduler thread (EngineCore's) builds the Recorder (and its
header), runs every hook (`before_schedule` to `on_drafts`, and `fail`) and, at shutdown,
`close`. `footer_facts` runs on the writer's or the shipper's thread too, which keeps the
footer's facts current beside the trace. What a server configures is `tracer.record.config`;
making a Recorder for a scheduler (its writer or shipper, its file) is `tracer.record.wiring`.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Iterable
from itertools import chain, islice
from typing import TYPE_CHECKING, Any

from tracer import __version__
from tracer.record.encoder import StepEncoder, TracerCost, footer
from tracer.record.engine_config import regime_of
from tracer.record.snapshot import (
    ENDS,
    KV_FREE,
    LAZY_BACKLOG,
    RUNNER_HOOKS_ATTR,
    RUNNER_NOTES_ATTR,
    SAMPLED,
    WAITING_REFS,
    Abort,
    Arrival,
    Drafts,
    Preemption,
    RunnerPass,
    SchedulerInput,
    Uncounted,
)
from tracer.record.writer import TraceWriter
from tracer.trace import schema

if TYPE_CHECKING:
    from tracer.record.shipper import TraceShipper

logger = logging.getLogger("schedscope.recorder")

# A step whose update_from_output never arrives is written without outcomes
# once this many newer steps are pending (async scheduling keeps one or two), or at once
# when a newer SchedulerOutput gets its output's id (the address of one dropped and freed).
MAX_PENDING = 16


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
        writer: TraceWriter | TraceShipper,
        config: dict[str, Any],
        *,
        policy: str,
        scheduler_cls: str,
        header_extra: dict[str, Any] | None = None,
    ):
        self.writer = writer
        self.config = config
        # A writer thread here encodes with this recorder's encoder; the trace process has its own.
        self.encoder = StepEncoder(config) if isinstance(writer, TraceWriter) else None
        if self.encoder is not None:
            writer.bind(self.encoder.encode)  # type: ignore[union-attr]
        self.step = 0
        self._by_priority = config.get("scheduling_policy") == "priority"
        self.errors = 0
        # Nanoseconds the scheduler thread spent in this recorder's hooks (the scheduler
        # wrappers add them up): the footer's `hooks_s`.
        self.hooks_ns = 0
        # Steps waiting for their update_from_output(), by id(SchedulerOutput), oldest first.
        self._pending: dict[int, list[Any]] = {}
        self._preempted: set[str] = set()  # ids preempted and not yet back
        # What the scheduler was told since the last schedule(), in order: arrivals,
        # aborts, drafts and model outputs. A replay re-tells it in the same order.
        self._inputs: list[SchedulerInput] = []
        self._preemptions: list[Preemption] = []  # this schedule()'s, by on_preempt
        self._closed = False
        self._fast_demand = True  # until the canary in _fast_demand_ok disagrees once
        # Output placeholders (async scheduling) are 0 for good under a synchronous scheduler.
        self._no_placeholders = not config.get("async_scheduling")
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

    # -- scheduler thread: snapshots only ----------------------------------------------
    def before_schedule(self, sched: Any) -> list[Any]:
        """Each candidate's demand (tokens still needed, before clipping): a `Candidates`'
        fields, in a list.

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
        holding, queue = getattr(sched, "kv_holding_waiting", None), sched.waiting
        head: list[Any] = []
        waiting: list[tuple[str, int]] = []
        truncated, priority = 0, None
        if holding or queue:
            queues = [q for q in (holding, queue) if q]
            limit = schema.WAITING_DEMAND_LIMIT
            truncated = max(0, sum(map(len, queues)) - limit)
            head = list(islice(chain.from_iterable(queues), limit))
            waiting = [(r.request_id, r.num_tokens - r.num_computed_tokens) for r in head]
            # Under priority scheduling the replay needs each arrival's priority.
            if self._by_priority:
                priority = {r.request_id: r.priority for r in head if r.priority}
        # Candidates' fields, in order (tracer.record.snapshot).
        return [refs, demand, waiting, truncated, priority, head, free_blocks(sched)]

    def after_schedule(self, sched: Any, out: Any, pre: list[Any] | None, t_start: float, dt_ns: int) -> None:
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
                statuses = [r.status for r in pre[WAITING_REFS]]
        except Exception:
            self.fail("after schedule(): the why facts")
        preemptions = self._preemptions
        if preemptions:
            self._preemptions = []
        pause = getattr(sched, "_pause_state", 0)
        spec = getattr(out, "scheduled_spec_decode_tokens", None) or {}
        # The dict is copied now: the GPU n-gram proposer edits it later.
        drafts = self._token_counts(list(spec), spec.values())
        # StepSnapshot's fields, in order (tracer.record.snapshot).
        snap = [
            self.step,
            t_start,
            dt_ns,
            out.total_num_scheduled_tokens,
            dict(out.num_scheduled_tokens),
            new_ids,
            list(cached.req_ids),
            resumed,
            drafts,
            preempted,
            finished,
            n_running,
            n_waiting,
            float(getattr(getattr(sched, "kv_cache_manager", None), "usage", 0.0) or 0.0),
            pre,
            self._inputs,
            (pre[KV_FREE], free_blocks(sched)) if pre is not None else None,
            admitted,
            statuses,
            preemptions or None,
            getattr(pause, "name", str(pause)) if pause else None,
            None,  # sampled and ends: after_update()
            None,
            False,  # portable
        ]
        self._inputs = []
        pending = self._pending
        key = id(out)
        if key in pending:
            # That step's output was dropped without its update (its address is this one's
            # now), so no update will come: it and every older step are written as they are.
            self._emit_through(pending[key][0])
        pending[key] = snap
        if len(pending) > MAX_PENDING:
            self.writer.emit(pending.pop(next(iter(pending))))

    def _token_counts(self, ids: list[str], lists: Iterable[Any]) -> tuple[list[str], list[int]] | Uncounted:
        """(ids, each list's length): vLLM's lists kept uncounted (a flat copy) for the writer
        side to count while it keeps up (snapshot.Uncounted), counted here past a backlog, so
        a backlog never holds them alive."""
        if self.writer.backlog < LAZY_BACKLOG:
            return Uncounted(ids, list(lists))
        return ids, list(map(len, lists))

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
        self._preemptions.append(Preemption(victim.request_id, rid, lost, free_before, free_blocks(sched)))

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
        # The proposer's lists become the requests' drafts, which vLLM replaces, never edits.
        counts = self._token_counts(ids, drafts)
        self._inputs.append(Drafts(ids, counts if type(counts) is Uncounted else counts[1]))

    def after_update(self, out: Any, runner_output: Any, result: Any = None) -> None:
        snap = self._pending.pop(id(out), None)
        hooks = getattr(runner_output, RUNNER_HOOKS_ATTR, None)
        if hooks:
            self.writer.emit({"kind": schema.HOOKS, "step": snap[0] if snap else None, **hooks})
        if snap is None:
            self._inputs.append(-1)  # an output applied, of a step not traced
            return
        step = snap[0]
        self._inputs.append(step)
        if result:
            snap[ENDS] = _ends(result)
        req_ids = getattr(runner_output, "req_ids", None) or ()
        sampled = getattr(runner_output, "sampled_token_ids", None)
        if isinstance(sampled, list) and len(sampled) == len(req_ids):
            # The stop check trimmed the lists already; the encoder zips the counts into the record.
            snap[SAMPLED] = self._token_counts(list(req_ids), sampled)
        for note in getattr(runner_output, RUNNER_NOTES_ATTR, None) or ():
            self.writer.emit(RunnerPass(step, note))
        # Steps finish in order: an older step still pending will never get its update.
        self._emit_through(step)
        self.writer.emit(snap)

    def _emit_through(self, step: int) -> None:
        """Write every pending step up to `step`, oldest first, without waiting any longer for
        their updates (pending steps are in step order)."""
        pending, emit = self._pending, self.writer.emit
        while pending:
            key = next(iter(pending))
            if pending[key][0] > step:
                break
            emit(pending.pop(key))

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
        self.writer.shutdown(timeout, last=self.footer_facts)

    def footer_facts(self) -> dict[str, Any]:
        """The footer as of now; through a shipper, this side's part of it (the trace process
        counts the steps and adds its own drops and errors)."""
        return footer(
            steps=self.encoder.steps_built if self.encoder is not None else 0,
            dropped=self.writer.dropped,
            errors=self.errors + self.writer.errors,
            failure=self.writer.failed,
            cost=TracerCost(self.hooks_ns / 1e9, self.writer.cpu_s),
        )


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


def _fast_demand_ok(request: Any) -> bool:
    """Canary for before_schedule's fast path: vLLM's `num_tokens_with_spec` property is
    `len(_all_token_ids) + len(spec_token_ids)` (0.32, 0.33); checked on one request a step."""
    try:
        return len(request._all_token_ids) + len(request.spec_token_ids) == request.num_tokens_with_spec
    except Exception:
        return False


def free_blocks(sched: Any) -> int:
    """Free KV blocks in the scheduler's block pool; -1 when this vLLM does not say."""
    try:
        return int(sched.kv_cache_manager.block_pool.get_num_free_blocks())
    except Exception:
        return -1


def _request_counts(sched: Any) -> tuple[int, int]:
    """(running, waiting), waiting including KV-holding requests where vLLM has them."""
    counts = getattr(sched, "get_request_counts", None)
    if counts is not None:
        running, waiting = counts()
        return int(running), int(waiting)
    return len(sched.running), len(sched.waiting)
