"""One record into one packed row: the fast path and the checks both parse paths share.

Records shaped as the recorder writes them take the fast path (`fast_step_row`,
`fast_runner_row`) with the same checks as the general path (TraceBuilder's, in
tracer.trace.builder), which is the reference for values and for the error contract: a
malformed field raises TraceError naming the file, line and field.
"""

from __future__ import annotations

import struct
from operator import itemgetter
from typing import Any

from tracer.trace import compact
from tracer.trace.columns import ROW, RUNNER_ROW
from tracer.trace.errors import TraceError

# The fast path reads a step's keys in one C call each (a missing key sends the
# record down the general path).
_STEP_KEYS = itemgetter(
    "step", "t", "target", "input", "query", "new", "resumed", "running",
    "preempted", "finished", "sampled", "num_waiting", "num_running", "sched_us", "kv_usage",
)  # fmt: skip
_TARGET_KEYS = itemgetter("cap", "used", "left")
_INPUT_KEYS = itemgetter("cap", "used", "reserved", "left")
_QUERY_KEYS = itemgetter("per_req", "rows", "cap")
_RUNNER_KEYS = itemgetter("step", "pass", "rows", "cap")
_COLUMNS = itemgetter(*compact.COLUMNS)
_TOKENS = itemgetter(1)
_SPEC = itemgetter(2)
_JUST_INT = frozenset({int})


def held_preempted(preempted: Any, *groups: Any) -> int:
    """How many of a step's preempted requests still hold tokens in that step (a group in
    either layout: 1.1 entries or 1.2 arrays)."""
    if not preempted:
        return 0
    held = set(preempted).__contains__
    return sum(
        sum(map(held, g["id"])) if type(g) is dict else sum(1 for e in g if held(e[0])) for g in groups
    )


def _group_sums(group: Any) -> tuple[int, int, int]:
    """(requests, tokens, spec tokens) of one request group in either layout, for the fast
    path; TypeError for anything the general path must judge (`compact.columns`' checks)."""
    if type(group) is dict:
        ids, tokens, spec, demand = _COLUMNS(group)
        n = len(ids)
        if (
            type(ids) is list
            and type(tokens) is list
            and type(spec) is list
            and type(demand) is list
            and len(tokens) == n
            and len(spec) == n
            and len(demand) == n
            and (not n or set(map(type, tokens)) == _JUST_INT)
        ):
            return n, sum(tokens), sum(spec)  # a float spec makes pack() refuse the row
        raise TypeError("not the recorder's compact group")
    if type(group) is not list or (group and set(map(type, map(_TOKENS, group))) != _JUST_INT):
        raise TypeError("not the recorder's entries")
    return len(group), sum(map(_TOKENS, group)), sum(map(_SPEC, group))


def kv_pool(header: dict[str, Any] | None) -> int | None:
    """The header's KV blocks, which no step's free count may exceed (None: unknown)."""
    blocks = (header or {}).get("config", {}).get("num_kv_blocks")
    return blocks if type(blocks) is int and blocks > 0 else None


def fast_step_row(
    r: dict[str, Any], start: int, end: int, last: int, pool: int | None = None
) -> bytes | None:
    """The packed row of step record `r` (its line at bytes [start, end)) when it is shaped
    as the recorder writes it and its step number exceeds `last`; None sends it down the
    general path, which decides. The reader's fast path, and the recording index's
    (tracer.trace.recording_index) for the records the recorder hands its writer; `pool`: the header's
    KV blocks, which no free count may exceed."""
    try:
        step, t, tg, ip, q, new, res, run, pre, fin, smp, nw, nr, su, kv = _STEP_KEYS(r)
        tc, tu, tl = _TARGET_KEYS(tg)
        ic, iu, ir, il = _INPUT_KEYS(ip)
        qp, qr, qc = (0, 0, -1) if q is None else _QUERY_KEYS(q)
        nt = rt = ut = spec = 0
        ok = type(new) is list and type(res) is list and type(run) is list
        if ok:  # 1.1 entries (or 1.2 with every group empty)
            # Token counts must be ints, not bools (so each entry is a list of
            # >= 2): the general path's check, in C.
            if new:
                ok = set(map(type, map(_TOKENS, new))) == _JUST_INT
                nt, spec = sum(map(_TOKENS, new)), sum(map(_SPEC, new))
            if res and ok:
                ok = set(map(type, map(_TOKENS, res))) == _JUST_INT
                rt, spec = sum(map(_TOKENS, res)), spec + sum(map(_SPEC, res))
            if run and ok:
                ok = set(map(type, map(_TOKENS, run))) == _JUST_INT
                ut, spec = sum(map(_TOKENS, run)), spec + sum(map(_SPEC, run))
            is_compact = type(smp) is list
            n_new, n_res, n_run = len(new), len(res), len(run)
        else:  # 1.2 parallel arrays: compact.columns' checks, in C
            is_compact = ok = True
            (n_new, nt, s1), (n_res, rt, s2), (n_run, ut, s3) = map(_group_sums, (new, res, run))
            spec = s1 + s2 + s3
        if is_compact and ok:
            # sampled aligned with the scheduled requests; drafts refs in range.
            n_all = n_new + n_res + n_run
            ok = type(smp) is not list or len(smp) == n_all
            for e in r.get("inputs") or ():
                if type(e) is list and len(e) == 3 and e[0] == "d" and type(e[1]) is list:
                    ok = ok and compact.refs_ok(e[1], n_all)
        # The budget fields must be exactly ints. The other values are
        # checked by pack() itself: "q" takes ints and bools (read as 1/0,
        # as int() does on the general path) and refuses the rest, "d"
        # takes numbers, so anything else goes down the general path.
        if (
            ok
            and why_problem(r, pool) is None
            and type(step) is int
            and step > last
            and type(tc) is int
            and type(tu) is int
            and type(tl) is int
            and type(ic) is int
            and type(iu) is int
            and type(il) is int
        ):
            return ROW.pack(
                step, tc, tu, tl, ic, iu, ir, il, qp, qr, qc or -1,
                n_new, n_res, n_run, len(pre), len(fin), nt, rt, ut, spec,
                -1 if smp is None else sum(smp.values()) if type(smp) is dict else sum(smp),
                nw, nr, held_preempted(pre, new, res, run) if pre else 0, start, end,
                t, su, kv,
            )  # fmt: skip
    except (KeyError, TypeError, IndexError, AttributeError, struct.error):
        pass  # not the recorder's shape: the general path decides
    return None


