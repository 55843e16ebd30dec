"""The step pass and the request index, computed with NumPy from a trace's entry columns
(tracer.trace.entries) instead of record by record.

The trace layer hands over what the pass reads in one call (`entry_columns`, an
EntryColumns bundle): the scheduled entries (most of them) come in cache-sized chunks of
whole steps, in step order, read (and their pages handed back) as the pass asks for them;
each chunk is sorted by request (a stable sort: each request's entries stay in step
order). Per-request state that the record-by-record code keeps in dicts
(timing.FeatureBuilder's computed tokens and "sampled since admitted") becomes segmented
sums over that order: a segment is a request's run between two resets (an admission or
resumption before the step, a preemption or finish after it, joined in by key), and what a
run carries from one chunk into the next is kept per request. The other entries (admissions,
preemptions, finishes, waiting ids, a dict `sampled`'s own entries) are few, and are joined
by (request, step) keys: LatencyTracker's first-seen step, first and last token, and the
request index's events and first token after an admission with no finish in between.

The record-by-record code stays as the reference (`step_features.reference`,
`requests.reference`); tests compare the two exactly.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any

import numpy as np

from tracer.analysis import release_memory, timing
from tracer.analysis.memo import memo
from tracer.analysis.throughput import RequestTimes
from tracer.trace.entries import NO_CONTEXT, S_ALIGNED, S_NONE, TRIM, EntryChunk, EntryColumns
from tracer.trace.trace_type import Trace, entry_columns

NEW, RESUMED, RUNNING = range(3)
# Keys that order a step's entries as its record lists them: row, then kind (scheduled,
# waiting; or admitted/resumed, preempted, finished), then place in its list.
_ROW_SHIFT, _RANK_SHIFT = 22, 20
_POS_LIMIT = 1 << _RANK_SHIFT
CHUNK = 1 << 16  # scheduled entries per chunk of steps: its arrays stay in cache (1 << 18 ran twice as long)


@dataclass
class EntryPass:
    features: timing.StepFeatures
    times: RequestTimes
    # The request index: requests.RequestColumns' fields, one entry per request in the order
    # the reference creates them; and each first admission (position there, step).
    events: tuple[Any, ...]
    since: tuple[np.ndarray, np.ndarray]


MEMO_NAME = "entry_features"  # its name in the Trace's memo (tracer.analysis.memo)
# The last phases of a pass are its peak in memory (a few arrays per request at once): two
# passes at once (`diff`'s two threads) take turns there, so their peaks never add up.
_LAST_PHASES = threading.Lock()


def computed(trace: Trace) -> EntryPass | None:
    """The pass for `trace`, run once per Trace object (the step pass and the request index
    each take their part); None when the trace's records do not fit entry columns."""
    found: EntryPass | None = memo(trace).get(MEMO_NAME)
    if found is None:
        # One call for all the pass reads of the trace (its chunks read as the pass goes).
        e = entry_columns(trace, CHUNK)
        if e is None:
            return None
        try:
            found = entry_pass(e)
        except ValueError:  # a million requests in one step: the reference copes
            return None
        memo(trace).put(MEMO_NAME, found)
    return found


