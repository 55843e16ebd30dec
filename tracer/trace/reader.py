"""Read traces into columnar arrays, with per-step detail on demand.

- Plain, gzip and (when the `zstandard` module is present) zstd files, told apart by their
  first bytes (tracer.trace.codec), whatever their names.
- A torn last line, as from a killed server, is expected: every complete step
  loads and `Trace.torn` says where the file tore.
- A malformed line raises TraceError naming the file, line and field. With
  strict=False it is skipped and kept in `Trace.problems` instead.
- A newer major schema version is refused; older minors and unknown keys are fine.

TraceBuilder takes bytes incrementally, so a follower of a growing file or a
live stream reuses the same parsing and validation. open_builder() gives a
follower of a plain file one that keeps only columns (steps are read back from
the file).

Memory: a Trace holds its columns; where each step's record lives is its store
(tracer.trace.store). load() never holds a plain file (4 MiB windows, then a
FileStore) nor a multi-member gzip file (member by member, then a
GzipMemberStore); a single-member gzip and a zstd file are held decompressed, as before.
A big trace's columns are saved in a sidecar (tracer.trace.sidecar) after the
first load and mapped on the next.

Speed (bench/p2_ingest.py): each line is parsed once with orjson and reduced
on the spot to one packed row (struct) per step, so no per-record Python object
outlives its line. Records shaped as the recorder writes them take a fast path
with the same checks; anything else (older traces, missing keys, odd types,
errors) goes through the general path, which is the reference for values and
for the error contract.
"""

from __future__ import annotations

import dataclasses
import fcntl
import io
import logging
import os
import stat
import struct
import zlib
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from operator import itemgetter
from pathlib import Path
from typing import IO, Any

import numpy as np
import orjson

from tracer.trace import codec, compact, schema, sidecar
from tracer.trace.entries import SIDECAR_DTYPES as _ENTRY_DTYPES
from tracer.trace.entries import Entries, EntryCollector
from tracer.trace.errors import TraceError, TraceHeaderError, TraceOrderError, TraceVersionError
from tracer.trace.store import (
    MEMBER_DTYPE,
    PIECE,
    FileStore,
    GzipMemberStore,
    MemoryStore,
    Store,
    file_identity,
)

Progress = Callable[[int, int], None]
logger = logging.getLogger("schedscope.reader")
__all__ = [
    "Torn",
    "Trace",
    "TraceBuilder",
    "TraceError",
    "TraceHeaderError",
    "TraceOrderError",
    "TraceVersionError",
    "load",
    "open_builder",
]


@dataclass(frozen=True)
class Torn:
    """Where an incomplete last line starts (1-based line, byte offset) and its length."""

    line: int
    offset: int
    length: int

    def describe(self) -> str:
        return f"torn at line {self.line} (byte {self.offset}, {self.length} bytes of an incomplete record)"


# Step columns: name -> (dtype, missing value).
_INT_COLS = (
    "step",
    "target_cap",
    "target_used",
    "target_left",
    "input_cap",
    "input_used",
    "input_reserved",
    "input_left",
    "query_per_req",
    "query_rows",
    "query_cap",
    "n_new",
    "n_resumed",
    "n_running",
    "n_preempted",
    "n_finished",
    "new_tokens",
    "resumed_tokens",
    "running_tokens",
    "spec_tokens",
    "sampled_tokens",
    "num_waiting",
    "num_running",
    # Preempted requests that still hold tokens in the same step (a budget leak
    # when > 0); counted here so the detector parses only the steps that leak.
    "n_preempted_held",
)
_FLOAT_COLS = ("t", "sched_us", "kv_usage")
RUNNER_COLS = ("target_rows", "target_cap", "draft_rows", "draft_cap", "target_padded", "draft_padded")

# One packed row per step: the int columns, the line's byte span, the float columns.
_ROW = struct.Struct(f"<{len(_INT_COLS) + 2}q{len(_FLOAT_COLS)}d")
_ROW_DTYPE = np.dtype(
    [(name, "<i8") for name in (*_INT_COLS, "_start", "_end")] + [(name, "<f8") for name in _FLOAT_COLS]
)
# A packed row starts with its step number: the builder's last step is read from its rows,
# so a builder resumed from a sidecar knows it without keeping it apart.
assert _INT_COLS[0] == "step"
_ROW_STEP = struct.Struct("<q")
_NO_STEP = -(1 << 63)  # before the first step: any number may come
# One packed row per runner record: step, pass (0 target, 1 draft), rows, cap, padded (-1: none).
_RUNNER_ROW = struct.Struct("<5q")
_RUNNER_DTYPE = np.dtype(
    [("step", "<i8"), ("pass", "<i8"), ("rows", "<i8"), ("cap", "<i8"), ("padded", "<i8")]
)
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
_ENTRY_KEYS = (
    "step",
    "inputs",
    "new",
    "resumed",
    "running",
    "sampled",
    "waiting_demand",
    "preempted",
    "finished",
    "context_tokens",
)


