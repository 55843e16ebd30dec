"""Counterfactual probes: settle a "why" on vLLM's real Scheduler.

A reason names the constraint that kept a request waiting (or clipped it). To prove it,
the scheduler's state right before that step's `schedule()` is deep-copied, ONE constraint
is relaxed on the copy, and the copy's `schedule()` runs: the request must then be admitted
(or get more tokens); relaxing any other single constraint must leave it held back. The
original scheduler is untouched and keeps replaying.

The state comes from the identity replay (tracer.whatif.replay.Replayer), which re-makes
a recorded run step for step; every probed step's real schedule() is checked against the
record, so a probe never runs on a state the recording did not have.

Relaxations (RELAXATIONS), one per constraint:
- `seqs`: the admission cap (max_num_seqs, 0.33's max_num_active_seqs) raised by the number
  of waiting requests;
- `kv`: free KV blocks added to the block pool, enough for every request's whole demand
  and the KV watermark's blocks;
- `budget`: the token budget (target and input alike: without draft slots they are equal
  and spent together) raised by every request's whole demand and reservations;
- `draft_slots`: no draft slots reserved per scheduled request;
- `long_prefill`: the long-prefill threshold off;
- `chunked`: chunked prefill on.

vLLM is imported lazily: tracer stays importable without it.
"""

from __future__ import annotations

import copy
import dataclasses
import math
import sys
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

from tracer.analysis.reasons import EXACT, UNKNOWN
from tracer.trace.errors import TraceError

if TYPE_CHECKING:
    from tracer.analysis.request_story import RequestStory
    from tracer.analysis.why import Cause, StepWhy
    from tracer.trace.trace_type import Trace

RELAXATIONS: Final = ("seqs", "kv", "budget", "draft_slots", "long_prefill", "chunked")

# The relaxations that relax each reason's constraint, the first being its own. A reason
# is proven when its own relaxation admits the request and no relaxation outside this
# set does (raising the budget also relaxes the input budget, padding and chunked-off).
RELAXES: Final[dict[str, tuple[str, ...]]] = {
    "max_num_seqs": ("seqs",),
    "max_num_active_seqs": ("seqs",),
    "kv_blocks": ("kv",),
    "preemption": ("kv",),
    "target_budget": ("budget",),
    "input_budget": ("draft_slots", "budget"),
    "spec_padding": ("budget", "draft_slots"),
    "long_prefill": ("long_prefill",),
    "chunked_prefill_off": ("chunked", "budget"),
}

# A story's held-back steps probed by settle_story, at most (the rest keep their reasons).
STORY_PROBE_LIMIT: Final = 200
_STACK = 512 * 1024 * 1024  # the deep copy's thread stack: the KV free list is a linked list
_RECURSION = 1_000_000


class ProbeError(TraceError):
    """The replay cannot give a probe the recorded state (it diverged, or cannot run): a
    TraceError, so `why --exact` reports it as an error, not a traceback."""


@dataclass(frozen=True)
class Change:
    """What one relaxation changed on a copy: which (one of RELAXATIONS, or ASYNC_DONE: the
    state read, nothing changed) and, for a raised limit, by how much (`seqs`: admission
    slots, `kv`: free blocks, `budget`: tokens). tracer.render.why.change_text words it."""

    relaxation: str
    by: int | None = None


@dataclass(frozen=True)
class Outcome:
    """What a relaxed copy's schedule() did."""

    relaxation: str
    scheduled: dict[str, int]  # request id -> tokens scheduled
    preempted: frozenset[str]
    change: tuple[Change, ...]  # what was relaxed: one Change per part of `relaxation`

    def admits(self, rid: str, tokens: int = 0) -> bool:
        """The request got more than `tokens` (0: it was admitted at all)."""
        return self.scheduled.get(rid, 0) > tokens


StepProbes = dict[str, Outcome]  # relaxation -> outcome, for the applicable relaxations