def entry_pass(e: EntryColumns) -> EntryPass:
    """The step features, request times and request index of a trace from its entry columns.

    The scheduled entries (most of them: 51 million in a 200k-step trace at 256 running)
    come in chunks of whole steps, in step order (`e.chunks`), each sorted here by request
    code (a stable sort: a request's entries stay in step order); what a request carries from
    one chunk to the next is in `_Carry`. The few other entries (admissions, preemptions,
    finishes, waiting ids) are joined by key. Only a chunk's entries are in memory at once."""
    n = len(e.columns["step"])
    k = e.counts
    ks = k["k_new"] + k["k_res"] + k["k_run"]
    longest = max(int(k[name].max(initial=0)) for name in ("k_wait", "k_pre", "k_fin"))
    if max(int(ks.max(initial=0)), longest) >= _POS_LIMIT:
        raise ValueError("a step names more requests than the pass's keys hold")
    sched_end = np.cumsum(ks)
    sched_first = sched_end - ks
    n_codes = len(e.ids)
    ev = _events(e, k, n, n_codes)
    acc = _Accumulators(n, n_codes)
    rows = _Rows(
        first=sched_first,
        end=sched_end,
        count=ks,
        admitting=k["k_new"] + k["k_res"],
        aligned=bool((k["s_kind"] == S_ALIGNED).all()),
        item_end=np.cumsum(k["k_items"]),
        wait_end=np.cumsum(k["k_wait"]),
    )
    carry = _Carry(n_codes)
    release_memory.trim()  # what was computed before the first chunk, before the chunks' temporaries join it
    for i, chunk in enumerate(e.chunks, 1):  # whole rows, about CHUNK scheduled entries each
        _chunk(chunk, k, rows, ev, acc, carry)
        if i % TRIM == 0:
            release_memory.trim()
    # What the chunks needed goes before the last phases, which peak in memory; each of
    # them is a function, so its temporaries go when it returns.
    finished, arrivals = k["k_fin"], k["k_arr"]
    k.clear()  # the bundle's counts too: this pass is their one reader
    del carry, rows, k
    release_memory.trim()
    with _LAST_PHASES:
        features = _features(e, acc, ks, finished)
        times = _times(e, acc, arrivals, n_codes)
        prefill_done = acc.prefill_done
        del acc
        events, since = _request_index(e, ev, prefill_done, n_codes)
        release_memory.trim()
    return EntryPass(features, times, events, since)


def _features(
    e: EntryColumns, acc: _Accumulators, ks: np.ndarray, finished: np.ndarray
) -> timing.StepFeatures:
    """timing.FeatureBuilder's step features."""
    n = len(e.columns["step"])
    recorded = e.ctx != NO_CONTEXT
    columns = {
        "step": np.ones(n),
        "prefill_tokens": _scheduled_tokens(e.columns) - acc.decode,
        "decode_tokens": acc.decode,
        "requests": ks.astype(np.float64),
        "finished_requests": finished.astype(np.float64),
        "context_tokens": np.where(recorded, e.ctx.astype(np.float64), acc.context),
        "query_rows": e.columns["query_rows"].astype(np.float64),
    }
    return timing.StepFeatures(
        {name: columns[name] for name in timing.FEATURES}, context_recorded=bool(n and recorded.all())
    )


def _times(e: EntryColumns, acc: _Accumulators, arrivals: np.ndarray, n_codes: int) -> RequestTimes:
    """throughput.LatencyTracker's inputs: first seen scheduled or waiting, first scheduled
    (`arrivals`: each step's count of `a` inputs)."""
    # The `a` inputs (one per request): a step's arrivals come before what it lists.
    arr_codes = e.arr.astype(np.int64)
    arr_rows = np.repeat(np.arange(len(arrivals), dtype=np.int64), arrivals)
    arrived = np.full(n_codes, -1, np.int64)
    arrival = np.full(n_codes, np.nan)
    arr_at = np.zeros(n_codes, np.int64)
    got, first_arr = np.unique(arr_codes, return_index=True)  # each request's first `a`
    arrived[got], arrival[got], arr_at[got] = arr_rows[first_arr], e.arr_t[first_arr], first_arr
    # Requests in the order they first appear: (row, arrival before listing, place).
    listed = acc.seen != np.iinfo(np.int64).max
    codes = np.flatnonzero(listed | (arrived >= 0))
    by_arrival = arrived[codes] >= 0
    seen_row = np.where(listed, acc.seen >> _ROW_SHIFT, -1)
    order = np.lexsort(
        (
            np.where(by_arrival, arr_at[codes], acc.seen[codes]),
            np.where(by_arrival, 0, 1),
            np.where(by_arrival, arrived[codes], seen_row[codes]),
        )
    )
    codes = codes[order]
    ids = e.ids
    return RequestTimes(
        seen=seen_row[codes],
        first=acc.first[codes],
        last=acc.last[codes],
        tokens=acc.tokens[codes],
        arrived=arrived[codes],
        scheduled=acc.scheduled[codes],
        arrival=arrival[codes],
        ids=[ids[c] for c in codes.tolist()],
    )


