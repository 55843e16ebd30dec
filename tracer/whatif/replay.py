"""What-if replay: re-run a workload through vLLM's real Scheduler under a policy.

The replay plays the engine's part. It gives the scheduler the inputs of the
recorded run in their recorded order (arrivals, aborts, drafts, model outputs;
see tracer.whatif.workload) and answers each scheduled step with the model output the
workload says: tokens sampled per request, drafts accepted, a stop token where
the request stopped. Under the recorded policy and scheduler class this re-makes
the run step for step; `check_fidelity` proves it for a given trace. Under
another policy or configuration the same inputs meet a different schedule, and
the per-request behaviour is looked up by output position instead.

Its output is an ordinary trace whose header names the policy. A timed replay
(`clock=`) prices each step with a StepClock (tracer.analysis.clock) and writes the
predicted time into each step's `t`; with `arrivals="time"` requests arrive at
their recorded times on that clock rather than before their recorded step.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tracer.analysis.timing import FeatureBuilder, TimingModel
from tracer.whatif.offline import (
    SAMPLED_TOKEN,
    STOP_TOKEN,
    EngineSpec,
    RequestSpec,
    make_request,
    prompt_tokens,
    runner_output,
    verifiable_drafts,
)
from tracer.whatif.workload import Event, Workload, WorkloadError

if TYPE_CHECKING:
    from tracer.analysis.clock import StepClock

REPLAYABLE_METHODS = (None, "ngram", "draft_model", "dflash", "dspark")
ARRIVALS = ("step", "time")


class ReplayTimer:
    """A timed replay's clock (seconds, the recording's monotonic clock). The tracing
    scheduler reads it as each step's `t`; it advances by a step's predicted duration
    when that step's output is applied, so under async scheduling the interval a step
    fills is the one tracer.analysis.timing pairs it with (duration_lag)."""

    def __init__(
        self, model: TimingModel, start: float, query_rows_per_req: int = 0, warmup_ms: float = 0.0
    ) -> None:
        self.model = model
        self.now = start
        self.q = query_rows_per_req
        self.builder = FeatureBuilder()  # fed in step order: outputs are applied in order
        self.warmup_s = warmup_ms / 1e3  # added once, to the first step that ran a forward pass

    def __call__(self) -> float:
        return self.now

    def advance(self, out: Any, sampled: dict[str, int]) -> None:
        self.now += self.model.predict(self.builder.add(_step_record(out, sampled, self.q))) / 1e3
        if self.warmup_s and out.total_num_scheduled_tokens > 0:
            self.now += self.warmup_s
            self.warmup_s = 0.0


def _step_record(out: Any, sampled: dict[str, int], q: int) -> dict[str, Any]:
    """The step record fields FeatureBuilder reads, from a SchedulerOutput (as the recorder writes them)."""
    n = out.num_scheduled_tokens
    spec = out.scheduled_spec_decode_tokens
    cached = out.scheduled_cached_reqs
    resumed = _resumed(out)
    new_ids = [r.req_id for r in out.scheduled_new_reqs]

    def entries(ids: Any) -> list[list[Any]]:
        return [[r, n.get(r, 0), len(spec.get(r) or ())] for r in ids]

    return {
        "new": entries(r for r in new_ids if r not in resumed),
        "resumed": entries(r for r in (*new_ids, *cached.req_ids) if r in resumed),
        "running": entries(r for r in cached.req_ids if r not in resumed),
        "preempted": list(getattr(out, "preempted_req_ids", None) or ()),
        "finished": list(getattr(out, "finished_req_ids", None) or ()),
        "sampled": sampled,
        "query": {"rows": q * len(n)} if q else None,
    }


class Replayer:
    """Steps one scheduler as EngineCore does, with the workload's inputs and outputs."""

    def __init__(
        self,
        sched: Any,
        workload: Workload,
        *,
        num_drafts: int,
        is_async: bool,
        timer: ReplayTimer | None = None,
        arrive_at: Callable[[RequestSpec], float] | None = None,
    ) -> None:
        self.sched = sched
        # Timed replays: the clock, and (arrivals by time) each request's arrival on it.
        self.timer = timer
        self.arrive_at = arrive_at
        self.aborts: deque[tuple[float, Any, str]] = deque()
        self.w = workload
        self.num_drafts = num_drafts
        self.is_async = is_async
        self.block_size = int(getattr(sched, "block_size", workload.engine.block_size))
        self.clock = 0  # the recorded step being replayed (1-based)
        self.steps = 0  # schedule() calls made
        # Scheduled and not yet updated, oldest first: (clock, output, prefill flags).
        self.inflight: deque[tuple[int, Any, dict[str, bool]]] = deque()
        self.batches: dict[int, list[str]] = {}  # clock -> requests of that batch (for drafts)
        self.emitted: dict[str, int] = {}  # tokens sampled so far per request
        self.sampling_steps: dict[str, int] = {}
        self._owners: dict[str, list[tuple[int | None, str]]] = {}

    # -- inputs -------------------------------------------------------------------------
    def add(self, spec: RequestSpec) -> None:
        owners: list[tuple[int | None, str]] = [(None, spec.id)]
        if spec.prefix is not None:
            source, blocks = spec.prefix
            base = self._owners.get(source)
            if base is not None:
                owners = _truncate(base, blocks) + owners
        self._owners[spec.id] = owners
        arrival = spec.arrival_time if spec.arrival_time is not None else float(spec.arrival_step)
        prompt = prompt_tokens(owners, spec.prompt_len, self.block_size)
        request = make_request(
            spec.id,
            spec.prompt_len,
            spec.max_tokens,
            priority=spec.priority,
            arrival_time=arrival,
            prompt=prompt,
            block_size=self.block_size,
        )
        self.sched.add_request(request)

    def abort(self, ids: list[str] | None, status: str) -> None:
        from vllm.v1.request import RequestStatus

        self.sched.finish_requests(ids, RequestStatus[status])

    # -- the model's part ----------------------------------------------------------------
    def schedule(self) -> None:
        out = self.sched.schedule()
        self.steps += 1
        requests = self.sched.requests
        prefill = {}
        for rid in out.num_scheduled_tokens:
            req = requests[rid]
            flag = getattr(req, "is_prefill_chunk", None)
            prefill[rid] = bool(req.num_computed_tokens < req.num_tokens) if flag is None else bool(flag)
        self.inflight.append((self.clock, out, prefill))
        self.batches[self.clock] = list(out.num_scheduled_tokens)

    def update(self, upto: int | None = None) -> list[int]:
        """Apply the oldest in-flight output (through clock `upto` when given, in order);
        the clocks applied."""
        done: list[int] = []
        while self.inflight:
            clock, out, prefill = self.inflight[0]
            if upto is not None and clock > upto:
                return done
            self.inflight.popleft()
            done.append(clock)
            output = self._model_output(out, prefill)
            self.sched.update_from_output(out, output)
            if self.timer is not None:
                counts = map(len, output.sampled_token_ids)
                self.timer.advance(out, dict(zip(output.req_ids, counts, strict=True)))
            if upto is None:
                return done
        return done

    def _model_output(self, out: Any, prefill: dict[str, bool]) -> Any:
        # Per scheduled request, every step: kept to plain dict lookups (bench/p6_replay.py).
        req_ids = list(out.num_scheduled_tokens)
        spec = out.scheduled_spec_decode_tokens
        emitted, stops, accepted = self.emitted, self.w.stops, self._accepted
        every_step = bool(self.w.accepted_in_order)  # its cursor counts steps without drafts too
        # vLLM's AsyncScheduler schedules every draft as a -1 placeholder (the worker fills in
        # the drafter's ids), so there a padded admission is told by its entry: a request
        # admitted or resumed in this step has no drafts from the step before.
        admitted = _admitted(out) if self.is_async else None
        sampled: list[list[int]] = []
        append = sampled.append
        for rid in req_ids:
            if prefill[rid]:
                append([])
                continue
            drafts = spec.get(rid)
            at = emitted.get(rid, 0)
            # A padded admission's placeholder drafts are never accepted: what the request
            # accepted at this position in the recording (a real draft there, or none) does
            # not carry over to them.
            filled = admitted is not None and rid not in admitted  # async: the worker's ids, real
            d = len(drafts or ()) if filled else verifiable_drafts(drafts)
            n = 1 + max(0, min(d, accepted(rid, at, d))) if d or every_step else 1
            tokens = [SAMPLED_TOKEN] * n
            stop = stops.get(rid)
            if stop is not None and at < stop <= at + n:
                tokens[stop - at - 1] = STOP_TOKEN
            emitted[rid] = at + n
            append(tokens)
        return runner_output(req_ids, sampled)

    def _accepted(self, rid: str, at: int, drafts: int) -> int:
        w = self.w
        found = w.accepted.lookup(rid, at)
        value = None
        if found is not None:
            value, floor = found
            if floor and drafts > value:
                # It accepted all it verified there, fewer drafts than it has now: the rest up to
                # the recorded K were never verified, so they go as the recording's drafts went
                # (_unseen); beyond it (a larger --num-speculative-tokens) never proposed: none.
                proposed = min(drafts, w.engine.num_speculative_tokens)
                return value + self._unseen(max(0, proposed - value))
        if value is None and rid in w.accepted_in_order:
            # Synthetic workloads list acceptance per sampling step, in order.
            i = self.sampling_steps.get(rid, 0)
            self.sampling_steps[rid] = i + 1
            seq = w.accepted_in_order[rid]
            value = seq[i] if i < len(seq) else None
        if value is None:  # never seen verifying drafts: as the recording's others
            return self._unseen(drafts)
        return value

    def _unseen(self, drafts: int) -> int:
        """Of `drafts` no recorded step verified, how many are accepted: the recording's share."""
        w = self.w
        if w.accept_rate is not None:
            return int(w.accept_rate * drafts + 0.5)
        return drafts if w.accept_default == "all" else 0

    def propose(self, clock: int) -> None:
        """The drafter's part after a step: drafts for each request of that batch."""
        from vllm.v1.outputs import DraftTokenIds

        ids = self.batches.pop(clock, [])  # finished ones too: the scheduler skips them
        if not ids:
            return
        table = self.w.drafts
        counts = []
        for rid in ids:
            # Without recorded drafts: K every time; with them, what the request was
            # offered at this output position (none if it never was).
            n = self.num_drafts if table is None else table.get(rid, self.emitted.get(rid, 0)) or 0
            counts.append(min(n, self.num_drafts))
        drafts = [[SAMPLED_TOKEN] * n for n in counts]
        self.sched.update_draft_token_ids(DraftTokenIds(req_ids=ids, draft_token_ids=drafts))

    # -- the engine loop ---------------------------------------------------------------
    def run(self, max_steps: int) -> None:
        if self.arrive_at is not None:  # arrivals (and aborts) by time: no lock step with the log
            assert self.timer is not None
            self.aborts = deque(sorted(self.w.abort_times(), key=lambda a: a[0]))
            self._run_engine(sorted(self.w.requests, key=self.arrive_at), max_steps)
        elif self.w.log is not None:
            self._run_log(self.w.log, max_steps)
            self._run_engine([], max_steps)
        else:
            pending = sorted(self.w.requests, key=lambda r: r.arrival_step)
            self._run_engine(pending, max_steps)

    def _run_log(self, log: list[list[Event]], max_steps: int) -> None:
        """Lock step with the recording: each step's inputs in their order, then schedule()."""
        for clock, events in enumerate(log, 1):
            self.clock = clock
            for event in events:
                kind = event[0]
                if kind == "a":
                    self._wait_if_idle(clock)
                    self.add(self.w.request(event[1]))
                elif kind == "x":
                    self.abort(event[1], event[2])
                elif kind == "u":
                    for done in self.update(upto=event[1]):
                        # The recording ran no model in that step, so it logged no drafts
                        # after it; where this replay's batch there did run (another
                        # policy), a synchronous engine's post_step proposes for it.
                        if done in self.w.unrun and self.num_drafts and not self.is_async:
                            self.propose(done)
                elif kind == "d" and self.num_drafts and not self.is_async:
                    self.propose(event[1])
            if self.steps >= max_steps:
                return
            if self.sched.has_requests():
                self.schedule()

    def _run_engine(self, pending: list[RequestSpec], max_steps: int) -> None:
        """EngineCore's own loop: step() when synchronous, step_with_batch_queue() (two
        batches in flight) when asynchronous; arrivals land before their step."""
        queue_size = 2 if self.is_async else 1
        while len(self.inflight) >= queue_size:  # finish the engine call the log ended in
            self._update_oldest()
        pending_q = deque(pending)
        timer, arrive_at = self.timer, self.arrive_at
        while self.steps < max_steps:
            upcoming = self.clock + 1
            if arrive_at is None:
                while pending_q and pending_q[0].arrival_step <= upcoming:
                    self.add(pending_q.popleft())
            else:
                assert timer is not None
                while pending_q and arrive_at(pending_q[0]) <= timer.now:
                    self.add(pending_q.popleft())
                while self.aborts and self.aborts[0][0] <= timer.now:
                    _, ids, status = self.aborts.popleft()
                    self.abort(ids, status)
            has_requests = self.sched.has_requests()
            if not has_requests and not self.inflight:
                if not pending_q:
                    return
                if arrive_at is not None:
                    assert timer is not None
                    timer.now = max(timer.now, arrive_at(pending_q[0]))  # idle until it arrives
                else:
                    self.clock = pending_q[0].arrival_step - 1  # idle until the next arrival
                    self._wait_if_idle(pending_q[0].arrival_step)
                continue
            if has_requests:
                self.clock = upcoming
                self.schedule()
                out = self.inflight[-1][1]
                if len(self.inflight) < queue_size and (
                    out.total_num_scheduled_tokens > 0 or self.sched.has_requests()
                ):
                    continue  # the batch queue is not full: schedule the next batch first
            self._update_oldest()
        while self.inflight:
            self._update_oldest()

    def _wait_if_idle(self, step: int) -> None:
        """Arrivals by step, timed: where the recording waited for requests before `step`
        (an idle gap), an engine that ran dry here too waits as long (Workload.idle_waits)."""
        wait = self.w.idle_waits.pop(step, 0.0)
        if self.timer is not None and not self.inflight and not self.sched.has_requests():
            self.timer.now += wait

    def _update_oldest(self) -> None:
        clock, out, _ = self.inflight[0]
        self.update()
        # post_step(): the drafter's proposals reach a synchronous scheduler after a step
        # that ran the model; an asynchronous one gets them inside the worker.
        if self.num_drafts and not self.is_async and out.total_num_scheduled_tokens > 0:
            self.propose(clock)
        else:
            self.batches.pop(clock, None)