# -- the copy ---------------------------------------------------------------------------------
def _deepcopy(sched: Any) -> Any:
    """A copy of the scheduler whose schedule() runs from the same state; the original
    is untouched. Config objects and the structured-output manager are shared, the
    recorder is left out (the copy must not write to the trace)."""
    memo: dict[int, Any] = {}
    for name in ("vllm_config", "structured_output_manager", "_schedscope_clock"):
        value = sched.__dict__.get(name)
        if value is not None:
            memo[id(value)] = value
    for name in ("_schedscope", "_schedscope_live"):
        value = sched.__dict__.get(name)
        if value is not None:
            memo[id(value)] = None  # detached: the copy records and serves nothing
    pool = _block_pool(sched)
    blocks = _seed_blocks(pool, memo) if pool is not None else []
    result: list[Any] = []
    error: list[BaseException] = []

    def run() -> None:
        try:
            result.append(copy.deepcopy(sched, memo))
        except BaseException as e:  # re-raised on the caller's thread
            error.append(e)

    # Whatever the seeding missed (other pools, other lists) may still recurse deeply.
    old_limit, old_stack = sys.getrecursionlimit(), threading.stack_size()
    sys.setrecursionlimit(max(old_limit, _RECURSION))
    try:
        threading.stack_size(_STACK)
        thread = threading.Thread(target=run, name="schedscope-probe-copy")
        thread.start()
    finally:
        threading.stack_size(old_stack)
    thread.join()
    sys.setrecursionlimit(old_limit)
    if error:
        raise error[0]
    clone = result[0]
    _link_blocks(blocks, memo)
    for name in ("_schedscope", "_schedscope_live"):
        if name in clone.__dict__:
            clone.__dict__[name] = None
    return clone


def _block_pool(sched: Any) -> Any:
    return getattr(getattr(sched, "kv_cache_manager", None), "block_pool", None)


def _slots(block: Any) -> tuple[str, ...]:
    return tuple(f.name for f in dataclasses.fields(block)) if dataclasses.is_dataclass(block) else ()


def _seed_blocks(pool: Any, memo: dict[int, Any]) -> list[tuple[Any, Any]]:
    """Shallow copies of the pool's blocks (and the free list's sentinels) put in the memo,
    so deepcopy never walks the free list; _link_blocks points them at each other after."""
    queue = getattr(pool, "free_block_queue", None)
    originals = list(getattr(pool, "blocks", ()))
    for name in ("fake_free_list_head", "fake_free_list_tail"):
        sentinel = getattr(queue, name, None)
        if sentinel is not None:
            originals.append(sentinel)
    if not originals:
        return []
    cls, names = type(originals[0]), _slots(originals[0])
    plain = bool(names) and set(names) == set(getattr(cls, "__slots__", ()))
    new = object.__new__
    pairs = []
    for block in originals:
        if plain and type(block) is cls:  # a slots dataclass: 6x faster than copy.copy
            clone = new(cls)
            for name in names:
                setattr(clone, name, getattr(block, name))
        else:
            clone = copy.copy(block)
        memo[id(block)] = clone
        pairs.append((block, clone))
    return pairs


def _link_blocks(pairs: list[tuple[Any, Any]], memo: dict[int, Any]) -> None:
    for block, clone in pairs:
        for name in ("prev_free_block", "next_free_block", "pool"):
            value = getattr(block, name, None)
            if value is not None:
                setattr(clone, name, memo.get(id(value), value))


# -- relaxations ------------------------------------------------------------------------------
def draft_slots(sched: Any) -> int:
    spec = getattr(sched.vllm_config, "speculative_config", None)
    return int(getattr(spec, "max_num_new_slots_for_drafting", 0) or 0) if spec is not None else 0


def _queued(sched: Any) -> list[Any]:
    queues = [getattr(sched, "kv_holding_waiting", None), sched.waiting]
    return [r for q in queues if q for r in q]


def _demand(req: Any) -> int:
    return int(req.num_tokens_with_spec + req.num_output_placeholders - req.num_computed_tokens)


def applicable(sched: Any) -> tuple[str, ...]:
    """The relaxations that change something on this scheduler."""
    cfg = sched.scheduler_config
    out = ["seqs", "kv", "budget"]
    if draft_slots(sched):
        out.append("draft_slots")
    if int(cfg.long_prefill_token_threshold or 0) > 0:
        out.append("long_prefill")
    if not cfg.enable_chunked_prefill:
        out.append("chunked")
    return tuple(out)