@dataclass
class Trace:
    path: str
    header: dict[str, Any]
    columns: dict[str, np.ndarray]
    runner: dict[str, np.ndarray]
    footer: dict[str, Any] | None
    torn: Torn | None = None
    problems: list[TraceError] = field(default_factory=list)
    gaps: list[tuple[int, int]] = field(default_factory=list)
    # `hooks` records: which runner/speculator hooks the model-runner process had active.
    hooks: list[dict[str, Any]] = field(default_factory=list)
    # Where each step's record is (tracer.trace.store): in memory, in the file read in
    # place, or in a gzip member; `_spans` are the records' [start, end) in it.
    store: Store = field(default_factory=lambda: MemoryStore(b""))
    _spans: np.ndarray = field(default_factory=lambda: np.zeros((0, 2), dtype=np.int64))
    # The file state (tracer.trace.sidecar.fingerprint) a whole big file was loaded from:
    # derived sidecars (tracer.analysis.step_features) are valid for exactly it. None otherwise.
    fingerprint: dict[str, Any] | None = None
    # Per-request entry columns (tracer.trace.entries), when the load collected them or its
    # sidecar holds them; None otherwise (`entries_of` collects them then).
    entries: Entries | None = None

    @property
    def config(self) -> dict[str, Any]:
        return self.header["config"]

    def __len__(self) -> int:
        return len(self.columns["step"])

    def footer_mismatch(self) -> str | None:
        """When the footer's `steps_written` is not the number of steps read: both numbers,
        and what accounts for steps read fewer (gaps, dropped or skipped records). None when
        they agree, or without a footer (a torn file: its count was never written)."""
        if self.footer is None:
            return None
        written, read = self.footer.get("steps_written"), len(self)
        if written == read:
            return None
        why = []
        if holes := sum(max(0, before - after - 1) for after, before in self.gaps):
            why.append(f"{holes} in the live stream's gaps")
        if dropped := self.footer.get("records_dropped"):
            why.append(f"{dropped} records dropped by the recorder")
        if skipped := sum(isinstance(p, TraceOrderError) for p in self.problems):
            why.append(f"{skipped} out-of-order step records skipped")
        elif self.problems:
            why.append(f"{len(self.problems)} malformed lines skipped")
        because = f" ({'; '.join(why)})" if why else ""
        return f"the footer counts {written} steps written, {read} were read{because}"

    def raw(self, i: int) -> bytes:
        """The i-th step's record as it is in the file (one JSON object, no newline)."""
        start, end = self._spans[i].tolist()
        return self.store.read(start, end)

    def raw_many(self, rows: Iterable[int] | np.ndarray) -> Iterator[tuple[int, bytes]]:
        """(row, raw record) for each of `rows`, once each, in increasing row order: the
        store reads neighbouring steps in one go, so this is the way to scan many."""
        rows = np.unique(np.asarray(rows, dtype=np.int64))
        if len(rows) and (rows[0] < 0 or rows[-1] >= len(self._spans)):
            raise IndexError(f"rows {rows[0]}..{rows[-1]} are not all in a trace of {len(self._spans)} steps")
        return zip(rows.tolist(), self.store.read_many(self._spans[rows]), strict=True)

    def step(self, i: int) -> dict[str, Any]:
        """The full record of the i-th step (0-based row), defaults filled in, in the 1.1
        layout whatever the trace's format (tracer.trace.compact; checked when loaded)."""
        return self._parse_step(i, self.raw(i))

    def iter_steps(self) -> Iterator[dict[str, Any]]:
        """Every step's full record in order, one at a time (read in blocks)."""
        for i, raw in self.raw_many(range(len(self))):
            yield self._parse_step(i, raw)

    def steps(self) -> list[dict[str, Any]]:
        return list(self.iter_steps())

    def subset(self, rows: np.ndarray) -> Trace:
        """A Trace of just these rows (columns, runner columns and step detail), same store."""
        return dataclasses.replace(
            self,
            columns={k: v[rows] for k, v in self.columns.items()},
            runner={k: v[rows] for k, v in self.runner.items()},
            _spans=self._spans[rows],
            fingerprint=None,  # a part of the file's steps: nothing derived from the whole fits it
            entries=None,
        )

    def _parse_step(self, i: int, raw: bytes) -> dict[str, Any]:
        try:
            record = orjson.loads(raw)
        except orjson.JSONDecodeError:
            start, end = self._spans[i].tolist()
            raise TraceError(
                self.path,
                f"step row {i} (bytes {start}..{end}) is no longer a JSON record: "
                "the file changed since it was loaded; load it again",
            ) from None
        return _with_defaults(compact.expand(record, check=False), schema.STEP_DEFAULTS)