def _resumed(out: Any) -> set[str]:
    """Requests a SchedulerOutput resumes from preemption."""
    cached = out.scheduled_cached_reqs
    resumed = getattr(cached, "resumed_req_ids", None)
    if resumed is None:  # older releases flagged resumption per entry
        flags = getattr(cached, "resumed_from_preemption", ()) or ()
        return {rid for rid, f in zip(cached.req_ids, flags, strict=False) if f}
    return set(resumed)


def _admitted(out: Any) -> set[str]:
    """Requests a SchedulerOutput admits or resumes (not those that kept running)."""
    return {r.req_id for r in out.scheduled_new_reqs} | _resumed(out)


def _truncate(owners: list[tuple[int | None, str]], blocks: int) -> list[tuple[int | None, str]]:
    """The first `blocks` blocks of a prompt's owner segments."""
    out: list[tuple[int | None, str]] = []
    start = 0
    for end, owner in owners:
        stop = blocks if end is None else min(end, blocks)
        if stop > start:
            out.append((stop, owner))
        start = stop
        if stop >= blocks:
            break
    return out


@contextmanager
def recording_to(path: Path, header: dict[str, Any] | None = None) -> Iterator[None]:
    """Tracing schedulers built in this block record to `path` (with extra header fields),
    whatever the environment says: no stream, no metrics, nothing changed in os.environ."""
    from tracer.record.config import RecorderConfig, configured

    with configured(RecorderConfig(trace=Path(path), header=dict(header or {}))):
        yield


