"""What the scheduler thread takes of a step: ints, ids, flat lists, and the request objects
whose ids are read later, off the scheduler thread.

The recorder (tracer.record.recorder) fills these; the encoder (tracer.record.encoder) turns
them into trace records, on the writer thread or, across a pipe, in the trace process
(tracer.live.trace_process), once `portable()` has replaced what only EngineCore can read.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any, NamedTuple


# The typed snapshots, read by name off the scheduler thread. The scheduler thread itself
# takes each as a plain tuple or list of its fields in order (one BUILD_LIST, where building
# the dataclass by keyword cost microseconds a step): see `step_snapshot`.
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
    counts: list[int] | Uncounted  # Uncounted: the proposer's lists, counted off the scheduler thread


class Uncounted(NamedTuple):
    """Per-request token lists of vLLM's, kept as they were for the writer side to count.

    Counting them costs the scheduler thread ~27 ns a request (`len` through `map`), about
    17 µs a step at 256 running; copying the two lists costs 1 µs. vLLM replaces these lists
    after schedule() and update_from_output() (the GPU n-gram proposer and
    update_draft_token_ids_in_output put new ones in the dict; the stop check trims a
    sampled list inside update_from_output, before it is kept) but never changes one it
    handed over, so the counts are the same read later. The proposer's drafts
    (update_draft_token_ids) are kept the same way: vLLM makes them the requests' drafts,
    which it validates into new lists, slices or replaces, never edits. The recorder keeps
    them only while the writer keeps up (`LAZY_BACKLOG`): a backlog of steps would hold them
    alive.
    """

    ids: list[str]
    lists: list[Any]


# Queued items under which a step keeps its token lists uncounted (see Uncounted): at 256
# running, about 80 KB a step, so at most ~20 MB held while the writer side catches up.
LAZY_BACKLOG = 256


def counted(pairs: tuple[list[str], list[int]] | Uncounted) -> tuple[list[str], list[int]]:
    """(ids, counts), counting an `Uncounted`'s lists off the scheduler thread."""
    if type(pairs) is Uncounted:
        return pairs.ids, list(map(len, pairs.lists))
    return pairs


def draft_counts(counts: list[int] | Uncounted) -> list[int]:
    """A `Drafts` input's counts, counting its lists if they were handed over uncounted."""
    return counted(counts)[1] if type(counts) is Uncounted else counts


class Preemption(NamedTuple):  # one _preempt_request() call inside schedule()
    victim: str
    trigger: str | None  # the request whose KV allocation failed; None when not seen
    lost: int  # the victim's computed tokens, dropped (vLLM recomputes them on resume)
    free_before: int  # free KV blocks before its blocks were freed, after
    free_after: int


# A step's output applied: ["u", step] (-1: a step not traced), a bare int (the one input every
# step has: no tuple made for it).
SchedulerInput = Arrival | Abort | Drafts | int


@dataclass(slots=True, kw_only=True)
class StepSnapshot:
    """One step, taken in after_schedule() and completed in after_update() as a list of these
    fields in order (`step_snapshot` names them); the encoder builds its record."""

    step: int
    t: float  # the scheduler clock when schedule() began
    dt_ns: int  # schedule()'s duration
    total: int  # SchedulerOutput.total_num_scheduled_tokens
    num_sched: dict[str, int]  # tokens scheduled per request
    new_ids: list[str]
    cached_ids: list[str]
    resumed: set[str]
    # (ids, draft counts) scheduled for verification; Uncounted until the writer side counts
    spec: tuple[list[str], list[int]] | Uncounted
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
    sampled: tuple[list[str], list[int]] | Uncounted | None = None
    ends: dict[str, tuple[str, int]] | None = None
    # True once `portable()` replaced vLLM's objects (requests, statuses) by ids and names.
    portable: bool = False


CANDIDATE_FIELDS = tuple(f.name for f in fields(Candidates))
STEP_FIELDS = tuple(f.name for f in fields(StepSnapshot))
# Where the recorder and `portable` read and write a candidates' list, and a step's.
RUNNING, WAITING_REFS = CANDIDATE_FIELDS.index("running"), CANDIDATE_FIELDS.index("waiting_refs")
KV_FREE = CANDIDATE_FIELDS.index("kv_free")
CANDIDATES, STATUSES = STEP_FIELDS.index("candidates"), STEP_FIELDS.index("statuses")
SPEC, SAMPLED, ENDS = STEP_FIELDS.index("spec"), STEP_FIELDS.index("sampled"), STEP_FIELDS.index("ends")
INPUTS = STEP_FIELDS.index("inputs")
PORTABLE = STEP_FIELDS.index("portable")


def step_snapshot(raw: list[Any]) -> StepSnapshot:
    """The typed step of the scheduler thread's list (its candidates' list typed too);
    a list of the wrong length raises."""
    snap = StepSnapshot(**dict(zip(STEP_FIELDS, raw, strict=True)))
    if snap.candidates is not None:
        snap.candidates = Candidates(**dict(zip(CANDIDATE_FIELDS, snap.candidates, strict=True)))
    return snap


# The runner hook attaches its per-pass notes to the ModelRunnerOutput under this name,
# and, when they changed, which of its hooks are active in the runner's process.
RUNNER_NOTES_ATTR = "_schedscope_runner"
RUNNER_HOOKS_ATTR = "_schedscope_hooks"


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


# What the scheduler thread emits: a step as a list (StepSnapshot's fields), a runner pass,
# or a record built already (header, hooks).
SchedulerItem = list[Any] | RunnerPass | dict[str, Any]


def portable(item: SchedulerItem) -> SchedulerItem:
    """`item` with nothing of vLLM's left in it, so it pickles without vLLM: each request
    object's id (fixed at construction, so safe to read off the scheduler thread), each
    status's name and each token list's length (the drafts' among its inputs too). In place:
    the step belongs to the writer side once emitted."""
    if type(item) is list and not item[PORTABLE]:
        item[SPEC] = counted(item[SPEC])
        item[INPUTS] = [
            Drafts(e.ids, draft_counts(e.counts)) if type(e) is Drafts else e for e in item[INPUTS]
        ]
        if item[SAMPLED] is not None:
            item[SAMPLED] = counted(item[SAMPLED])
        cand = item[CANDIDATES]
        if cand is not None:
            cand[RUNNING] = [r.request_id for r in cand[RUNNING]]
            cand[WAITING_REFS] = [r.request_id for r in cand[WAITING_REFS]]
        statuses = item[STATUSES]
        if statuses is not None:
            item[STATUSES] = [getattr(s, "name", str(s)) for s in statuses]
        item[PORTABLE] = True
    return item