def _held(preempted: Any, *groups: Any) -> int:
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
    general path, which decides. The reader's fast path, and the born index's
    (tracer.trace.born_index) for the records the recorder hands its writer; `pool`: the header's
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
            and _why_problem(r, pool) is None
            and type(step) is int
            and step > last
            and type(tc) is int
            and type(tu) is int
            and type(tl) is int
            and type(ic) is int
            and type(iu) is int
            and type(il) is int
        ):
            return _ROW.pack(
                step, tc, tu, tl, ic, iu, ir, il, qp, qr, qc or -1,
                n_new, n_res, n_run, len(pre), len(fin), nt, rt, ut, spec,
                -1 if smp is None else sum(smp.values()) if type(smp) is dict else sum(smp),
                nw, nr, _held(pre, new, res, run) if pre else 0, start, end,
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
            return _RUNNER_ROW.pack(
                step, pass_ != "target", rows_, -1 if cap is None else cap, -1 if padded is None else padded
            )
    except (KeyError, TypeError, struct.error):
        pass
    return None


def _with_defaults(record: dict[str, Any], defaults: dict[str, Any]) -> dict[str, Any]:
    for key, value in defaults.items():
        if key not in record:
            record[key] = list(value) if isinstance(value, list) else value
    return record


def _int(record: dict[str, Any], key: str, sub: str | None, path: str, line: int) -> int:
    parent = record.get(key)
    value = parent if sub is None else (parent.get(sub) if isinstance(parent, dict) else None)
    if type(value) is not int:
        name = key if sub is None else f"{key}.{sub}"
        raise TraceError(path, f"expected an integer, got {value!r}", line=line, field=name)
    return value


def _why_problem(r: dict[str, Any], pool: int | None = None) -> tuple[str, str] | None:
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


def _req_list(record: dict[str, Any], key: str, path: str, line: int) -> list[Any]:
    value = record.get(key, [])
    if not isinstance(value, list) or any(
        not isinstance(e, list) or len(e) < 2 or type(e[1]) is not int for e in value
    ):
        raise TraceError(path, "expected a list of [id, tokens, ...] entries", line=line, field=key)
    return value


class TraceBuilder:
    """Incremental parser: feed() bytes as they arrive, build() a Trace at any time."""

    def __init__(
        self, path: str | Path, *, strict: bool = True, store: Store | None = None, entries: bool = False
    ) -> None:
        self.path = str(path)
        self.strict = strict
        # Per-request entry columns, collected from the same parse (tracer.trace.entries).
        self.entries: EntryCollector | None = EntryCollector() if entries else None
        # None: everything fed is kept, for step detail (streams, uploads). A store
        # (its bytes are a file's, fed from the file's start): only the unparsed tail.
        self.store = store
        self.header: dict[str, Any] | None = None
        self.footer: dict[str, Any] | None = None
        self.footer_line: int | None = None  # where the footer was (None: none, or unknown)
        self.problems: list[TraceError] = []
        self.gaps: list[tuple[int, int]] = []  # (after, before): steps missing in between
        self.hooks: list[dict[str, Any]] = []
        self._rows = bytearray()  # _ROW per step
        self._runner_rows = bytearray()  # _RUNNER_ROW per runner record
        # Without a store, everything fed so far: bytes when a whole file came in one
        # piece (not copied), a growing bytearray otherwise. With one, the unparsed tail.
        self._buf: bytes | bytearray = b""
        self._base = 0  # offset of _buf[0] in everything fed
        self._line = 0  # lines consumed so far
        self._pos = 0  # bytes fed and consumed as complete lines (an offset like _base)

    @property
    def steps_parsed(self) -> int:
        return len(self._rows) // _ROW.size

    def _last_step(self) -> int:
        """The number of the last step added (_NO_STEP before the first)."""
        rows = self._rows
        return _ROW_STEP.unpack_from(rows, len(rows) - _ROW.size)[0] if rows else _NO_STEP

    def _check_order(self, step: int, line: int) -> None:
        """The trace's order rule, for every path that adds a step (the fast path sends any
        record that may break it here): step numbers increase, and no step comes after the
        footer. A repeat would otherwise count twice in every total; a stream's gap records
        declare a hole, so the step after one only has to exceed the step before it."""
        why = "two writers on one file, or a joined copy?"
        if self.footer is not None:
            where = f" (line {self.footer_line})" if self.footer_line is not None else ""
            raise TraceOrderError(
                self.path,
                f"step {step} after the footer{where}, which ended the recording ({why})",
                line=line,
                step=step,
                after=None,
            )
        last = self._last_step()
        if step <= last:
            what = f"step {step} repeated" if step == last else f"step {step} after step {last}"
            message = f"{what}: step numbers must increase ({why})"
            raise TraceOrderError(self.path, message, line=line, step=step, after=last)

    def feed(self, chunk: bytes) -> int:
        """Parse every complete line in `chunk` (plus any held remainder); return steps added."""
        before = self.steps_parsed
        if self.store is not None:
            tail = self._buf
            if not chunk:
                return 0
            if tail and b"\n" not in chunk:  # still inside one long line: no re-copying
                self._buf = (tail if type(tail) is bytearray else bytearray(tail)) + chunk
                return 0
            self._buf = bytes(tail) + chunk if tail else bytes(chunk)
            self._parse()
            self._drop_parsed()
        elif not self._buf and type(chunk) is bytes:
            self._buf = chunk  # a whole file at once: parsed in place, not copied
            self._parse()
        else:
            if type(self._buf) is not bytearray:
                self._buf = bytearray(self._buf)
            self._buf += chunk
            self._parse()
        return self.steps_parsed - before

    def _drop_parsed(self) -> None:
        """With a store: forget the bytes parsed so far (the store has them)."""
        cut = self._pos - self._base
        if cut:
            self._buf = self._buf[cut:]
            self._base = self._pos

    def _feed_window(self, chunk: bytes) -> None:
        """With a store: `chunk` is the input from the first unparsed byte on (it repeats
        the held tail), so it replaces the tail instead of being copied onto it."""
        assert self.store is not None
        self._buf, self._base = chunk, self._pos
        self._parse()
        self._drop_parsed()

    def _adopt(self, data: bytes | bytearray) -> None:
        """Take a whole decompressed trace in place (no copy) before anything was fed."""
        assert not self._buf and self.store is None
        self._buf = data

    def _parse(self, progress: Progress | None = None) -> None:
        """Parse every complete line of _buf not parsed yet, in windows of about 4 MiB
        (`progress` hears after each). bytes are read in place; a bytearray (it may
        grow) one window at a time through a copy."""
        data, base, window = self._buf, self._base, 1 << 22
        pos = self._pos - base
        total = len(data)
        shared = None
        if type(data) is bytes:
            shared = io.BytesIO(data)  # shares the buffer
            shared.seek(pos)
        while pos < total:
            stop = data.rfind(b"\n", pos, pos + window) + 1 or data.find(b"\n", pos + window) + 1
            if stop <= pos:
                break  # only an unterminated last line is left: finish() decides
            if shared is None:
                with memoryview(data) as view:
                    source = io.BytesIO(bytes(view[pos:stop]))
            else:
                source = shared
            self._consume(source, pos, stop)
            pos = stop
            self._pos = base + stop
            if progress is not None:
                progress(base + pos, base + total)

    def _consume(self, source: io.BytesIO, pos: int, stop: int) -> None:
        """Parse lines from `source` (positioned at byte `pos` of _buf) up to `stop`,
        a line boundary. The hot loop of trace loading: per line one orjson parse and
        one packed row; line numbers are counted (in C) only when a record needs one."""
        loads, decode_error = orjson.loads, orjson.JSONDecodeError
        rows, runner_rows = self._rows, self._runner_rows
        data, base = self._buf, self._base
        counted, line_no = pos, self._line  # line_no: lines before byte `counted`
        have_header = self.header is not None
        # The fast path takes a step only when it keeps the order (_check_order): above
        # the last step, before any footer. Anything else goes to the general path.
        last, open_ = self._last_step(), self.footer is None
        pool = kv_pool(self.header)
        collect = self.entries.add if self.entries is not None else None
        for line in source:
            n = len(line)
            if n == 1:  # an empty line
                pos += 1
                if pos >= stop:
                    break
                continue
            try:
                r = loads(line)
                kind = r["kind"]
            except (decode_error, TypeError, KeyError):
                kind = None
            fast = False
            if kind == "step" and have_header:
                if open_:
                    row = fast_step_row(r, base + pos, base + pos + n - 1, last, pool)
                    if row is not None:
                        rows += row
                        last, fast = r["step"], True
                        if collect is not None:
                            collect(r)
            elif kind == "runner" and have_header:
                row = fast_runner_row(r)
                if row is not None:
                    runner_rows += row
                    fast = True
            if not fast:
                line_no += data.count(b"\n", counted, pos)
                counted = pos
                self._line = line_no + 1
                self._record(base + pos, base + pos + n - 1)
                have_header = self.header is not None
                last, open_ = self._last_step(), self.footer is None
                pool = kv_pool(self.header)
            pos += n
            if pos >= stop:
                break
        self._line = line_no + data.count(b"\n", counted, pos)

    def finish(self) -> Torn | None:
        """End of input: a last line without newline is parsed if whole, else reported torn."""
        data, base = self._buf, self._base
        if self._pos - base >= len(data):
            return None
        start, end = self._pos, base + len(data)
        line = self._line + 1
        try:
            orjson.loads(data[start - base :])
        except orjson.JSONDecodeError:
            return Torn(line=line, offset=start, length=end - start)
        self._line = line
        self._record(start, end)
        self._pos = end
        if self.store is not None:
            self._drop_parsed()
        return None

    def _problem(self, error: TraceError) -> None:
        if self.strict:
            raise error
        self.problems.append(error)

    def _record(self, start: int, end: int) -> None:
        """The general path for the record at [start, end) of everything fed."""
        line = self._line
        try:
            record = orjson.loads(self._buf[start - self._base : end - self._base])
        except orjson.JSONDecodeError as exc:
            self._problem(TraceError(self.path, f"not a JSON record ({exc})", line=line))
            return
        if not isinstance(record, dict) or not isinstance(record.get("kind"), str):
            self._problem(
                TraceError(self.path, "a record must be an object with a 'kind'", line=line, field="kind")
            )
            return
        kind = record["kind"]
        if kind == schema.HEARTBEAT:
            return  # a stream keep-alive that reached a file: no data, anywhere, strict or not
        if self.header is None:
            if kind != schema.HEADER:
                # Without a header nothing can be interpreted: always fatal.
                raise TraceHeaderError(
                    self.path, f"the first record must be a header, got {kind!r}", line=line, field="kind"
                )
            self.header = self._parse_header(record, line)
            return
        try:
            if kind == schema.STEP:
                self._add_step(record, line, start, end)
            elif kind == schema.RUNNER:
                self._add_runner(record, line)
            elif kind == schema.FOOTER:
                if self.footer is not None:
                    where = f" (line {self.footer_line})" if self.footer_line is not None else ""
                    message = f"a second footer, after the one{where} that ended the recording"
                    raise TraceError(self.path, f"{message}: two runs in one file?", line=line, field="kind")
                self.footer = _with_defaults(record, schema.FOOTER_DEFAULTS)
                self.footer_line = line
            elif kind == schema.GAP:
                self.gaps.append((int(record.get("after", 0)), int(record.get("before", 0))))
            elif kind == schema.HOOKS:
                self.hooks.append(record)
            elif kind == schema.HEADER:
                raise TraceError(self.path, "a second header: two runs in one file?", line=line, field="kind")
            # Unknown kinds from a newer minor version are skipped.
        except TraceError as exc:
            self._problem(exc)
        except (TypeError, ValueError, AttributeError, KeyError, IndexError) as exc:
            # A shape no check above expected; rows are appended only after every
            # field was read, so nothing was half-added.
            message = f"malformed {kind} record ({type(exc).__name__}: {exc})"
            self._problem(TraceError(self.path, message, line=line))

    def _parse_header(self, record: dict[str, Any], line: int) -> dict[str, Any]:
        try:
            major, minor = schema.parse_version(record.get("schema"))
        except ValueError as exc:
            raise TraceHeaderError(self.path, str(exc), line=line, field="schema") from None
        if major > schema.SCHEMA_MAJOR:
            raise TraceVersionError(
                self.path,
                f"schema version {major}.{minor} is newer than this schedscope reads "
                f"({schema.SCHEMA_MAJOR}.x); upgrade schedscope to read it",
                line=line,
                field="schema",
            )
        if not isinstance(record.get("config"), dict):
            raise TraceHeaderError(
                self.path, "the header has no engine config object", line=line, field="config"
            )
        header = _with_defaults(record, schema.HEADER_DEFAULTS)
        header["config"] = _with_defaults(dict(record["config"]), schema.CONFIG_DEFAULTS)
        return header

    def _add_step(self, r: dict[str, Any], line: int, start: int, end: int) -> None:
        path = self.path
        for key in schema.STEP_REQUIRED:
            if key not in r:
                raise TraceError(path, "missing", line=line, field=key)
        # As written, for the entry columns: the fast path collects the same from the same keys.
        as_written = {key: r.get(key) for key in _ENTRY_KEYS} if self.entries is not None else None
        try:
            compact.expand(r)  # a 1.2 step in the 1.1 layout: every check below applies to both
        except compact.CompactError as exc:
            raise TraceError(path, exc.message, line=line, field=exc.field) from None
        step = _int(r, "step", None, path, line)
        self._check_order(step, line)
        t = r["t"]
        if not isinstance(t, (int, float)):
            raise TraceError(path, f"expected a number, got {t!r}", line=line, field="t")
        target = [_int(r, "target", k, path, line) for k in ("cap", "used", "left")]
        inp = [_int(r, "input", k, path, line) for k in ("cap", "used", "left")]
        reserved = r["input"].get("reserved", 0)
        query = r.get("query") or {}
        new = _req_list(r, "new", path, line)
        resumed = _req_list(r, "resumed", path, line)
        running = _req_list(r, "running", path, line)
        sampled = r.get("sampled")
        problem = _why_problem(r, kv_pool(self.header))
        if problem is not None:
            raise TraceError(path, problem[1], line=line, field=problem[0])
        if not isinstance(query, dict):
            raise TraceError(path, f"expected an object or null, got {query!r}", line=line, field="query")
        every = (*new, *resumed, *running)
        # Every value first, then the appends: a bad field leaves no half-added row.
        row = {
            "step": step,
            "t": float(t),
            "sched_us": float(r.get("sched_us") or 0.0),
            "kv_usage": float(r.get("kv_usage") or 0.0),
            "target_cap": target[0],
            "target_used": target[1],
            "target_left": target[2],
            "input_cap": inp[0],
            "input_used": inp[1],
            "input_left": inp[2],
            "input_reserved": int(reserved or 0),
            "query_per_req": int(query.get("per_req") or 0),
            "query_rows": int(query.get("rows") or 0),
            "query_cap": int(query.get("cap") or -1),
            "n_new": len(new),
            "n_resumed": len(resumed),
            "n_running": len(running),
            "n_preempted": len(r.get("preempted") or ()),
            "n_finished": len(r.get("finished") or ()),
            "new_tokens": sum(e[1] for e in new),
            "resumed_tokens": sum(e[1] for e in resumed),
            "running_tokens": sum(e[1] for e in running),
            "spec_tokens": sum(int(e[2]) for e in every if len(e) > 2),
            "sampled_tokens": sum(map(int, sampled.values())) if isinstance(sampled, dict) else -1,
            "num_waiting": int(r.get("num_waiting") or 0),
            "num_running": int(r.get("num_running") or 0),
            "n_preempted_held": _held(r.get("preempted") or (), new, resumed, running),
        }
        try:
            packed = _ROW.pack(*(row[name] for name in _INT_COLS), start, end, *(row[f] for f in _FLOAT_COLS))
        except struct.error as exc:  # e.g. an integer beyond 64 bits
            raise ValueError(str(exc)) from None
        self._rows += packed
        if as_written is not None:
            self.entries.add(as_written)  # type: ignore[union-attr]

    def _add_runner(self, r: dict[str, Any], line: int) -> None:
        for key in schema.RUNNER_REQUIRED:
            if key not in r:
                raise TraceError(self.path, "missing", line=line, field=key)
        step = r["step"]
        if step is None:  # a runner pass with no step in flight (warmup): nothing to join
            return
        if type(step) is not int:
            raise TraceError(self.path, f"expected an integer, got {step!r}", line=line, field="step")
        rows = _int(r, "rows", None, self.path, line)
        cap = r.get("cap")
        if cap is not None and type(cap) is not int:
            raise TraceError(self.path, f"expected an integer or null, got {cap!r}", line=line, field="cap")
        padded = r.get("padded")
        if padded is not None and type(padded) is not int:
            raise TraceError(
                self.path, f"expected an integer or null, got {padded!r}", line=line, field="padded"
            )
        if r["pass"] not in schema.RUNNER_PASSES:
            raise TraceError(
                self.path,
                f"expected one of {schema.RUNNER_PASSES}, got {r['pass']!r}",
                line=line,
                field="pass",
            )
        try:
            packed = _RUNNER_ROW.pack(
                step,
                r["pass"] != "target",
                rows,
                -1 if cap is None else cap,
                -1 if padded is None else padded,
            )
        except struct.error as exc:
            raise ValueError(str(exc)) from None
        self._runner_rows += packed

    def build(self, torn: Torn | None = None) -> Trace:
        if self.header is None:
            raise TraceError(self.path, "empty trace: no header record")
        # Views on the packed rows, copied out at once: a live view would stop the
        # bytearrays from growing when more is fed.
        table = np.frombuffer(self._rows, dtype=_ROW_DTYPE)
        columns, spans = _columns_of(table)
        del table
        runner = _join_runner(columns["step"], np.frombuffer(self._runner_rows, _RUNNER_DTYPE).copy())
        entries = self.entries.build() if self.entries is not None else None
        if entries is not None and (problem := entries.problem(columns)) is not None:
            logger.warning("schedscope: %s: entry columns not kept (%s)", self.path, problem)
            entries = None
        return Trace(
            path=self.path,
            header=self.header,
            columns=columns,
            runner=runner,
            footer=self.footer,
            torn=torn,
            problems=list(self.problems),
            gaps=list(self.gaps),
            hooks=list(self.hooks),
            store=self.store if self.store is not None else MemoryStore(self._buf, self.path),
            _spans=spans,
            entries=entries,
        )


_BLOCK_ROWS = 4096  # rows per block of the transpose: a block's records stay in cache


def _columns_of(table: np.ndarray) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """The packed step rows as one array per column, and each row's span in the file.

    Copied block by block, every column of a block at once: column by column, each copy
    would read a cache line of every 232-byte row, the whole table once per column (most of
    a first open's load at 200,000 steps)."""
    n = len(table)
    names = (*_INT_COLS, *_FLOAT_COLS)
    columns = {name: np.empty(n, dtype=table.dtype[name]) for name in names}
    spans = np.empty((n, 2), dtype=table.dtype["_start"])
    for lo in range(0, n, _BLOCK_ROWS):
        block = table[lo : lo + _BLOCK_ROWS]
        hi = lo + len(block)
        for name in names:
            columns[name][lo:hi] = block[name]
        spans[lo:hi, 0] = block["_start"]
        spans[lo:hi, 1] = block["_end"]
    return columns, spans


def _join_runner(steps: np.ndarray, records: np.ndarray) -> dict[str, np.ndarray]:
    """Runner columns per step row: rows (and padded rows) summed over a step's records
    of each pass, the capacity of its last one; -1 where a step has none (padded: where
    none of them noted padding)."""
    runner = {name: np.full(len(steps), -1, dtype=np.int64) for name in RUNNER_COLS}
    if not len(records) or not len(steps):
        return runner
    if bool((records["rows"] < 0).any()):
        return _join_runner_exact(steps, records, runner)
    # Group by (step, pass), keeping file order inside a group; a recorder's records come
    # in that order already (one pass after the other, steps increasing): no sort.
    s, p = records["step"], records["pass"]
    ordered = (s[1:] > s[:-1]) | ((s[1:] == s[:-1]) & (p[1:] >= p[:-1]))
    if not bool(ordered.all()):
        rec = records[np.lexsort((np.arange(len(records)), records["pass"], records["step"]))]
    else:
        rec = records
    step, pass_ = rec["step"], rec["pass"]
    first = np.ones(len(rec), dtype=bool)
    first[1:] = (step[1:] != step[:-1]) | (pass_[1:] != pass_[:-1])
    starts = np.flatnonzero(first)
    ends = np.append(starts[1:], len(rec)) - 1
    g_step, g_pass = step[starts], pass_[starts]
    g_rows = np.add.reduceat(rec["rows"], starts)
    g_cap = rec["cap"][ends]
    padded = rec["padded"]
    g_padded = np.add.reduceat(np.maximum(padded, 0), starts)
    g_padded[np.add.reduceat((padded >= 0).astype(np.int64), starts) == 0] = -1
    # A step number seen twice in the step rows joins its last row.
    if len(steps) > 1 and bool(np.all(steps[1:] > steps[:-1])):
        at = np.minimum(np.searchsorted(steps, g_step), len(steps) - 1)
        known = steps[at] == g_step
    else:
        index = {int(s): i for i, s in enumerate(steps)}
        at = np.array([index.get(int(s), -1) for s in g_step], dtype=np.int64)
        known = at >= 0
    for p, prefix in ((0, "target"), (1, "draft")):
        sel = known & (g_pass == p)
        runner[f"{prefix}_rows"][at[sel]] = g_rows[sel]
        runner[f"{prefix}_cap"][at[sel]] = g_cap[sel]
        runner[f"{prefix}_padded"][at[sel]] = g_padded[sel]
    return runner


def _join_runner_exact(steps: np.ndarray, records: np.ndarray, runner: dict[str, np.ndarray]) -> dict:
    """_join_runner record by record, for rows < 0 (never written by the recorder): a
    negative running total restarts from the next record's rows, as it always has."""
    slots: dict[int, list[int]] = {}
    for step, pass_, rows, cap, padded in records.tolist():
        slot = slots.setdefault(step, [-1] * len(RUNNER_COLS))
        base = 2 * pass_
        slot[base] = rows if slot[base] < 0 else slot[base] + rows
        slot[base + 1] = cap
        if padded >= 0:
            slot[4 + pass_] = padded if slot[4 + pass_] < 0 else slot[4 + pass_] + padded
    index = {int(s): i for i, s in enumerate(steps)}
    for step, values in slots.items():
        i = index.get(step)
        if i is not None:
            for name, value in zip(RUNNER_COLS, values, strict=True):
                runner[name][i] = value
    return runner


# A plain file is parsed this many bytes at a time: the reader never holds more of it.
_WINDOW = 4 << 20


def open_builder(path: str | Path, *, strict: bool = True, kind: codec.Kind | None = None) -> TraceBuilder:
    """A TraceBuilder for bytes read from `path` from its start, storing them where they
    are: a plain file's steps are read back from the file, so a follower of a growing
    file holds only columns; compressed bytes (fed decompressed) are kept in memory.
    `kind`: the file's compression, from its first bytes (codec.kind_of); without it, a
    file with no bytes yet is taken as compressed when its name ends in .gz or .zst."""
    path = Path(path)
    if kind is None:
        kind = "gzip" if path.suffix == ".gz" else "zstd" if path.suffix == ".zst" else "plain"
    if kind != "plain":
        return TraceBuilder(path, strict=strict)
    return TraceBuilder(path, strict=strict, store=FileStore(path))


def _parse_plain(
    builder: TraceBuilder, fd: int, size: int, progress: Progress | None
) -> tuple[TraceBuilder, Torn | None, None]:
    """Parse a plain file window by window from where `builder` stands, up to `size`
    (the size when it was opened: a file that grows meanwhile loads as it was). Each
    window is read from the first unparsed byte: the partial line at a window's end is
    read again with the next rather than copied onto it."""
    if hasattr(os, "posix_fadvise"):
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_SEQUENTIAL)  # a longer readahead
    pos, window, done = builder._pos, _WINDOW, 0
    while pos < size:
        chunk = os.pread(fd, min(window, size - pos), pos)
        if not chunk:
            break  # truncated while loading: what was there loads
        builder._feed_window(chunk)
        if progress is not None and pos + len(chunk) > done:
            done = pos + len(chunk)
            progress(done, size)
        if pos + len(chunk) >= size:
            break
        # No line ended in the window: a record longer than it; read a longer one.
        window = window * 2 if builder._pos == pos else _WINDOW
        pos = builder._pos
    return builder, builder.finish(), None


