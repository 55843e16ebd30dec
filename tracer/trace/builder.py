"""TraceBuilder: bytes in, as they arrive; a Trace out at any time (and the runner join).

A follower of a growing file or a live stream reuses the same parsing and validation as a
whole load (tracer.trace.reader). Speed (bench/p2_ingest.py): each line is parsed once with
orjson and reduced on the spot to one packed row (tracer.trace.columns) per step, so no
per-record Python object outlives its line. Records shaped as the recorder writes them take
a fast path with the same checks (tracer.trace.rows); anything else (older traces, missing
keys, odd types, errors) goes through the general path here, which is the reference for
values and for the error contract.
"""

from __future__ import annotations

import io
import logging
import struct
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import orjson

from tracer.trace import compact, schema
from tracer.trace.columns import (
    ENTRY_KEYS,
    FLOAT_COLS,
    INT_COLS,
    NO_STEP,
    ROW,
    ROW_DTYPE,
    ROW_STEP,
    RUNNER_COLS,
    RUNNER_DTYPE,
    RUNNER_ROW,
)
from tracer.trace.entries import EntryCollector
from tracer.trace.errors import TraceError, TraceHeaderError, TraceOrderError, TraceVersionError
from tracer.trace.rows import (
    fast_runner_row,
    fast_step_row,
    held_preempted,
    int_field,
    kv_pool,
    req_list,
    why_problem,
    with_defaults,
)
from tracer.trace.store import MemoryStore, Store
from tracer.trace.trace_type import Torn, Trace

Progress = Callable[[int, int], None]
logger = logging.getLogger("schedscope.reader")


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
        self._rows = bytearray()  # ROW per step
        self._runner_rows = bytearray()  # RUNNER_ROW per runner record
        # Without a store, everything fed so far: bytes when a whole file came in one
        # piece (not copied), a growing bytearray otherwise. With one, the unparsed tail.
        self._buf: bytes | bytearray = b""
        self._base = 0  # offset of _buf[0] in everything fed
        self._line = 0  # lines consumed so far
        self._pos = 0  # bytes fed and consumed as complete lines (an offset like _base)

    @property
    def steps_parsed(self) -> int:
        return len(self._rows) // ROW.size

    def _last_step(self) -> int:
        """The number of the last step added (NO_STEP before the first)."""
        rows = self._rows
        return ROW_STEP.unpack_from(rows, len(rows) - ROW.size)[0] if rows else NO_STEP

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
                self.footer = with_defaults(record, schema.FOOTER_DEFAULTS)
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
        header = with_defaults(record, schema.HEADER_DEFAULTS)
        header["config"] = with_defaults(dict(record["config"]), schema.CONFIG_DEFAULTS)
        return header

    def _add_step(self, r: dict[str, Any], line: int, start: int, end: int) -> None:
        path = self.path
        for key in schema.STEP_REQUIRED:
            if key not in r:
                raise TraceError(path, "missing", line=line, field=key)
        # As written, for the entry columns: the fast path collects the same from the same keys.
        as_written = {key: r.get(key) for key in ENTRY_KEYS} if self.entries is not None else None
        try:
            compact.expand(r)  # a 1.2 step in the 1.1 layout: every check below applies to both
        except compact.CompactError as exc:
            raise TraceError(path, exc.message, line=line, field=exc.field) from None
        step = int_field(r, "step", None, path, line)
        self._check_order(step, line)
        t = r["t"]
        if not isinstance(t, (int, float)):
            raise TraceError(path, f"expected a number, got {t!r}", line=line, field="t")
        target = [int_field(r, "target", k, path, line) for k in ("cap", "used", "left")]
        inp = [int_field(r, "input", k, path, line) for k in ("cap", "used", "left")]
        reserved = r["input"].get("reserved", 0)
        query = r.get("query") or {}
        new = req_list(r, "new", path, line)
        resumed = req_list(r, "resumed", path, line)
        running = req_list(r, "running", path, line)
        sampled = r.get("sampled")
        problem = why_problem(r, kv_pool(self.header))
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
            "n_preempted_held": held_preempted(r.get("preempted") or (), new, resumed, running),
        }
        try:
            packed = ROW.pack(*(row[name] for name in INT_COLS), start, end, *(row[f] for f in FLOAT_COLS))
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
        rows = int_field(r, "rows", None, self.path, line)
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
            packed = RUNNER_ROW.pack(
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
        table = np.frombuffer(self._rows, dtype=ROW_DTYPE)
        columns, spans = _columns_of(table)
        del table
        runner = _join_runner(columns["step"], np.frombuffer(self._runner_rows, RUNNER_DTYPE).copy())
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
    names = (*INT_COLS, *FLOAT_COLS)
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