def relax(clone: Any, relaxation: str) -> Change:
    """Relax one constraint on a copy; what was changed."""
    cfg = clone.scheduler_config
    requests = [*clone.running, *_queued(clone)]
    if relaxation == "seqs":
        n = max(1, len(_queued(clone)))
        for name in ("max_num_active_reqs", "max_num_running_reqs"):  # 0.32 and 0.33 names
            if getattr(clone, name, None) is not None:
                setattr(clone, name, int(getattr(clone, name)) + n)
        cfg.max_num_seqs = int(cfg.max_num_seqs) + n
        if getattr(cfg, "max_num_active_seqs", None) is not None:
            cfg.max_num_active_seqs = int(cfg.max_num_active_seqs) + n
        return Change(relaxation, n)
    if relaxation == "kv":
        block = int(clone.block_size)
        lookahead = int(getattr(clone, "num_lookahead_tokens", 0) or 0)
        n = sum(math.ceil((r.num_tokens_with_spec + lookahead) / block) + 1 for r in requests) + 1
        # The watermark's blocks, sized on the pool at start, must stay free beside them.
        n += int(getattr(getattr(clone, "kv_cache_manager", None), "watermark_blocks", 0) or 0)
        _add_blocks(clone, n)
        return Change(relaxation, n)
    if relaxation == "budget":
        n = sum(max(0, _demand(r)) for r in requests) + len(requests) * (draft_slots(clone) + 1) + 1
        n += int(getattr(clone, "num_spec_tokens", 0) or 0) * len(requests)  # padded rows
        if getattr(clone, "max_num_scheduled_tokens", None) is not None:
            clone.max_num_scheduled_tokens = int(clone.max_num_scheduled_tokens) + n
        cfg.max_num_batched_tokens = int(cfg.max_num_batched_tokens) + n
        if getattr(cfg, "max_num_scheduled_tokens", None) is not None:
            cfg.max_num_scheduled_tokens = int(cfg.max_num_scheduled_tokens) + n
        return Change(relaxation, n)
    if relaxation == "draft_slots":
        vcfg = clone.vllm_config
        spec = vcfg.speculative_config
        from tracer.policies import ConfigView  # the policies' own read-through view

        clone.vllm_config = ConfigView(
            vcfg, speculative_config=ConfigView(spec, max_num_new_slots_for_drafting=0)
        )
        return Change(relaxation)
    if relaxation == "long_prefill":
        cfg.long_prefill_token_threshold = 0
        return Change(relaxation)
    if relaxation == "chunked":
        cfg.enable_chunked_prefill = True
        return Change(relaxation)
    raise ValueError(f"unknown relaxation {relaxation!r}; one of {', '.join(RELAXATIONS)}")


def _add_blocks(clone: Any, n: int) -> None:
    from vllm.v1.core.kv_cache_utils import KVCacheBlock

    pool = _block_pool(clone)
    start = len(pool.blocks)
    try:
        new = [KVCacheBlock(start + i, pool=pool) for i in range(n)]
    except TypeError:  # a release whose blocks do not name their pool
        new = [KVCacheBlock(start + i) for i in range(n)]
    pool.blocks.extend(new)
    pool.free_block_queue.append_n(new)
    pool.num_gpu_blocks += n


def probe(sched: Any, relaxation: str) -> Outcome:
    """Relax one constraint ("a+b": two) on a copy of `sched`, right before its schedule(),
    and schedule the copy."""
    clone = _deepcopy(sched)
    change = tuple(relax(clone, part) for part in relaxation.split("+"))
    out = clone.schedule()
    return Outcome(
        relaxation,
        dict(out.num_scheduled_tokens),
        frozenset(getattr(out, "preempted_req_ids", None) or ()),
        change,
    )


def probe_all(sched: Any, relaxations: Iterable[str] | None = None, *, pairs: bool = False) -> StepProbes:
    """Each applicable relaxation (and with `pairs`, each two of them: "a+b") probed."""
    allowed = applicable(sched)
    wanted = RELAXATIONS if relaxations is None else tuple(relaxations)
    keys = [r for r in wanted if r in allowed]
    if pairs:
        keys += [f"{a}+{b}" for i, a in enumerate(keys) for b in keys[i + 1 :]]
    return {r: probe(sched, r) for r in keys}