def _parse_gzip(
    path: Path, fd: int, st: os.stat_result, strict: bool, progress: Progress | None, entries: bool = False
) -> tuple[TraceBuilder, Torn | None, str | None]:
    """Decompress member by member, noting where each is. One member (an old `.gz`):
    its bytes stay in memory, as they always did. Several (the recorder writes one
    per ~1 MiB): each is parsed and dropped, and a GzipMemberStore reads steps back."""
    size = st.st_size
    members: list[tuple[int, int, int, int]] = []  # (compressed offset, length, uncompressed start, length)
    first: bytearray | None = bytearray()  # the first member's output, until a second one shows up
    builder: TraceBuilder | None = None
    store: GzipMemberStore | None = None
    note: str | None = None
    fpos = ustart = 0
    while fpos < size:
        coff, ulen, d, ended = fpos, 0, zlib.decompressobj(wbits=31), False
        while True:  # one member, in the pieces inflate_member() uses
            piece = os.pread(fd, min(PIECE, size - fpos), fpos)
            if piece:
                try:
                    out = d.decompress(piece)
                except zlib.error as exc:
                    note = f"gzip data corrupt ({exc}); kept what decompressed"
                    out, ended, fpos = b"", True, fpos + len(piece)
            else:
                out, note, ended = d.flush(), "gzip stream cut short; kept what decompressed", True
            if out:
                ulen += len(out)
                if builder is None:
                    first += out  # type: ignore[operator]
                else:
                    builder.feed(out)
            if ended:
                break
            if d.eof:
                fpos += len(piece) - len(d.unused_data)
                break
            fpos += len(piece)
        if ulen:
            members.append((coff, fpos - coff, ustart, ulen))
            ustart += ulen
        if progress is not None and builder is not None:
            progress(fpos, size)
        if ended:
            break
        if builder is None and fpos < size:  # a second member: index them, hold none
            store = GzipMemberStore(path, np.zeros(0, MEMBER_DTYPE), file_identity(st), fd=os.dup(fd))
            builder = TraceBuilder(path, strict=strict, store=store, entries=entries)
            for at in range(0, len(first), _WINDOW):  # type: ignore[arg-type]
                builder.feed(bytes(first[at : at + _WINDOW]))  # type: ignore[index]
            first = None
    if builder is None:
        builder = TraceBuilder(path, strict=strict, entries=entries)
        builder._adopt(first)  # type: ignore[arg-type]
        builder._parse(progress)
    else:
        store.set_index(np.array(members, dtype=MEMBER_DTYPE))  # type: ignore[union-attr]
    return builder, builder.finish(), note


