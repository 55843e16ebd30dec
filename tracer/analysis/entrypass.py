"""The step pass and the request index, computed with NumPy from a trace's entry columns
(tracer.trace.entries) instead of record by record.

The scheduled entries (most of them) are sorted by request (a stable sort: each request's
entries stay in step order) and processed in cache-sized chunks of whole requests.
Per-request state that the record-by-record code keeps in dicts (timing.FeatureBuilder's
computed tokens and "sampled since admitted") becomes segmented sums over that order: a
segment is a request's run between two resets (an admission or resumption before the
step, a preemption or finish after it, joined in by key). The other entries (admissions,
preemptions, finishes, waiting ids, a dict `sampled`'s own entries) are few, and are joined
by (request, step) keys: LatencyTracker's first-seen step, first and last token, and the
request index's events and first token after an admission with no finish in between.

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
from tracer.trace.entries import NO_CONTEXT, S_ALIGNED, S_NONE, Entries
from tracer.trace.reader import Trace, entries_of

NEW, RESUMED, RUNNING = range(3)
# Keys that order a step's entries as its record lists them: row, then kind (scheduled,
# waiting; or admitted/resumed, preempted, finished), then place in its list.
_ROW_SHIFT, _RANK_SHIFT = 22, 20
_POS_LIMIT = 1 << _RANK_SHIFT
CHUNK = 1 << 18  # scheduled entries per chunk of the sorted stream: its arrays stay in cache


@dataclass
class EntryPass:
    features: timing.StepFeatures
    times: RequestTimes
    # The request index: requests.RequestColumns' fields, one entry per request in the order
    # the reference creates them; and each first admission (position there, step).
    events: tuple[Any, ...]
    since: tuple[np.ndarray, np.ndarray]


_DONE: PerTrace[EntryPass] = PerTrace()


def computed(trace: Trace) -> EntryPass | None:
    """The pass for `trace`, run once per Trace object (the step pass and the request index
    each take their part); None when the trace's records do not fit entry columns."""
    found = _DONE.get(trace)
    if found is None:
        e = entries_of(trace)
        if e is None:
            return None
        try:
            found = entry_pass(trace, e)
        except ValueError:  # a million requests in one step: the reference copes
            return None
        finally:
            e.release()  # the results are kept; the columns stay mapped
        _DONE.put(trace, found)
    return found