ASYNC_DONE: Final = "state:async_done"  # not a relaxation: the state vLLM's own test reads


def _async_done(sched: Any) -> Outcome:
    """The running requests the running loop skips under async scheduling: max_tokens is
    already in flight (vLLM's test, read on the state right before schedule())."""
    done = {
        r.request_id: 1
        for r in sched.running
        if r.num_output_placeholders > 0
        and r.num_computed_tokens + 2 - r.num_output_placeholders >= r.num_prompt_tokens + r.max_tokens
    }
    return Outcome(ASYNC_DONE, done, frozenset(), (Change(ASYNC_DONE),))


# -- the replay that reaches each step -------------------------------------------------------
def _recorded_tokens(rec: dict[str, Any]) -> dict[str, int]:
    return {e[0]: int(e[1]) for g in ("new", "resumed", "running") for e in rec[g] if e[1]}


def replay_probing(
    trace: Trace,
    steps: Iterable[int],
    at_step: Callable[[int, Any], None],
) -> None:
    """Replay `trace` exactly (its recorded policy and scheduler class) and call
    `at_step(step, scheduler)` right before each listed step's schedule(). Each of those
    steps' real schedule() must re-make the record (else ProbeError)."""
    from tracer.policies import scheduler_class
    from tracer.record.config import RecorderConfig, configured
    from tracer.whatif.offline import build_scheduler
    from tracer.whatif.replay import REPLAYABLE_METHODS, Replayer
    from tracer.whatif.workload import workload_from_trace

    wanted = sorted(set(steps))
    if not wanted:
        return
    try:
        import vllm  # noqa: F401
    except ImportError as exc:
        raise ProbeError(
            trace.path, "--exact replays the trace through vLLM's scheduler: install vLLM"
        ) from exc
    try:
        workload = workload_from_trace(trace)
    except ValueError as exc:  # WorkloadError
        raise ProbeError(trace.path, f"--exact cannot replay it: {exc}") from exc
    if not workload.exact:
        raise ProbeError(
            trace.path, "--exact needs the scheduler's inputs an exact replay takes (format 1.1+)"
        )
    engine = workload.engine
    if engine.method not in REPLAYABLE_METHODS:
        raise ProbeError(trace.path, f"--exact cannot replay method {engine.method!r} offline")
    records = {int(rec["step"]): rec for rec in _records_of(trace, wanted)}
    policy = str(trace.header.get("policy") or "stock")
    with configured(RecorderConfig()):  # untraced, whatever the environment says
        sched = build_scheduler(engine, scheduler_class(policy, async_scheduling=workload.async_scheduling))
    targets = set(wanted)

    class _Probing(Replayer):
        def schedule(self) -> None:
            step = self.steps + 1
            if step in targets:
                at_step(step, self.sched)
            super().schedule()
            if step in targets:
                got = {k: int(v) for k, v in self.inflight[-1][1].num_scheduled_tokens.items() if v}
                if got != _recorded_tokens(records[step]):
                    raise ProbeError(
                        trace.path, f"--exact: the replay diverged from the record at step {step}"
                    )

    k = engine.num_speculative_tokens if engine.method else 0
    try:
        _Probing(sched, workload, num_drafts=k, is_async=workload.async_scheduling).run(wanted[-1])
    finally:
        sched.shutdown()


def _records_of(trace: Trace, steps: list[int]) -> list[dict[str, Any]]:
    from tracer.analysis import detail

    rows = [int(r) for r in detail.rows_of_steps(trace, steps) if r >= 0]
    return [rec for _, rec in detail.records(trace, rows)]


def probe_steps(
    trace: Trace, steps: Iterable[int], relaxations: Iterable[str] | None = None, *, pairs: bool = False
) -> dict[int, StepProbes]:
    """Every applicable relaxation, probed right before each listed step's schedule()."""
    out: dict[int, StepProbes] = {}
    wanted = None if relaxations is None else tuple(relaxations)

    def at_step(step: int, sched: Any) -> None:
        out[step] = probe_all(sched, wanted, pairs=pairs)
        out[step][ASYNC_DONE] = _async_done(sched)

    replay_probing(trace, steps, at_step)
    return out