def load(
    path: str | Path,
    *,
    strict: bool = True,
    progress: Progress | None = None,
    sidecar: bool = True,
    entries: bool = False,
) -> Trace:
    """Load a whole trace file. See the module docstring for the error contract.

    With `sidecar` (tracer.trace.sidecar), a big trace's columns are saved after the
    first load and mapped back on the next, instead of parsing the file again. With
    `entries`, the per-request entry columns (Trace.entries) are collected by the same
    parse, or mapped from a sidecar that holds them (one that does is mapped anyway)."""
    path = Path(path)
    try:
        with open(path, "rb", buffering=0) as f:
            trace = _load_open(path, f, strict, progress, sidecar, entries)
    except FileNotFoundError:
        raise TraceError(path, "no such file") from None
    except IsADirectoryError:
        raise TraceError(path, "is a directory, not a trace file") from None
    except (OSError, EOFError) as exc:
        raise TraceError(path, f"cannot read: {exc}") from None
    if trace.footer is None:
        trace.footer = kept_footer(path, trace)
    return trace


def kept_footer(path: Path, trace: Trace) -> dict[str, Any] | None:
    """The footer's facts the recorder kept beside the trace (`<trace>.end`), when the server
    was killed before it wrote the footer: taken only once no process holds the file's lock
    (the recorder holds it while it records), if they count exactly the steps read and belong
    to this recording (ended after it started). Marked `kept`."""
    try:
        fd = os.open(path.with_name(path.name + schema.KEPT_FOOTER_SUFFIX), os.O_RDONLY)
    except OSError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)  # fails while the recorder lives
        kept = orjson.loads(os.pread(fd, 2 * schema.KEPT_FOOTER_BYTES, 0))
    except (OSError, orjson.JSONDecodeError):
        return None
    finally:
        os.close(fd)
    if not isinstance(kept, dict) or kept.get("kind") != schema.FOOTER:
        return None
    if kept.get("steps_written") != len(trace):
        return None
    end, start = kept.get("end_time"), trace.header.get("start_time")
    if isinstance(end, int | float) and isinstance(start, int | float) and end < start:
        return None
    return {**_with_defaults(kept, schema.FOOTER_DEFAULTS), "kept": True}