def entry_pass(trace: Trace, e: Entries) -> EntryPass:
    """The step features, request times and request index of `trace` from its entries `e`.

    The scheduled entries (most of them: 51 million in a 200k-step trace at 256 running)
    are sorted by request code (a stable sort: each request's entries stay in step order)
    and processed in chunks of whole requests; the few others (admissions, preemptions,
    finishes, waiting ids, a dict `sampled`'s entries) are joined by key."""
    n = len(trace)
    k = {name: v.astype(np.int64) for name, v in e.steps.items()}
    ks = k["k_new"] + k["k_res"] + k["k_run"]
    longest = max(int(k[name].max(initial=0)) for name in ("k_wait", "k_pre", "k_fin"))
    if max(int(ks.max(initial=0)), longest) >= _POS_LIMIT:
        raise ValueError("a step names more requests than the pass's keys hold")
    sched_end = np.cumsum(ks)
    sched_first = sched_end - ks
    n_codes = len(e.ids)
    ev = _events(e, k, sched_first, n, n_codes)
    req = e.sched["req"]
    order = np.argsort(req, kind="stable")  # runs of increasing codes (admission order): cheap
    codes = req[order]
    big = np.iinfo(np.int64).max
    acc = _Accumulators(n, n_codes)
    rows = _Rows(
        of=np.repeat(np.arange(n, dtype=np.int32), ks),
        first=sched_first,
        admitting=k["k_new"] + k["k_res"],
        aligned=bool((k["s_kind"] == S_ALIGNED).all()),
    )
    lo, code_lo = 0, 0
    while lo < len(order):
        hi = min(len(order), lo + CHUNK)
        if hi < len(order):  # end on a request boundary
            hi = int(np.searchsorted(codes, codes[hi - 1], side="right"))
        code_hi = int(codes[hi - 1]) + 1 if hi < len(order) else n_codes
        _chunk(e, k, rows, order[lo:hi], codes[lo:hi], (code_lo, code_hi), ev, acc)
        lo, code_lo = hi, code_hi
    if code_lo < n_codes:  # requests never scheduled: a dict `sampled`'s entries only
        lo_key, hi_key = code_lo * n, n_codes * n
        items = slice(np.searchsorted(ev.item_keys, lo_key), np.searchsorted(ev.item_keys, hi_key))
        _samples(ev.item_keys[items], ev.item_n[items], n, lo_key, hi_key, ev, acc)

    # -- timing.FeatureBuilder ---------------------------------------------------------
    recorded = e.ctx != NO_CONTEXT
    columns = {
        "step": np.ones(n),
        "prefill_tokens": _scheduled_tokens(trace) - acc.decode,
        "decode_tokens": acc.decode,
        "requests": ks.astype(np.float64),
        "finished_requests": k["k_fin"].astype(np.float64),
        "context_tokens": np.where(recorded, e.ctx.astype(np.float64), acc.context),
        "query_rows": trace.columns["query_rows"].astype(np.float64),
    }
    features = timing.StepFeatures(
        {name: columns[name] for name in timing.FEATURES}, context_recorded=bool(n and recorded.all())
    )

    # -- throughput.LatencyTracker: first seen scheduled or waiting, first scheduled -----
    np.minimum.at(acc.seen, ev.wait_code, ev.wait_key)
    # The `a` inputs (one per request): a step's arrivals come before what it lists.
    arr_codes = e.arr.astype(np.int64)
    arr_rows = np.repeat(np.arange(n, dtype=np.int64), e.steps["k_arr"].astype(np.int64))
    arrived = np.full(n_codes, -1, np.int64)
    arrival = np.full(n_codes, np.nan)
    arr_at = np.zeros(n_codes, np.int64)
    got, first_arr = np.unique(arr_codes, return_index=True)  # each request's first `a`
    arrived[got], arrival[got], arr_at[got] = arr_rows[first_arr], e.arr_t[first_arr], first_arr
    # Requests in the order they first appear: (row, arrival before listing, place).
    listed = acc.seen != big
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
    times = RequestTimes(
        seen=seen_row[codes],
        first=acc.first[codes],
        last=acc.last[codes],
        tokens=acc.tokens[codes],
        arrived=arrived[codes],
        scheduled=acc.scheduled[codes],
        arrival=arrival[codes],
        ids=[ids[c] for c in codes.tolist()],
    )
    steps = trace.columns["step"].astype(np.int64)
    events, since = _request_index(e, ev, acc, steps, n_codes)
    return EntryPass(features, times, events, since)


@dataclass
class _Events:
    """The entries other than the scheduled ones, and the scheduled ones that admit or
    resume, each with its request code, row and ordering key."""

    new_code: np.ndarray
    new_row: np.ndarray
    new_key: np.ndarray
    res_code: np.ndarray
    res_row: np.ndarray
    res_key: np.ndarray
    pre_code: np.ndarray
    pre_row: np.ndarray
    pre_key: np.ndarray
    fin_code: np.ndarray
    fin_row: np.ndarray
    fin_key: np.ndarray
    wait_code: np.ndarray
    wait_key: np.ndarray
    reset: np.ndarray  # code * n + row of each preemption and finish, sorted (resets after the step)
    fin_sorted: np.ndarray  # code * n + row of each finish, sorted
    item_keys: np.ndarray  # code * n + row of each dict-`sampled` entry with a count > 0, sorted
    item_n: np.ndarray
    admit_keys: np.ndarray  # code * n + row of each admission of an id that is a string, sorted
    n: int