def fast_runner_row(r: dict[str, Any]) -> bytes | None:
    """The packed row of runner record `r` as the recorder writes it, else None (the general path)."""
    try:
        step, pass_, rows_, cap = _RUNNER_KEYS(r)
        padded = r.get("padded")
        if (
            type(step) is int
            and type(rows_) is int
            and (cap is None or type(cap) is int)
            and (padded is None or type(padded) is int)
            and (pass_ == "target" or pass_ == "draft")
        ):
            return RUNNER_ROW.pack(
                step, pass_ != "target", rows_, -1 if cap is None else cap, -1 if padded is None else padded
            )
    except (KeyError, TypeError, struct.error):
        pass
    return None


def with_defaults(record: dict[str, Any], defaults: dict[str, Any]) -> dict[str, Any]:
    for key, value in defaults.items():
        if key not in record:
            record[key] = list(value) if isinstance(value, list) else value
    return record


def int_field(record: dict[str, Any], key: str, sub: str | None, path: str, line: int) -> int:
    parent = record.get(key)
    value = parent if sub is None else (parent.get(sub) if isinstance(parent, dict) else None)
    if type(value) is not int:
        name = key if sub is None else f"{key}.{sub}"
        raise TraceError(path, f"expected an integer, got {value!r}", line=line, field=name)
    return value


def why_problem(r: dict[str, Any], pool: int | None = None) -> tuple[str, str] | None:
    """(field, what is wrong) for a malformed format 1.3 "why" field of a step, else None;
    `pool`: the header's KV blocks (None: unknown). Absent or null is fine (older traces); a
    torn or contradictory value is an error, never a reason invented from it."""
    kv = r.get("kv_free")
    if kv is not None:
        if not (
            type(kv) is list and len(kv) == 2 and type(kv[0]) is int and type(kv[1]) is int and min(kv) >= 0
        ):
            return "kv_free", f"expected [free blocks before, after] as two non-negative integers, got {kv!r}"
        if pool is not None and max(kv) > pool:
            return "kv_free", f"{max(kv)} free blocks contradict the header's pool of {pool} (num_kv_blocks)"
    cached = r.get("cached")
    if cached is not None and not (
        type(cached) is dict and all(type(v) is int and v > 0 for v in cached.values())
    ):
        return "cached", f"expected {{id: tokens > 0}}, got {cached!r}"
    status = r.get("waiting_status")
    if status is not None and not (type(status) is dict and all(type(v) is str for v in status.values())):
        return "waiting_status", f"expected {{id: state}}, got {status!r}"
    pre = r.get("preemptions")
    if pre is not None:
        ok = type(pre) is list and all(
            type(p) is list
            and len(p) == 5
            and type(p[0]) is str
            and (p[1] is None or type(p[1]) is str)
            and all(type(x) is int and x >= 0 for x in p[2:])
            for p in pre
        )
        if not ok:
            return (
                "preemptions",
                f"expected [[victim, trigger, lost, free before, free after], ...], got {pre!r}",
            )
        if len(pre) != len(r.get("preempted") or ()):
            return (
                "preemptions",
                f"{len(pre)} entries contradict the {len(r.get('preempted') or ())} preempted",
            )
    paused = r.get("paused")
    if paused is not None and type(paused) is not str:
        return "paused", f"expected a pause state name or null, got {paused!r}"
    return None


def req_list(record: dict[str, Any], key: str, path: str, line: int) -> list[Any]:
    value = record.get(key, [])
    if not isinstance(value, list) or any(
        not isinstance(e, list) or len(e) < 2 or type(e[1]) is not int for e in value
    ):
        raise TraceError(path, "expected a list of [id, tokens, ...] entries", line=line, field=key)
    return value