def _load_open(
    path: Path, f: IO[bytes], strict: bool, progress: Progress | None, use_sidecar: bool, entries: bool
) -> Trace:
    fd = f.fileno()
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):  # a pipe: no offsets to read back, so into memory
        raw = f.read()
        data, note = codec.decode(path, raw)
        builder = TraceBuilder(path, strict=strict, entries=entries)
        builder._adopt(data)
        builder._parse(progress)
        return _built(path, builder, builder.finish(), note, len(data), progress)
    kind = codec.kind_of(os.pread(fd, codec.HEAD, 0))
    if kind == "zstd":
        data, note = codec.decode(path, f.read())
        builder = TraceBuilder(path, strict=strict, entries=entries)
        builder._adopt(data)
        builder._parse(progress)
        return _built(path, builder, builder.finish(), note, len(builder._buf), progress)
    use_sidecar = use_sidecar and st.st_size >= sidecar.MIN_SOURCE_BYTES
    resumed = None
    if use_sidecar:
        fingerprint = sidecar.fingerprint(fd, st)
        trace, resumed = _from_sidecar(path, fd, st, strict, kind, progress, entries)
        if trace is not None:
            trace.fingerprint = fingerprint
            return trace
    if kind == "gzip":
        builder, torn, note = _parse_gzip(path, fd, st, strict, progress, entries)
    else:
        if resumed is None:  # the store keeps its own fd: the Trace reads this file even if it is replaced
            resumed = TraceBuilder(
                path, strict=strict, store=FileStore(path, file_identity(st), fd=os.dup(fd)), entries=entries
            )
        builder, torn, note = _parse_plain(resumed, fd, st.st_size, progress)
    trace = _built(path, builder, torn, note, st.st_size, progress)
    if entries and trace.entries is None:
        entries_of(trace)  # a sidecar without them, for a file that grew since
    if use_sidecar and builder.store is not None:
        _save_sidecar(path, builder, torn, fingerprint, kind, trace)
        trace.fingerprint = fingerprint
    return trace