# -- verdicts -----------------------------------------------------------------------------------
@dataclass(frozen=True)
class Verdict:
    """A reason checked against the probes of its step."""

    code: str  # the constraint checked
    own: tuple[str, ...]  # the relaxations of that constraint that apply here
    by: str | None  # the first of them that admits the request (or the lead request)
    others: tuple[str, ...]  # relaxations outside its set that admit the request too

    @property
    def proven(self) -> bool:
        return self.by is not None and not self.others


def verdict(
    probes: StepProbes, code: str, rid: str, tokens: int = 0, *, lead: tuple[str, int] | None = None
) -> Verdict:
    """Does relaxing `code`'s constraint admit `rid` (beyond `tokens`), and no relaxation of
    another constraint? `lead` (id, tokens): the request the constraint stopped first in
    the loop's order (the head a request waits behind), which its relaxation must admit
    instead: once relaxed for it, the next constraint may hold the ones after it."""
    family = RELAXES.get(code, ())
    own = tuple(r for r in family if r in probes)
    target, have = lead if lead is not None else (rid, tokens)
    by = next((r for r in own if probes[r].admits(target, have)), None)
    others = tuple(
        r for r, o in probes.items() if r in RELAXATIONS and r not in family and o.admits(rid, tokens)
    )
    return Verdict(code, own, by, others)


def co_binding(probes: StepProbes, code: str, rid: str, tokens: int = 0) -> tuple[str, ...]:
    """The other constraints that bind together with `code`'s for `rid`: relaxing both
    admits it (probes made with pairs=True), relaxing either alone does not."""
    family = RELAXES.get(code, ())
    out = []
    for key, outcome in probes.items():
        parts = key.split("+")
        if len(parts) != 2 or not outcome.admits(rid, tokens):
            continue
        mine = [p for p in parts if p in family]
        other = [p for p in parts if p not in family]
        if len(mine) == 1 and len(other) == 1 and not probes[other[0]].admits(rid, tokens):
            out.append(other[0])
    return tuple(dict.fromkeys(out))


def _settled(
    cause: Cause, probes: StepProbes, rid: str | None, tokens: int, lead: tuple[str, int] | None = None
) -> Cause:
    """The cause the probes prove among the cause and its alternatives; unknown (with what
    was tried) when none is; the cause itself when no relaxation bears on it."""
    from tracer.analysis.why import Cause

    candidates = [cause.code, *cause.alternatives]
    tried: list[str] = []
    state = probes.get(ASYNC_DONE)
    if "async_done" in candidates and state is not None and rid is not None:
        if state.admits(rid):  # the state decides it, no relaxation needed
            return Cause("async_done", EXACT, {**cause.numbers, "proven": "state"}, (), cause.behind)
        candidates.remove("async_done")
        tried.append("async_done")
    for code in candidates:
        v = verdict(probes, code, rid, tokens, lead=lead) if rid is not None else None
        if v is None or not v.own:
            continue
        tried.append(code)
        if v.proven and v.by is not None:
            numbers = {**cause.numbers, "proven": "probe", "relaxed": probes[v.by].change}
            return Cause(code, EXACT, numbers, (), cause.behind)
    if not tried:
        return cause
    numbers = {
        **cause.numbers,
        "proven": "probe",
        "tried": tried,
        "relaxations": sorted(set(probes) & set(RELAXATIONS)),
    }
    return Cause("unknown", UNKNOWN, numbers, tuple(candidates))


def _needs_probe(cause: Cause) -> bool:
    return cause.certainty != EXACT


def settle(trace: Trace, why: StepWhy) -> StepWhy:
    """`why` with every cause that is not exact settled by probes on the real scheduler:
    proven ones become exact (their numbers gain "proven": "probe"), the rest unknown
    with what was tried."""
    pending = _needs_probe(why.binding) or any(_needs_probe(r.cause) for r in why.requests)
    if not pending:
        return why
    probes = probe_steps(trace, [why.step]).get(why.step, {})
    return _apply(why, probes)