def replay(
    workload: Workload,
    policy: str,
    out: str | Path,
    *,
    max_steps: int = 1_000_000,
    async_scheduling: bool | None = None,
    header: dict[str, Any] | None = None,
    clock: StepClock | None = None,
    arrivals: str = "step",
    **overrides: Any,
) -> Path:
    """Run `workload` through vLLM's Scheduler under `policy`; write the trace to `out`.

    `overrides` replace EngineSpec fields (max_num_batched_tokens, method, …);
    `async_scheduling` defaults to the recorded scheduler class's. With `clock`, each
    step's `t` is the predicted time (starting at the recording's first step) and the
    header says so (`replay.timed`, `replay.clock`, the header's own `replay.clock` if given);
    `arrivals="time"` needs a clock.
    """
    if arrivals not in ARRIVALS:
        raise WorkloadError(f"{workload.source}: arrivals must be one of {ARRIVALS}, not {arrivals!r}")
    if arrivals == "time":
        if clock is None:
            raise WorkloadError(f"{workload.source}: --arrivals time needs a timed replay (a clock)")
        workload.check_arrival_times()
    header = dict(header or {})
    if clock is not None:
        info = dict(header.get("replay") or {})
        # The caller may give the clock's block worded (tracer.render.clock.clock_document: a
        # refusal kept as its sentence); it stays last, where the header has always had it.
        info.update(timed=True, arrivals=arrivals, clock=info.pop("clock", None) or clock.to_dict())
        header["replay"] = info
        # The replay's `t` share the recording's clock: keep its anchors.
        if workload.start_time is not None and workload.t0 is not None:
            header.update(start_time=workload.start_time, t0=workload.t0)
    from tracer.policies import scheduler_class
    from tracer.whatif.offline import build_scheduler

    engine: EngineSpec = replace(workload.engine, **{k: v for k, v in overrides.items() if v is not None})
    if engine.method not in REPLAYABLE_METHODS:
        raise WorkloadError(
            f"{workload.source}: replay cannot configure method {engine.method!r} offline; "
            f"use one of {', '.join(str(m) for m in REPLAYABLE_METHODS)} (--method)"
        )
    is_async = workload.async_scheduling if async_scheduling is None else async_scheduling
    out = Path(out)
    with recording_to(out, header):
        sched = build_scheduler(engine, scheduler_class(policy, async_scheduling=is_async))
    try:
        k = engine.num_speculative_tokens if engine.method else 0
        timer = None
        if clock is not None:
            rec = getattr(sched, "_schedscope", None)
            start = workload.step_times[0] if workload.step_times else 0.0
            timer = ReplayTimer(clock.model, start, int(getattr(rec, "q", 0) or 0), clock.warmup_ms or 0.0)
            sched._schedscope_clock = timer  # the tracing scheduler's `t` for each step
        arrive_at = workload.engine_clock if arrivals == "time" else None
        Replayer(sched, workload, num_drafts=k, is_async=is_async, timer=timer, arrive_at=arrive_at).run(
            max_steps
        )
    finally:
        sched.shutdown()
    return out