def entries_of(trace: Trace) -> Entries | None:
    """The trace's per-request entry columns: those its load collected or mapped, else
    collected now from its records (and kept with the Trace); None when a record does not
    fit them (tracer.trace.entries)."""
    if trace.entries is not None:
        if (problem := trace.entries.problem(trace.columns)) is None:
            return trace.entries
        logger.warning("schedscope: %s: entry columns not used (%s); collected again", trace.path, problem)
    collector = EntryCollector()
    rows = range(len(trace))
    batch: list[bytes] = []
    for _, raw in trace.raw_many(rows):
        batch.append(raw)
        if len(batch) >= 2048:
            for record in orjson.loads(b"[" + b",".join(batch) + b"]"):
                collector.add(record)
            batch.clear()
    if batch:
        for record in orjson.loads(b"[" + b",".join(batch) + b"]"):
            collector.add(record)
    found = collector.build()
    if found is None:
        logger.info("schedscope: %s: no entry columns (%s)", trace.path, collector.failed)
        return None
    if (problem := found.problem(trace.columns)) is not None:
        logger.info("schedscope: %s: no entry columns (%s)", trace.path, problem)
        return None
    trace.entries = found
    return found


def reopen(path: str | Path, *, strict: bool = True) -> Trace | None:
    """The trace from a sidecar that matches the file, without parsing it; None when there
    is none to trust (the caller then parses, as `load` does)."""
    path = Path(path)
    try:
        with open(path, "rb", buffering=0) as f:
            fd = f.fileno()
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode) or st.st_size < sidecar.MIN_SOURCE_BYTES:
                return None
            kind = codec.kind_of(os.pread(fd, codec.HEAD, 0))
            if kind == "zstd":
                return None
            trace = _from_sidecar(path, fd, st, strict, kind, None)[0]
            if trace is not None:
                trace.fingerprint = sidecar.fingerprint(fd, st)
            return trace
    except OSError:
        return None


def save_sidecar(path: str | Path, builder: TraceBuilder, torn: Torn | None) -> None:
    """Save the sidecar of a plain file that `builder` (made by `open_builder`) parsed to
    its end; a file that changed meanwhile, or any failure, leaves no sidecar."""
    path = Path(path)
    if not isinstance(builder.store, FileStore):
        return
    try:
        with open(path, "rb", buffering=0) as f:
            fd = f.fileno()
            st = os.fstat(fd)
            parsed = torn.offset + torn.length if torn is not None else builder._pos
            if st.st_size < sidecar.MIN_SOURCE_BYTES or parsed != st.st_size:
                return
            _save_sidecar(path, builder, torn, sidecar.fingerprint(fd, st), "plain")
    except OSError as exc:
        logger.debug("schedscope: no sidecar for %s (%s)", path, exc)


def _built(
    path: Path,
    builder: TraceBuilder,
    torn: Torn | None,
    note: str | None,
    total: int,
    progress: Progress | None,
) -> Trace:
    if progress is not None:
        progress(total, total)
    if builder.header is None:
        what = "empty file" if total == 0 else (torn.describe() if torn else "no records")
        raise TraceHeaderError(path, f"no complete header record ({note or what})")
    if torn is None and note is not None:
        builder.problems.append(TraceError(path, note))
    return builder.build(torn)


_SIDECAR_ARRAYS = {"rows": _ROW_DTYPE, "runner": _RUNNER_DTYPE, "members": MEMBER_DTYPE, **_ENTRY_DTYPES}
# The checks a sidecar's load applied. 2: the step order (TraceBuilder._check_order). A
# sidecar made before it may hold a repeated step or one after the footer: never trusted.
# 3: a step's free KV blocks within the header's pool (_why_problem).
SIDECAR_CHECKS = 3


def row_arrays(rows: bytes | bytearray, runner: bytes | bytearray) -> dict[str, np.ndarray]:
    """The sidecar's `rows` and `runner` arrays from packed step and runner rows."""
    return {"rows": np.frombuffer(rows, _ROW_DTYPE), "runner": np.frombuffer(runner, _RUNNER_DTYPE)}