def _apply(why: StepWhy, probes: StepProbes) -> StepWhy:
    """Settle a step's causes. As the loop meets them: the first request a constraint held
    (the head, or the first clipped) must be admitted by its relaxation; the ones after it
    only kept from admission by every other relaxation (once relaxed for the first, the
    next constraint may hold the rest)."""
    binding = why.binding
    waiting = [r for r in why.requests if r.state == "waiting" and r.cause.code != "behind"]
    head = binding.numbers.get("request") or next((r.id for r in waiting if r.cause == binding), None)
    if _needs_probe(binding):
        binding = _settled(binding, probes, head, 0)
    leads: dict[str, tuple[str, int]] = {}
    settled: dict[int, Any] = {}
    running_first = sorted(range(len(why.requests)), key=lambda i: why.requests[i].state == "waiting")
    for i in running_first:  # the running loop's clips first, then the waiting queue
        r = why.requests[i]
        cause = r.cause
        if _needs_probe(cause):
            if cause.code == "behind":  # it follows the head's (the binding's) answer
                cause = _behind(cause, binding)
            elif r.state == "waiting" and cause == why.binding:
                lead = (head, 0) if head is not None and head != r.id else None
                cause = binding if lead is None else _settled(cause, probes, r.id, 0, lead)
            else:
                have = r.tokens if r.state == "clipped" else 0
                lead = leads.setdefault(cause.code, (r.id, have))
                cause = _settled(cause, probes, r.id, have, lead if lead[0] != r.id else None)
        settled[i] = dataclasses.replace(r, cause=cause)
    requests = [settled[i] for i in range(len(why.requests))]
    return dataclasses.replace(why, binding=binding, requests=requests)


def settle_story(trace: Trace, story: RequestStory) -> RequestStory:
    """`story` with the causes of its held-back steps settled as `settle` does; at most
    STORY_PROBE_LIMIT steps are probed (the earliest), the rest keep their reasons."""
    steps = [s.step for s in story.steps if s.cause is not None and _needs_probe(s.cause)]
    steps = sorted(set(steps))[:STORY_PROBE_LIMIT]
    if not steps:
        return story
    probes = probe_steps(trace, steps)
    answers = _settled_causes(trace, story.id, probes)
    new_steps = []
    for s in story.steps:
        cause = answers.get(s.step)
        if s.cause is not None and cause is not None and _needs_probe(s.cause):
            s = dataclasses.replace(s, cause=cause)
        new_steps.append(s)
    return _restory(story, new_steps)


def _behind(cause: Cause, binding: Cause) -> Cause:
    from tracer.analysis.why import Cause

    return Cause("behind", binding.certainty, {**cause.numbers, "root": binding.code}, (), cause.behind)


def _settled_causes(trace: Trace, rid: str, probes: dict[int, StepProbes]) -> dict[int, Cause]:
    """The request's settled cause at each probed step (settled with its whole step)."""
    from tracer.analysis import detail
    from tracer.analysis.why import step_why

    rows = [int(r) for r in detail.rows_of_steps(trace, sorted(probes)) if r >= 0]
    out = {}
    for row, rec in detail.records(trace, rows):
        why = _apply(step_why(trace, row, rec), probes[int(rec["step"])])
        mine = next((r for r in why.requests if r.id == rid), None)
        if mine is not None:
            out[why.step] = mine.cause
    return out


def _restory(story: RequestStory, steps: list[Any]) -> RequestStory:
    """The story's waiting-by-reason totals again, from its (settled) steps."""
    waited: dict[str, list[float]] = {}
    ttft: dict[str, float] = {}
    first = story.ttft.get("first_token_step")
    for s in steps:
        if s.state != "waiting" or s.cause is None:
            continue
        bucket = waited.setdefault(s.cause.root, [0, 0.0])
        bucket[0] += 1
        bucket[1] += s.seconds
        if first is None or s.step < first:
            ttft[s.cause.root] = ttft.get(s.cause.root, 0.0) + s.seconds
    ttft_doc = {**story.ttft, "waiting": {k: round(v, 6) for k, v in ttft.items()}}
    return dataclasses.replace(
        story,
        steps=steps,
        waiting_by_reason={k: (int(v[0]), float(v[1])) for k, v in waited.items()},
        ttft=ttft_doc,
    )
