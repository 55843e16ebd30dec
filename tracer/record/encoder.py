"""The encoder: a step's snapshot turned into its trace record (format 1.2+), encoded.

It runs wherever the records are written: on the writer thread beside the scheduler
(tracer.record.writer) or in the trace process (tracer.live.trace_process), which gets the
snapshots through a pipe. Its state (the prefix index, the steps built) lives with it.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from itertools import islice, repeat
from typing import Any, NamedTuple

import orjson

from tracer.record.snapshot import (
    Arrival,
    Drafts,
    RunnerPass,
    SchedulerInput,
    SchedulerItem,
    StepSnapshot,
    counted,
    draft_counts,
    step_snapshot,
)
from tracer.record.writer import Record
from tracer.trace import schema


class StepEncoder:
    """Builds and encodes the records of one trace; `config` is the header's."""

    def __init__(self, config: Mapping[str, Any]) -> None:
        self.draft_slots = int(config.get("draft_slots") or 0)
        self.q = int(config.get("query_rows_per_req") or 0)
        self.target_cap = int(config.get("max_num_scheduled_tokens") or 0)
        self.input_cap = int(config.get("max_num_batched_tokens") or 0)
        self.buffer_cap = config.get("buffer_capacity")
        self.steps_built = 0
        self._prefix = _PrefixIndex()

    def encode(self, item: SchedulerItem) -> Record:
        """The writer's encoder: the record an item stands for, built and encoded."""
        if type(item) is list:  # a step, as the scheduler thread took it
            snap = step_snapshot(item)
            return Record(schema.STEP, snap.step, _dumps(self.build_step(snap)))
        if type(item) is RunnerPass:
            record = runner_record(item)
            return Record(schema.RUNNER, item.step, _dumps(record))
        if isinstance(item, dict):  # header, hooks and footer: built already
            return Record(item["kind"], item.get("step"), _dumps(item))
        raise TypeError(f"not a trace item: {type(item).__name__}")

    def build_step(self, snap: StepSnapshot) -> dict[str, Any]:
        step, t, dt_ns, total = snap.step, snap.t, snap.dt_ns, snap.total
        num_sched, new_ids, cached_ids, resumed = snap.num_sched, snap.new_ids, snap.cached_ids, snap.resumed
        spec, preempted, finished = counted(snap.spec), snap.preempted, snap.finished
        n_running, n_waiting, kv = snap.n_running, snap.n_waiting, snap.kv
        sampled, inputs, ends = snap.sampled, snap.inputs, snap.ends
        if sampled is not None:
            sampled = counted(sampled)
        cand = snap.candidates
        if cand is None:  # before_schedule failed: no demands this step
            running_refs, running_demand, waiting_pre, truncated, priority = (), (), (), 0, None
        else:
            running_refs, running_demand, waiting_pre = cand.running, cand.demand, cand.waiting
            truncated, priority = cand.waiting_truncated, cand.priority
        # Ids are fixed at construction: safe to read off the scheduler thread.
        running_ids = running_refs if snap.portable else [r.request_id for r in running_refs]
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
            if kind is int:  # a step's output applied
                out.append(["u", event])
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
                out.append(["d", ids, draft_counts(event.counts)])
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
        # A portable snapshot holds the ids and names already.
        named = pairs if snap.portable else ((r.request_id, getattr(st, "name", str(st))) for r, st in pairs)
        status = {rid: name for rid, name in named if name.startswith("WAITING_FOR")} or None
    kv_free = snap.kv_free
    return {
        "kv_free": list(kv_free) if kv_free is not None and min(kv_free) >= 0 else None,
        "cached": cached,
        "waiting_status": status,
        "preemptions": [list(p) for p in snap.preemptions] if snap.preemptions else None,
        "paused": snap.paused,
    }


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


def footer(
    *, steps: int, dropped: int, errors: int, failure: str | None, cost: TracerCost | None = None
) -> dict[str, Any]:
    """The trace's last record: what was written and what was lost, and (`cost`, where the
    recorder measured it) what the tracer took of the server's EngineCore."""
    record: dict[str, Any] = {
        "kind": schema.FOOTER,
        "steps_written": steps,
        "records_dropped": dropped,
        "errors": errors,
        "end_time": time.time(),
        "writer_failure": failure,
    }
    if cost is not None:
        record["hooks_s"] = round(cost.hooks_s, 6)
        record["writer_thread_s"] = round(cost.writer_thread_s, 6)
    return record


class TracerCost(NamedTuple):
    """The tracer's own time in EngineCore: on the scheduler thread, in its hooks (wall time,
    the GIL held), and the CPU time of the EngineCore thread that ships or writes records."""

    hooks_s: float
    writer_thread_s: float