def _save_sidecar(
    path: Path,
    builder: TraceBuilder,
    torn: Torn | None,
    fingerprint: dict,
    kind: str,
    trace: Trace | None = None,
) -> None:
    """Save what this load computed; a sidecar that cannot be written is only logged."""
    meta = {
        "source": fingerprint,
        "store": kind,
        # A lenient load's problems are records a strict load refuses: strictness is
        # part of what the sidecar means.
        "strict": builder.strict,
        "header": builder.header,
        "checks": SIDECAR_CHECKS,
        "footer": builder.footer,
        "footer_line": builder.footer_line,
        "gaps": builder.gaps,
        "hooks": builder.hooks,
        "problems": [{"message": p.message, "line": p.line, "field": p.field} for p in builder.problems],
        "torn": dataclasses.asdict(torn) if torn else None,
        "parsed_end": builder._pos,
        "lines": builder._line,
    }
    arrays = row_arrays(builder._rows, builder._runner_rows)
    if isinstance(builder.store, GzipMemberStore):
        arrays["members"] = builder.store.members
    if trace is not None and trace.entries is not None:
        arrays.update(trace.entries.arrays())
    try:
        sidecar.write(path, meta, arrays)
    except (TypeError, ValueError, orjson.JSONEncodeError) as exc:  # a record JSON cannot hold again
        logger.debug("schedscope: no sidecar for %s (%s)", path, exc)


def _from_sidecar(
    path: Path,
    fd: int,
    st: os.stat_result,
    strict: bool,
    kind: str,
    progress: Progress | None,
    want_entries: bool = False,
) -> tuple[Trace | None, TraceBuilder | None]:
    """(the Trace, None) from a sidecar that matches the file; (None, a builder holding
    everything up to where the sidecar stopped) for a plain file that grew since; or
    (None, None): parse from the start."""
    found = sidecar.read(path, fd, st, _SIDECAR_ARRAYS, pieces=True)
    if found is None:
        return None, None
    meta, pieces, status = found
    try:
        # A born index comes in segments (tracer.trace.born_index): the step and runner rows are
        # joined here, the entry columns on first use.
        arrays = {name: _joined(pieces[name]) for name in ("rows", "runner", "members") if name in pieces}
        if meta["store"] != kind or (status == "grown" and kind != "plain"):
            return None, None
        if strict and not meta["strict"] and meta["problems"]:
            return None, None  # a lenient load's findings; a strict load must raise on them
        if meta.get("checks") != SIDECAR_CHECKS:
            raise ValueError(f"it was made with checks {meta.get('checks')}, not {SIDECAR_CHECKS}")
        rows, runner = arrays["rows"], arrays["runner"]
        if len(rows) > 1 and not bool((rows["step"][1:] > rows["step"][:-1]).all()):
            raise ValueError("its step numbers do not increase")
        end = int(meta["parsed_end"])
        if kind == "gzip":
            members = arrays["members"]
            store: Store = GzipMemberStore(path, members, file_identity(st), fd=os.dup(fd))
            coff, clen, ustart, ulen = (members[k] for k in ("coff", "clen", "ustart", "ulen"))
            # In file order without overlaps (an empty member between two is not indexed).
            ordered = bool((coff[1:] >= coff[:-1] + clen[:-1]).all())
            chained = ordered and bool((ustart[1:] == ustart[:-1] + ulen[:-1]).all())
            if not len(members) or not chained or coff[0] < 0 or coff[-1] + clen[-1] > st.st_size:
                raise ValueError("its gzip member index does not fit the file")
            end = min(end, int(ustart[-1] + ulen[-1]))
        else:
            store = FileStore(path, file_identity(st), fd=os.dup(fd))
            if end > st.st_size:
                raise ValueError("it was parsed past the file's end")
        if len(rows) and (int(rows["_end"].max()) > end or int(rows["_start"].min()) < 0):
            raise ValueError("its step spans lie outside what it parsed")
        header = meta["header"]
        if not isinstance(header, dict) or not isinstance(header.get("config"), dict):
            raise ValueError("it has no header")
        builder = TraceBuilder(path, strict=strict, store=store)
        builder.header, builder.footer, builder.hooks = header, meta["footer"], list(meta["hooks"])
        builder.footer_line = None if meta["footer_line"] is None else int(meta["footer_line"])
        builder.gaps = [(int(a), int(b)) for a, b in meta["gaps"]]
        builder.problems = [
            TraceError(path, p["message"], line=p["line"], field=p["field"]) for p in meta["problems"]
        ]
        if status == "grown":  # fed from here on: the builder appends to them
            builder._rows, builder._runner_rows = bytearray(rows), bytearray(runner)
        else:  # built at once: read in place
            builder._rows, builder._runner_rows = rows, runner
        builder._pos = builder._base = end
        builder._line = int(meta["lines"])
        torn = Torn(**meta["torn"]) if meta["torn"] else None
        found = Entries.from_pieces(pieces) if "e_ids" in pieces else None
        if found is not None and (
            problem := found.problem({"step": rows["step"], **_count_cols(rows)}, deep=False)
        ):
            logger.info("schedscope: %s: the sidecar's entry columns are not used (%s)", path, problem)
            found = None
    except (KeyError, TypeError, ValueError) as exc:
        logger.debug("schedscope: sidecar for %s not used (%s)", path, exc)
        return None, None
    if status == "grown":
        if want_entries and found is not None:
            builder.entries = EntryCollector()
            builder.entries.extend(found)
        return None, builder
    if progress is not None:
        progress(st.st_size, st.st_size)
    trace = builder.build(torn)
    trace.entries = found
    if want_entries and found is None and entries_of(trace) is not None:
        # A sidecar written by a load without them: rewritten with them, so the next
        # open maps them too.
        keep = {k: v for k, v in meta.items() if k not in ("version", "arrays", "total", "data", "segment")}
        plain = {k: arrays[k] for k in ("rows", "runner", "members") if k in arrays}
        try:
            sidecar.write(path, keep, {**plain, **trace.entries.arrays()})  # type: ignore[union-attr]
        except (TypeError, ValueError, orjson.JSONEncodeError) as exc:
            logger.debug("schedscope: no sidecar for %s (%s)", path, exc)
    return trace, None


def _joined(pieces: list[np.ndarray]) -> np.ndarray:
    """A born index's segments of one array as one: joined as bytes (NumPy copies a record
    dtype field by field, five times slower)."""
    if len(pieces) == 1:
        return pieces[0]
    return np.concatenate([p.view(np.uint8) for p in pieces]).view(pieces[0].dtype)


def _count_cols(rows: np.ndarray) -> dict[str, np.ndarray]:
    return {name: rows[name] for name in ("n_new", "n_resumed", "n_running", "n_preempted", "n_finished")}