def _rows_pos(counts: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    """For entries laid out row by row, `counts[row]` per row: each one's row and place in its row."""
    rows = np.repeat(np.arange(n, dtype=np.int64), counts)
    pos = np.arange(len(rows), dtype=np.int64) - np.repeat(np.cumsum(counts) - counts, counts)
    return rows, pos


def _key(rows: np.ndarray, rank: int, pos: np.ndarray) -> np.ndarray:
    return (rows << _ROW_SHIFT) | (rank << _RANK_SHIFT) | pos


def _events(e: Entries, k: dict[str, np.ndarray], sched_first: np.ndarray, n: int, n_codes: int) -> _Events:
    req = e.sched["req"]
    new_row, new_pos = _rows_pos(k["k_new"], n)
    res_row, res_pos = _rows_pos(k["k_res"], n)
    res_pos = res_pos + k["k_new"][res_row]  # its place in the scheduled order
    pre_row, pre_pos = _rows_pos(k["k_pre"], n)
    fin_row, fin_pos = _rows_pos(k["k_fin"], n)
    wait_row, wait_pos = _rows_pos(k["k_wait"], n)
    item_row, _ = _rows_pos(k["k_items"], n)
    new_code = req[sched_first[new_row] + new_pos].astype(np.int64)
    res_code = req[sched_first[res_row] + res_pos].astype(np.int64)
    pre_code, fin_code = e.pre.astype(np.int64), e.fin.astype(np.int64)
    positive = e.items["n"] > 0
    item_keys = e.items["req"][positive].astype(np.int64) * n + item_row[positive]
    item_order = np.argsort(item_keys, kind="stable")
    # requests._Builder keeps only ids that are strings pending a first token.
    is_str = np.fromiter((type(rid) is str for rid in e.ids), bool, n_codes)
    pending = is_str[new_code]
    return _Events(
        new_code=new_code,
        new_row=new_row,
        new_key=_key(new_row, 0, new_pos),
        res_code=res_code,
        res_row=res_row,
        res_key=_key(res_row, 0, res_pos),
        pre_code=pre_code,
        pre_row=pre_row,
        pre_key=_key(pre_row, 2, pre_pos),
        fin_code=fin_code,
        fin_row=fin_row,
        fin_key=_key(fin_row, 3, fin_pos),
        wait_code=e.wait.astype(np.int64),
        wait_key=_key(wait_row, 1, wait_pos),
        reset=np.sort(np.concatenate([pre_code * n + pre_row, fin_code * n + fin_row])),
        fin_sorted=np.sort(fin_code * n + fin_row),
        item_keys=item_keys[item_order],
        item_n=e.items["n"][positive].astype(np.int64)[item_order],
        admit_keys=np.sort(new_code[pending] * n + new_row[pending]),
        n=n,
    )


@dataclass
class _Rows:
    of: np.ndarray  # each scheduled entry's row
    first: np.ndarray  # each row's first scheduled entry
    admitting: np.ndarray  # each row's admitted and resumed entries (they come first)
    aligned: bool  # every step's `sampled` is aligned with its scheduled order


def _scheduled_tokens(trace: Trace) -> np.ndarray:
    col = trace.columns
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
    e: Entries,
    k: dict[str, np.ndarray],
    rows: _Rows,
    idx: np.ndarray,
    c32: np.ndarray,
    code_range: tuple[int, int],
    ev: _Events,
    acc: _Accumulators,
) -> None:
    """The scheduled entries `idx` (sorted by request, whole requests), codes `c32`; the
    chunk answers for the requests of `code_range` [lo, hi)."""
    n, m = ev.n, len(idx)
    c = c32.astype(np.int64)
    r = rows.of[idx]
    admits = (idx - rows.first[r]) < rows.admitting[r]
    tok = e.sched["tokens"][idx]
    spec = e.sched["spec"][idx].astype(np.int32)  # one byte each in the columns
    value = e.sched["sampled"][idx].astype(np.int32)
    kind = None if rows.aligned else k["s_kind"][r]
    key = c * n + r  # increasing: by request, then row
    block = np.ones(m, bool)
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
    # Preempted or finished in an earlier step: the next entry starts afresh.
    lo_key, hi_key = code_range[0] * n, code_range[1] * n
    resets = ev.reset[np.searchsorted(ev.reset, lo_key) : np.searchsorted(ev.reset, hi_key)]
    after = np.searchsorted(key, resets, side="right")  # the request's next entry, if any
    inside = after < m
    after, resets = after[inside], resets[inside]
    after = after[c[after] == resets // n]
    start = block | reset_before
    start[after] = True

    # FeatureBuilder's n: the count sampled, or 1 + drafts where the step's outcomes are unknown.
    n_used = value if kind is None else np.where(kind == S_NONE, spec + 1, value)
    delta = tok - np.maximum(0, np.where(n_used > 0, spec + 1 - n_used, 0))
    first, seg = np.flatnonzero(start), np.cumsum(start) - 1
    computed = _exclusive_segmented_sum(delta.astype(np.int64), first, seg)
    sampled_before = _exclusive_segmented_sum((n_used > 0).astype(np.int32), first, seg) > 0
    if kind is not None:
        sampled_before = np.where(kind == S_NONE, tok <= 1 + spec, sampled_before)
    decode = ~admits & sampled_before
    acc.decode += np.bincount(r, weights=np.where(decode, tok, 0), minlength=n)
    acc.context += np.bincount(r, weights=computed, minlength=n)
    at = idx[block]
    acc.seen[c[block]] = _key(r[block].astype(np.int64), 0, at - rows.first[r[block]])
    acc.scheduled[c[block]] = r[block]

    # Samples: an aligned step's scheduled entries (one per request and step), a dict
    # step's own entries.
    sample = g_last & (value > 0)
    if kind is not None:
        sample &= kind == S_ALIGNED
    s_key, s_n = key[sample], value[sample].astype(np.int64)
    items = slice(np.searchsorted(ev.item_keys, lo_key), np.searchsorted(ev.item_keys, hi_key))
    if items.stop > items.start:
        s_key = np.concatenate([s_key, ev.item_keys[items]])
        s_n = np.concatenate([s_n, ev.item_n[items]])
        o = np.argsort(s_key, kind="stable")
        s_key, s_n = s_key[o], s_n[o]
    _samples(s_key, s_n, n, lo_key, hi_key, ev, acc)


def _samples(
    s_key: np.ndarray, s_n: np.ndarray, n: int, lo_key: int, hi_key: int, ev: _Events, acc: _Accumulators
) -> None:
    """Per request, from its samples (keys code * n + row, sorted): first and last rows, tokens,
    and the first after an admission with no finish in between."""
    if len(s_key):
        code = s_key // n
        head = np.ones(len(s_key), bool)
        head[1:] = code[1:] != code[:-1]
        starts = np.flatnonzero(head)
        ends = np.append(starts[1:], len(s_key)) - 1
        acc.first[code[starts]] = s_key[starts] - code[starts] * n
        acc.last[code[starts]] = s_key[ends] - code[ends] * n
        acc.tokens[code[starts]] = np.add.reduceat(s_n, starts)
    a_key = ev.admit_keys[np.searchsorted(ev.admit_keys, lo_key) : np.searchsorted(ev.admit_keys, hi_key)]
    if not len(a_key) or not len(s_key):
        return
    j = np.searchsorted(s_key, a_key)
    ok = j < len(s_key)
    j = np.minimum(j, len(s_key) - 1)
    ok &= s_key[j] // n == a_key // n
    # No finish at or after the admission's step and before the sample's.
    fins = np.searchsorted(ev.fin_sorted, s_key[j]) - np.searchsorted(ev.fin_sorted, a_key)
    ok &= fins == 0
    np.minimum.at(acc.prefill_done, a_key[ok] // n, s_key[j][ok] % n)


def _exclusive_segmented_sum(values: np.ndarray, first: np.ndarray, seg: np.ndarray) -> np.ndarray:
    """For each element, the sum of `values` before it in its segment (`first`: each
    segment's first element; `seg`: each element's segment)."""
    excl = np.cumsum(values)
    excl -= values
    return excl - excl[first][seg]


_NONE = np.iinfo(np.int64).min  # no such step


def _request_index(
    e: Entries, ev: _Events, acc: _Accumulators, steps: np.ndarray, n_codes: int
) -> tuple[tuple[Any, ...], tuple[np.ndarray, np.ndarray]]:
    """requests._Builder's index as columns (requests.RequestColumns' fields): each request
    in the order the reference first names it (admitted, resumed, preempted, finished),
    with its events; and each first admission (position in that order, step)."""
    big = np.iinfo(np.int64).max
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

    done = acc.prefill_done
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
