"""The step pass and the request index, computed with NumPy from a trace's entry columns
(tracer.trace.entries) instead of record by record.

Every entry of every step (scheduled requests, a dict `sampled`'s own entries, waiting ids,
preempted, finished) goes into one stream, laid out step by step in the order a record
lists them, then sorted by request (a stable sort: each request's entries stay in step
order). Per-request state that the record-by-record code keeps in dicts
(timing.FeatureBuilder's computed tokens and "sampled since admitted", LatencyTracker's
first/last token, the request index's pending admissions) becomes segmented sums over
that stream: a segment is a request's run between two resets (an admission or resumption
before the step, a preemption or finish after it).

The record-by-record code stays as the reference (`steppass.reference`,
`requests.reference`); tests compare the two exactly.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from tracer.analysis import timing
from tracer.analysis.pertrace import PerTrace
from tracer.analysis.throughput import RequestTimes
from tracer.trace.entries import NO_CONTEXT, S_ALIGNED, S_DICT, S_NONE, Entries
from tracer.trace.reader import Trace, entries_of

# Entry kinds, in the order a step's record lists them.
SCHED, ITEM, WAIT, PRE, FIN = range(5)
NEW, RESUMED, RUNNING = range(3)


@dataclass
class _Stream:
    """Every entry of the trace, sorted by request code, then by place in the trace."""

    code: np.ndarray  # request code
    kind: np.ndarray  # SCHED … FIN
    src: np.ndarray  # index into its kind's entry array
    row: np.ndarray  # step row
    at: np.ndarray  # place in the step-by-step layout (orders entries across kinds)
    block: np.ndarray  # index of the first entry of the same request


def _stream(e: Entries, n: int) -> _Stream:
    k = e.steps
    counts = np.stack(
        [
            k["k_new"].astype(np.int64) + k["k_res"] + k["k_run"],
            k["k_items"].astype(np.int64),
            k["k_wait"].astype(np.int64),
            k["k_pre"].astype(np.int64),
            k["k_fin"].astype(np.int64),
        ]
    )
    per_row = counts.sum(axis=0)
    row_start = np.cumsum(per_row) - per_row
    kind_start = row_start + (np.cumsum(counts, axis=0) - counts)  # where each kind begins in a row
    total = int(per_row.sum())
    code = np.empty(total, np.int32)
    kind = np.empty(total, np.int8)
    src = np.empty(total, np.int32)
    rows = np.arange(n, dtype=np.int32)
    for t, arr in enumerate((e.sched["req"], e.items["req"], e.wait, e.pre, e.fin)):
        cnt = counts[t]
        first = np.cumsum(cnt) - cnt  # each row's first index in this kind's array
        idx = np.arange(len(arr), dtype=np.int64)
        at = np.repeat(kind_start[t] - first, cnt) + idx
        code[at] = arr
        kind[at] = t
        src[at] = idx
    row_of = np.repeat(rows, per_row)
    order = np.argsort(code, kind="stable")  # nearly sorted runs: cheap
    code = code[order]
    new_block = np.ones(total, bool)
    new_block[1:] = code[1:] != code[:-1]
    starts = np.flatnonzero(new_block)
    block = np.repeat(starts, np.diff(np.append(starts, total)))
    return _Stream(code, kind[order], src[order], row_of[order], order, block)


def _exclusive_segmented_sum(values: np.ndarray, start: np.ndarray) -> np.ndarray:
    """For each element, the sum of `values` before it in its segment (`start` marks each
    segment's first element)."""
    cs = np.cumsum(values, dtype=np.int64)
    excl = cs - values
    first = np.flatnonzero(start)
    seg = np.cumsum(start) - 1
    return excl - excl[first][seg]


@dataclass
class EntryPass:
    features: timing.StepFeatures
    times: RequestTimes
    # The request index: (id, admitted, prefill_done, finished, preempted, resumed) per
    # request in the order the reference creates them (requests.RequestEvents' fields), and
    # the step of each request's first admission.
    events: list[tuple[Any, int | None, int | None, int | None, list[int], list[int]]]
    since: dict[Any, int]


_DONE: PerTrace[EntryPass] = PerTrace()


def computed(trace: Trace) -> EntryPass | None:
    """The pass for `trace`, run once per Trace object (the step pass and the request index
    each take their part); None when the trace's records do not fit entry columns."""
    found = _DONE.get(trace)
    if found is None:
        e = entries_of(trace)
        if e is None:
            return None
        found = entry_pass(trace, e)
        _DONE.put(trace, found)
    return found


def entry_pass(trace: Trace, e: Entries) -> EntryPass:
    """The step features, request times and request index of `trace` from its entries `e`."""
    n = len(trace)
    s = _stream(e, n)
    m = len(s.code)
    k = e.steps
    is_sched = s.kind == SCHED
    tokens = _gather(e.sched["tokens"], is_sched, s.src)
    spec = _gather(e.sched["spec"], is_sched, s.src)
    value = _gather(e.sched["sampled"], is_sched, s.src)
    row = s.row
    row_kind = k["s_kind"][row]
    # Group of a scheduled entry: its place in the step's scheduled order.
    sched_first = np.cumsum(k["k_new"].astype(np.int64) + k["k_res"] + k["k_run"])
    sched_first -= k["k_new"].astype(np.int64) + k["k_res"] + k["k_run"]
    pos = s.src.astype(np.int64) - sched_first[row]
    group = np.where(
        pos < k["k_new"][row], NEW, np.where(pos < k["k_new"][row] + k["k_res"][row], RESUMED, RUNNING)
    )
    group = np.where(is_sched, group, -1)

    # A request named twice in one step's scheduled groups: a dict keeps one count per id
    # (the last, as `compact.expand` builds it) and the step's resets come before all of them.
    same = np.zeros(m, bool)
    same[1:] = is_sched[1:] & is_sched[:-1] & (s.code[1:] == s.code[:-1]) & (row[1:] == row[:-1])
    g_first = is_sched & ~same
    g_last = is_sched.copy()
    g_last[:-1] &= ~same[1:]
    if same.any():
        gid = np.cumsum(g_first) - 1
        last_of = np.flatnonzero(g_last)
        value = np.where(is_sched & (row_kind == S_ALIGNED), value[last_of][np.maximum(gid, 0)], value)
        admitted_or_resumed = np.maximum.reduceat(
            (group == NEW) | (group == RESUMED), np.flatnonzero(g_first)
        )
        reset_before = np.zeros(m, bool)
        reset_before[g_first] = admitted_or_resumed.astype(bool)
    else:
        reset_before = is_sched & ((group == NEW) | (group == RESUMED))
    n_used = np.where(row_kind == S_NONE, spec + 1, value)  # FeatureBuilder's n
    rejected = np.where(n_used > 0, spec + 1 - n_used, 0)
    delta = np.where(is_sched, tokens - np.maximum(0, rejected), 0)
    sampled_now = is_sched & (n_used > 0)

    # -- timing.FeatureBuilder ---------------------------------------------------------
    seg_start = np.ones(m, bool)
    if m:
        ended = (s.kind == PRE) | (s.kind == FIN)
        seg_start[1:] = (s.code[1:] != s.code[:-1]) | ended[:-1]
        seg_start |= reset_before
    computed_before = _exclusive_segmented_sum(delta, seg_start)
    sampled_before = _exclusive_segmented_sum(sampled_now.astype(np.int64), seg_start) > 0
    running = group == RUNNING
    decode = running & np.where(row_kind == S_NONE, tokens <= 1 + spec, sampled_before)
    srow = row[is_sched]
    stok = tokens[is_sched].astype(np.float64)
    sdec = decode[is_sched]
    prefill = np.bincount(srow, weights=np.where(sdec, 0.0, stok), minlength=n)
    decoded = np.bincount(srow, weights=np.where(sdec, stok, 0.0), minlength=n)
    context = np.bincount(srow, weights=computed_before[is_sched].astype(np.float64), minlength=n)
    recorded = e.ctx != NO_CONTEXT
    context = np.where(recorded, e.ctx.astype(np.float64), context)
    n_sched = (k["k_new"].astype(np.int64) + k["k_res"] + k["k_run"]).astype(np.float64)
    columns = {
        "step": np.ones(n),
        "prefill_tokens": prefill,
        "decode_tokens": decoded,
        "requests": n_sched,
        "finished_requests": k["k_fin"].astype(np.float64),
        "context_tokens": context,
        "query_rows": trace.columns["query_rows"].astype(np.float64),
    }
    features = timing.StepFeatures(
        {name: columns[name] for name in timing.FEATURES}, context_recorded=bool(n and recorded.all())
    )

    # -- the samples a dict `sampled` holds: one per id and step ----------------------
    is_item = s.kind == ITEM
    item_n = _gather(e.items["n"], is_item, s.src)
    sample_n = np.where(is_item, item_n, np.where(g_last & (row_kind == S_ALIGNED), value, 0))
    if (row_kind == S_DICT).any():  # a dict step's scheduled entries are not its samples
        sample_n = np.where(is_sched & (row_kind == S_DICT), 0, sample_n)
    sample = sample_n > 0

    # -- throughput.LatencyTracker -----------------------------------------------------
    n_codes = len(e.ids)
    big = np.iinfo(np.int64).max
    seen_at = np.full(n_codes, big, np.int64)
    named = is_sched | (s.kind == WAIT)
    first_named = named & _first_in_block(named, s.block)
    seen_at[s.code[first_named]] = s.at[first_named]
    seen_row = np.full(n_codes, -1, np.int64)
    seen_row[s.code[first_named]] = row[first_named]
    first_sched = is_sched & _first_in_block(is_sched, s.block)
    sched_row = np.full(n_codes, -1, np.int64)
    sched_row[s.code[first_sched]] = row[first_sched]
    # The `a` inputs (one per request): a step's arrivals come before what it lists.
    arr_codes = e.arr.astype(np.int64)
    arr_rows = np.repeat(np.arange(n, dtype=np.int64), e.steps["k_arr"].astype(np.int64))
    arrived = np.full(n_codes, -1, np.int64)
    arrival = np.full(n_codes, np.nan)
    arr_at = np.zeros(n_codes, np.int64)
    got, first_arr = np.unique(arr_codes, return_index=True)  # each request's first `a`
    arrived[got], arrival[got], arr_at[got] = arr_rows[first_arr], e.arr_t[first_arr], first_arr
    # Requests in the order they first appear: (row, arrival before listing, place).
    codes = np.flatnonzero((seen_at != big) | (arrived >= 0))
    by_arrival = arrived[codes] >= 0
    order = np.lexsort(
        (
            np.where(by_arrival, arr_at[codes], seen_at[codes]),
            np.where(by_arrival, 0, 1),
            np.where(by_arrival, arrived[codes], seen_row[codes]),
        )
    )
    codes = codes[order]
    first_tok, last_tok, tok_sum = _sample_rows(s, sample, sample_n, n_codes)
    ids = e.ids
    times = RequestTimes(
        seen=seen_row[codes],
        first=first_tok[codes],
        last=last_tok[codes],
        tokens=tok_sum[codes],
        arrived=arrived[codes],
        scheduled=sched_row[codes],
        arrival=arrival[codes],
        ids=[ids[c] for c in codes.tolist()],
    )

    # -- the request index (requests._Builder) -----------------------------------------
    steps = trace.columns["step"].astype(np.int64)
    events, since = _request_index(e, s, group, sample, steps, n_codes)
    return EntryPass(features, times, events, since)


def _gather(values: np.ndarray, mask: np.ndarray, src: np.ndarray) -> np.ndarray:
    """values[src] where `mask`, 0 elsewhere, as int64."""
    out = np.zeros(len(mask), np.int64)
    out[mask] = values[src[mask]]
    return out


def _first_in_block(mask: np.ndarray, block: np.ndarray) -> np.ndarray:
    """Elements of `mask` that are the first masked element of their request's block."""
    idx = np.flatnonzero(mask)
    out = np.zeros(len(mask), bool)
    if len(idx):
        b = block[idx]
        keep = np.ones(len(idx), bool)
        keep[1:] = b[1:] != b[:-1]
        out[idx[keep]] = True
    return out


def _sample_rows(
    s: _Stream, sample: np.ndarray, n: np.ndarray, n_codes: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per request code: the rows of its first and last sample (-1: none) and its tokens."""
    first = np.full(n_codes, -1, np.int64)
    last = np.full(n_codes, -1, np.int64)
    tokens = np.zeros(n_codes, np.int64)
    idx = np.flatnonzero(sample)
    if len(idx):
        codes = s.code[idx]
        head = np.ones(len(idx), bool)
        head[1:] = codes[1:] != codes[:-1]
        starts = np.flatnonzero(head)
        ends = np.append(starts[1:], len(idx)) - 1
        first[codes[starts]] = s.row[idx[starts]]
        last[codes[starts]] = s.row[idx[ends]]
        tokens[codes[starts]] = np.add.reduceat(n[idx], starts)
    return first, last, tokens


def _request_index(
    e: Entries, s: _Stream, group: np.ndarray, sample: np.ndarray, steps: np.ndarray, n_codes: int
) -> tuple[list[tuple[Any, int | None, int | None, int | None, list[int], list[int]]], dict[Any, int]]:
    m = len(s.code)
    admit = group == NEW
    resume = group == RESUMED
    pre, fin = s.kind == PRE, s.kind == FIN
    step = steps[s.row]
    # Pending: admitted (ids that are strings), no sample yet, not finished since.
    is_str = np.fromiter((type(rid) is str for rid in e.ids), bool, n_codes)
    pend = admit & is_str[s.code]
    idx = np.arange(m, dtype=np.int64)
    last_admit = np.maximum.accumulate(np.where(pend, idx, -1)) if m else idx
    last_fin = np.maximum.accumulate(np.where(fin, idx, -1)) if m else idx
    done = sample & (last_admit >= s.block) & (last_fin < last_admit)
    prefill_done = _per_code(_first_in_block(done, s.block), s, step, n_codes)

    # Created in the order the reference first names them: admitted, resumed, preempted, finished.
    creates = admit | resume | pre | fin
    first_create = _first_in_block(creates, s.block)
    created = s.code[first_create]
    created = created[np.argsort(s.at[first_create], kind="stable")]
    admitted = _per_code(_last_in_block(admit, s.block), s, step, n_codes)
    finished = _per_code(_last_in_block(fin, s.block), s, step, n_codes)
    first_admit = _first_in_block(admit, s.block)
    since_codes = s.code[first_admit]
    order = np.argsort(s.at[first_admit], kind="stable")
    since_codes, since_steps = since_codes[order], step[first_admit][order]

    def lists(mask: np.ndarray) -> dict[int, list[int]]:
        codes, values = s.code[mask].tolist(), step[mask].tolist()
        out: dict[int, list[int]] = {}
        for c, v in zip(codes, values, strict=True):
            out.setdefault(c, []).append(v)
        return out

    preempted, resumed = lists(pre), lists(resume)
    ids = e.ids
    admitted_l, prefill_l, finished_l = admitted.tolist(), prefill_done.tolist(), finished.tolist()
    events = []
    for c in created.tolist():
        a, p, f = admitted_l[c], prefill_l[c], finished_l[c]
        events.append(
            (
                ids[c],
                None if a == _NONE else a,
                None if p == _NONE else p,
                None if f == _NONE else f,
                preempted.get(c, []),
                resumed.get(c, []),
            )
        )
    since = dict(zip((ids[c] for c in since_codes.tolist()), since_steps.tolist(), strict=True))
    return events, since


_NONE = np.iinfo(np.int64).min  # no such step


def _per_code(mask: np.ndarray, s: _Stream, values: np.ndarray, n_codes: int) -> np.ndarray:
    """values[masked element] by request code (at most one masked element per code), _NONE elsewhere."""
    out = np.full(n_codes, _NONE, np.int64)
    out[s.code[mask]] = values[mask]
    return out


def _last_in_block(mask: np.ndarray, block: np.ndarray) -> np.ndarray:
    """Elements of `mask` that are the last masked element of their request's block."""
    idx = np.flatnonzero(mask)
    out = np.zeros(len(mask), bool)
    if len(idx):
        b = block[idx]
        keep = np.ones(len(idx), bool)
        keep[:-1] = b[1:] != b[:-1]
        out[idx[keep]] = True
    return out