@dataclass
class _Events:
    """The entries other than the scheduled ones, and the scheduled ones that admit or
    resume, each with its request code, row and ordering key."""

    new_code: np.ndarray
    new_row: np.ndarray
    new_key: np.ndarray
    res_code: np.ndarray
    res_key: np.ndarray
    pre_code: np.ndarray
    pre_key: np.ndarray
    fin_code: np.ndarray
    fin_row: np.ndarray
    fin_key: np.ndarray
    # Preemptions and finishes (a request's next entry starts afresh), by row: row, code.
    reset_row: np.ndarray
    reset_code: np.ndarray
    # Admissions of ids that are strings (a first token is looked for after them), by row.
    admit_row: np.ndarray
    admit_code: np.ndarray
    n: int


def _rows_pos(counts: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    """For entries laid out row by row, `counts[row]` per row: each one's row and place in its row."""
    rows = np.repeat(np.arange(n, dtype=np.int64), counts)
    pos = np.arange(len(rows), dtype=np.int64) - np.repeat(np.cumsum(counts) - counts, counts)
    return rows, pos


def _key(rows: np.ndarray, rank: int, pos: np.ndarray) -> np.ndarray:
    return (rows << _ROW_SHIFT) | (rank << _RANK_SHIFT) | pos


def _events(e: EntryColumns, k: dict[str, np.ndarray], n: int, n_codes: int) -> _Events:
    new_row, new_pos = _rows_pos(k["k_new"], n)
    res_row, res_pos = _rows_pos(k["k_res"], n)
    res_pos = res_pos + k["k_new"][res_row]  # its place in the scheduled order
    pre_row, pre_pos = _rows_pos(k["k_pre"], n)
    fin_row, fin_pos = _rows_pos(k["k_fin"], n)
    new_code, res_code = e.new_req, e.res_req
    pre_code, fin_code = e.pre.astype(np.int64), e.fin.astype(np.int64)
    # requests._Builder keeps only ids that are strings pending a first token.
    is_str = np.fromiter((type(rid) is str for rid in e.ids), bool, n_codes)
    pending = is_str[new_code]
    reset_row = np.concatenate([pre_row, fin_row])
    by_row = np.argsort(reset_row, kind="stable")
    return _Events(
        new_code=new_code,
        new_row=new_row,
        new_key=_key(new_row, 0, new_pos),
        res_code=res_code,
        res_key=_key(res_row, 0, res_pos),
        pre_code=pre_code,
        pre_key=_key(pre_row, 2, pre_pos),
        fin_code=fin_code,
        fin_row=fin_row,
        fin_key=_key(fin_row, 3, fin_pos),
        reset_row=reset_row[by_row],
        reset_code=np.concatenate([pre_code, fin_code])[by_row],
        admit_row=new_row[pending],
        admit_code=new_code[pending],
        n=n,
    )


@dataclass
class _Rows:
    first: np.ndarray  # each row's first scheduled entry
    end: np.ndarray  # and the entry after its last
    count: np.ndarray  # its scheduled entries
    admitting: np.ndarray  # each row's admitted and resumed entries (they come first)
    aligned: bool  # every step's `sampled` is aligned with its scheduled order
    item_end: np.ndarray  # the dict-`sampled` entry after each row's last
    wait_end: np.ndarray  # the `waiting_demand` entry after each row's last


class _Carry:
    """What a request carries from one chunk of steps to the next: the tokens computed and
    the samples counted in its current run (since its admission, resumption or last reset),
    whether a preemption or finish ends that run before its next entry, and whether an
    admission still waits for its first token."""

    def __init__(self, n_codes: int) -> None:
        self.computed = np.zeros(n_codes, np.int64)
        self.sampled = np.zeros(n_codes, np.int64)
        self.reset = np.zeros(n_codes, bool)
        self.armed = np.zeros(n_codes, bool)
        self.scratch = np.zeros(n_codes, bool)  # all False between uses


def _scheduled_tokens(col: dict[str, np.ndarray]) -> np.ndarray:
    return (col["new_tokens"] + col["resumed_tokens"] + col["running_tokens"]).astype(np.float64)


class _Accumulators:
    def __init__(self, n: int, n_codes: int) -> None:
        big = np.iinfo(np.int64).max
        self.decode = np.zeros(n)
        self.context = np.zeros(n)
        self.seen = np.full(n_codes, big, np.int64)  # ordering key of the first time named
        self.scheduled = np.full(n_codes, -1, np.int64)  # row of the first time scheduled
        self.first = np.full(n_codes, -1, np.int64)  # rows of the first and last sample
        self.last = np.full(n_codes, -1, np.int64)
        self.tokens = np.zeros(n_codes, np.int64)
        self.prefill_done = np.full(n_codes, big, np.int64)  # row of the first token after admission


def _chunk(
    chunk: EntryChunk, k: dict[str, np.ndarray], rows: _Rows, ev: _Events, acc: _Accumulators, carry: _Carry
) -> None:
    """The scheduled entries of rows [r0, r1), carrying each request's run across chunks."""
    n = ev.n
    r0, r1 = chunk.r0, chunk.r1
    lo, hi = int(rows.first[r0]), int(rows.end[r1 - 1])
    m = hi - lo
    # 32-bit per entry where it fits (half the memory traffic); 64-bit for keys and sums.
    step_rows = np.repeat(np.arange(r0, r1, dtype=np.int32), rows.count[r0:r1])
    place = np.arange(m, dtype=np.int32) - (rows.first[step_rows] - lo).astype(np.int32)  # in its step
    req = chunk.req
    order = np.argsort(req, kind="stable")  # by request, then step
    c = req[order]
    r = step_rows[order]
    at = place[order]
    admits = at < rows.admitting[r]
    tok = chunk.tokens[order]
    spec = chunk.spec[order].astype(np.int32)  # one byte each in the columns
    value = chunk.sampled[order].astype(np.int32)
    kind = None if rows.aligned else k["s_kind"][r]
    key = c.astype(np.int64) * n + r  # increasing: by request, then row
    block = np.ones(m, bool)  # a request's first entry in this chunk
    block[1:] = c[1:] != c[:-1]
    # A request named twice in one step's scheduled groups: a dict keeps one count per id
    # (the last, as `compact.expand` builds it) and the step's resets come before all of them.
    same = np.zeros(m, bool)
    same[1:] = key[1:] == key[:-1]
    g_last = np.ones(m, bool)
    g_last[:-1] = ~same[1:]
    if same.any():
        g_first = ~same
        gid = np.cumsum(g_first) - 1
        last_of = np.flatnonzero(g_last)
        last_value = value[last_of][gid]
        value = last_value if kind is None else np.where(kind == S_ALIGNED, last_value, value)
        reset_before = np.zeros(m, bool)
        reset_before[g_first] = np.maximum.reduceat(admits, np.flatnonzero(g_first))
    else:
        reset_before = admits
    # A run starts afresh at a request's first entry ever, an admission or resumption, and
    # the entry after a preemption or finish: in this chunk, or in an earlier one (carried).
    heads = c[block]
    first_ever = np.zeros(m, bool)
    first_ever[block] = acc.scheduled[heads] == -1
    start = reset_before | first_ever
    start[block] |= carry.reset[heads]
    carry.reset[heads] = False
    i0, i1 = np.searchsorted(ev.reset_row, [r0, r1])
    reset_keys = np.sort(ev.reset_code[i0:i1] * n + ev.reset_row[i0:i1])
    after = np.searchsorted(key, reset_keys, side="right")  # the request's next entry, if any
    here = after < m
    here[here] = c[after[here]] == reset_keys[here] // n
    start[after[here]] = True
    carry.reset[reset_keys[~here] // n] = True  # its next entry is in a later chunk

    # FeatureBuilder's n: the count sampled, or 1 + drafts where the step's outcomes are unknown.
    n_used = value if kind is None else np.where(kind == S_NONE, spec + 1, value)
    delta = tok - np.maximum(0, np.where(n_used > 0, spec + 1 - n_used, 0))
    got = n_used > 0
    seg_head = start | block
    first, seg = np.flatnonzero(seg_head), np.cumsum(seg_head) - 1
    continued = ~start[first]  # a run carried in from the chunk before
    computed = _exclusive_segmented_sum(delta, first, seg)
    counted = _exclusive_segmented_sum(got, first, seg)
    computed += np.where(continued, carry.computed[c[first]], 0)[seg]
    counted += np.where(continued, carry.sampled[c[first]], 0)[seg]
    sampled_before = counted > 0
    if kind is not None:
        sampled_before = np.where(kind == S_NONE, tok <= 1 + spec, sampled_before)
    decode = ~admits & sampled_before
    width = r1 - r0
    acc.decode[r0:r1] += np.bincount(r - r0, weights=np.where(decode, tok, 0), minlength=width)
    acc.context[r0:r1] += np.bincount(r - r0, weights=computed, minlength=width)
    new = block & first_ever
    heads_new = c[new]  # named while waiting in an earlier chunk, maybe: the first time counts
    acc.seen[heads_new] = np.minimum(
        acc.seen[heads_new], _key(r[new].astype(np.int64), 0, at[new].astype(np.int64))
    )
    acc.scheduled[c[new]] = r[new]
    tail = np.flatnonzero(np.append(block[1:], m > 0))  # each request's last entry here
    carry.computed[c[tail]] = computed[tail] + delta[tail]
    carry.sampled[c[tail]] = counted[tail] + got[tail]

    # Waiting: LatencyTracker's first time named (with the scheduled entries' keys above).
    w0, w1 = (int(rows.wait_end[r0 - 1]) if r0 else 0), int(rows.wait_end[r1 - 1])
    if w1 > w0:
        w_rows = np.repeat(np.arange(r0, r1, dtype=np.int64), k["k_wait"][r0:r1])
        w_place = np.arange(w0, w1, dtype=np.int64) - (rows.wait_end[w_rows] - k["k_wait"][w_rows])
        np.minimum.at(acc.seen, chunk.wait.astype(np.int64), _key(w_rows, 1, w_place))

    # Samples: an aligned step's scheduled entries (one per request and step), a dict
    # step's own entries.
    sample = g_last & (value > 0)
    if kind is not None:
        sample &= kind == S_ALIGNED
    s_key, s_n = key[sample], value[sample].astype(np.int64)
    j0, j1 = (int(rows.item_end[r0 - 1]) if r0 else 0), int(rows.item_end[r1 - 1])
    if j1 > j0:
        item_row = np.repeat(np.arange(r0, r1, dtype=np.int64), k["k_items"][r0:r1])
        item_n = chunk.items_n.astype(np.int64)
        positive = item_n > 0
        item_keys = chunk.items_req.astype(np.int64)[positive] * n + item_row[positive]
        s_key = np.concatenate([s_key, item_keys])
        s_n = np.concatenate([s_n, item_n[positive]])
        o = np.argsort(s_key, kind="stable")
        s_key, s_n = s_key[o], s_n[o]
    _samples(s_key, s_n, r0, r1, ev, acc, carry)


def _samples(
    s_key: np.ndarray, s_n: np.ndarray, r0: int, r1: int, ev: _Events, acc: _Accumulators, carry: _Carry
) -> None:
    """Per request, from its samples in rows [r0, r1) (keys code * n + row, sorted): first and
    last rows, tokens, and the first after an admission with no finish in between."""
    n = ev.n
    if len(s_key):
        code = s_key // n
        head = np.ones(len(s_key), bool)
        head[1:] = code[1:] != code[:-1]
        starts = np.flatnonzero(head)
        ends = np.append(starts[1:], len(s_key)) - 1
        heads = code[starts]
        unset = acc.first[heads] == -1
        acc.first[heads[unset]] = (s_key[starts] - heads * n)[unset]
        acc.last[heads] = s_key[ends] - code[ends] * n
        acc.tokens[heads] += np.add.reduceat(s_n, starts)
    # A first token after an admission, no finish in between: in a step, its admissions
    # come first, then its samples, then its finishes (a finish in the admission's own step
    # counts; one in the sample's step does not).
    a0, a1 = np.searchsorted(ev.admit_row, [r0, r1])
    f0, f1 = np.searchsorted(ev.fin_row, [r0, r1])
    a_code = ev.admit_code[a0:a1]
    # Only the samples of requests with an admission pending a first token (from an earlier
    # chunk, or admitted in this one): most samples are of requests long past their first.
    s_code = s_key // n
    mark = carry.armed[s_code]
    if len(a_code):
        carry.scratch[a_code] = True
        mark |= carry.scratch[s_code]
        carry.scratch[a_code] = False
    s_key = s_key[mark]
    a_key = a_code * n + ev.admit_row[a0:a1]
    f_key = ev.fin_code[f0:f1] * n + ev.fin_row[f0:f1]
    keys = np.concatenate([a_key * 3, s_key * 3 + 1, f_key * 3 + 2])
    o = np.argsort(keys, kind="stable")
    keys = keys[o]
    if not len(keys):
        return
    what = keys % 3  # 0 admission, 1 sample, 2 finish
    code = keys // 3 // n
    first = np.ones(len(keys), bool)
    first[1:] = code[1:] != code[:-1]
    before = np.roll(what, 1)  # the event before, of the same request unless `first`
    armed = np.where(first, carry.armed[code], before == 0)
    found = (what == 1) & armed
    np.minimum.at(acc.prefill_done, code[found], keys[found] // 3 % n)
    last = np.append(np.flatnonzero(first)[1:], len(keys)) - 1
    carry.armed[code[last]] = what[last] == 0


def _exclusive_segmented_sum(values: np.ndarray, first: np.ndarray, seg: np.ndarray) -> np.ndarray:
    """For each element, the sum of `values` before it in its segment (`first`: each
    segment's first element; `seg`: each element's segment)."""
    excl = np.cumsum(values, dtype=np.int64)
    excl -= values
    return excl - excl[first][seg]


_NONE = np.iinfo(np.int64).min  # no such step


def _request_index(
    e: EntryColumns, ev: _Events, prefill_done: np.ndarray, n_codes: int
) -> tuple[tuple[Any, ...], tuple[np.ndarray, np.ndarray]]:
    """requests._Builder's index as columns (requests.RequestColumns' fields): each request
    in the order the reference first names it (admitted, resumed, preempted, finished),
    with its events; and each first admission (position in that order, step)."""
    big = np.iinfo(np.int64).max
    steps = e.columns["step"].astype(np.int64)
    first = np.full(n_codes, big, np.int64)
    for codes, keys in ((ev.new_code, ev.new_key), (ev.res_code, ev.res_key)):
        np.minimum.at(first, codes, keys)
    for codes, keys in ((ev.pre_code, ev.pre_key), (ev.fin_code, ev.fin_key)):
        np.minimum.at(first, codes, keys)
    created = np.flatnonzero(first != big)
    created = created[np.argsort(first[created], kind="stable")]
    position = np.full(n_codes, -1, np.int64)
    position[created] = np.arange(len(created))

    def last_step(codes: np.ndarray, rows: np.ndarray) -> np.ndarray:
        row = np.full(n_codes, -1, np.int64)
        np.maximum.at(row, codes, rows)
        return np.where(row >= 0, steps[np.maximum(row, 0)], _NONE)[created]

    done = prefill_done
    prefill = np.where(done != big, steps[np.where(done != big, done, 0)], _NONE)[created]
    since_key = np.full(n_codes, big, np.int64)
    np.minimum.at(since_key, ev.new_code, ev.new_key)
    since_codes = np.flatnonzero(since_key != big)
    since_codes = since_codes[np.argsort(since_key[since_codes], kind="stable")]
    since_steps = steps[since_key[since_codes] >> _ROW_SHIFT]

    def lists(codes: np.ndarray, keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Each request's steps of these events, in order, flat; and where each request's end."""
        at = position[codes]
        o = np.lexsort((keys, at))
        ends = np.cumsum(np.bincount(at, minlength=len(created)))
        return steps[keys[o] >> _ROW_SHIFT].astype(np.int64), ends.astype(np.int64)

    ids = e.ids
    columns = (
        [ids[c] for c in created.tolist()],
        last_step(ev.new_code, ev.new_row),
        prefill,
        last_step(ev.fin_code, ev.fin_row),
        *lists(ev.pre_code, ev.pre_key),
        *lists(ev.res_code, ev.res_key),
    )
    return columns, (position[since_codes], since_steps.astype(np.int64))
