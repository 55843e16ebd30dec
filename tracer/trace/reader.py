"""Read traces into columnar arrays, with per-step detail on demand.

- Plain, `.gz` and (when the `zstandard` module is present) `.zst` files.
- A torn last line, as from a killed server, is expected: every complete step
  loads and `Trace.torn` says where the file tore.
- A malformed line raises TraceError naming the file, line and field. With
  strict=False it is skipped and kept in `Trace.problems` instead.
- A newer major schema version is refused; older minors and unknown keys are fine.

TraceBuilder takes bytes incrementally, so a follower of a growing file or a
live stream reuses the same parsing and validation.

Speed (bench/p2_ingest.py): each line is parsed once with orjson and reduced
on the spot to one packed row (struct) per step, so no per-record Python object
outlives its line. Records shaped as the recorder writes them take a fast path
with the same checks; anything else (older traces, missing keys, odd types,
errors) goes through the general path, which is the reference for values and
for the error contract.
"""

from __future__ import annotations

import gzip
import io
import struct
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from operator import itemgetter
from pathlib import Path
from typing import Any

import numpy as np
import orjson

from tracer.trace import compact, schema

Progress = Callable[[int, int], None]


class TraceError(Exception):
    """A trace that cannot be read as it stands; says where and which field."""

    def __init__(self, path: str | Path, message: str, *, line: int | None = None, field: str | None = None):
        self.path = str(path)
        self.line = line
        self.field = field
        self.message = message
        where = self.path if line is None else f"{self.path}:{line}"
        what = f"field '{field}': " if field else ""
        super().__init__(f"{where}: {what}{message}")


class TraceVersionError(TraceError):
    """The trace's schema major version is newer than this reader understands."""


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
    _data: bytes | bytearray = b""
    _spans: np.ndarray = field(default_factory=lambda: np.zeros((0, 2), dtype=np.int64))

    @property
    def config(self) -> dict[str, Any]:
        return self.header["config"]

    def __len__(self) -> int:
        return len(self.columns["step"])

    def step(self, i: int) -> dict[str, Any]:
        """The full record of the i-th step (0-based row), defaults filled in, in the 1.1
        layout whatever the trace's format (tracer.trace.compact; checked when loaded)."""
        start, end = self._spans[i]
        return _with_defaults(
            compact.expand(orjson.loads(self._data[start:end]), check=False), schema.STEP_DEFAULTS
        )

    def steps(self) -> list[dict[str, Any]]:
        return [self.step(i) for i in range(len(self))]


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


def _req_list(record: dict[str, Any], key: str, path: str, line: int) -> list[Any]:
    value = record.get(key, [])
    if not isinstance(value, list) or any(
        not isinstance(e, list) or len(e) < 2 or type(e[1]) is not int for e in value
    ):
        raise TraceError(path, "expected a list of [id, tokens, ...] entries", line=line, field=key)
    return value


class TraceBuilder:
    """Incremental parser: feed() bytes as they arrive, build() a Trace at any time."""

    def __init__(self, path: str | Path, *, strict: bool = True) -> None:
        self.path = str(path)
        self.strict = strict
        self.header: dict[str, Any] | None = None
        self.footer: dict[str, Any] | None = None
        self.problems: list[TraceError] = []
        self.gaps: list[tuple[int, int]] = []  # (after, before): steps missing in between
        self.hooks: list[dict[str, Any]] = []
        self._rows = bytearray()  # _ROW per step
        self._runner_rows = bytearray()  # _RUNNER_ROW per runner record
        # Everything fed so far: bytes when a whole file came in one piece (not
        # copied), a growing bytearray otherwise.
        self._data: bytes | bytearray = b""
        self._line = 0  # lines consumed so far
        self._pos = 0  # bytes of _data consumed as complete lines

    @property
    def steps_parsed(self) -> int:
        return len(self._rows) // _ROW.size

    def feed(self, chunk: bytes) -> int:
        """Parse every complete line in `chunk` (plus any held remainder); return steps added."""
        before = self.steps_parsed
        if not self._data and type(chunk) is bytes:
            self._data = chunk  # a whole file at once: parsed in place, not copied
        else:
            if type(self._data) is not bytearray:
                self._data = bytearray(self._data)
            self._data += chunk
        self._parse()
        return self.steps_parsed - before

    def _parse(self, progress: Progress | None = None) -> None:
        """Parse every complete line of _data not parsed yet, in windows of about 4 MiB
        (`progress` hears after each). bytes are read in place; a bytearray (it may
        grow) one window at a time through a copy."""
        data, pos, window = self._data, self._pos, 1 << 22
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
            self._pos = pos = stop
            if progress is not None:
                progress(pos, total)

    def _consume(self, source: io.BytesIO, pos: int, stop: int) -> None:
        """Parse lines from `source` (positioned at byte `pos` of _data) up to `stop`,
        a line boundary. The hot loop of trace loading: per line one orjson parse and
        one packed row; line numbers are counted (in C) only when a record needs one."""
        loads, decode_error = orjson.loads, orjson.JSONDecodeError
        rows, runner_rows = self._rows, self._runner_rows
        pack, pack_runner = _ROW.pack, _RUNNER_ROW.pack
        data = self._data
        compact_refs_ok = compact.refs_ok
        counted, line_no = pos, self._line  # line_no: lines before byte `counted`
        have_header = self.header is not None
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
                                ok = ok and compact_refs_ok(e[1], n_all)
                    # The budget fields must be exactly ints. The other values are
                    # checked by pack() itself: "q" takes ints and bools (read as 1/0,
                    # as int() does on the general path) and refuses the rest, "d"
                    # takes numbers, so anything else goes down the general path.
                    if (
                        ok
                        and type(step) is int
                        and type(tc) is int
                        and type(tu) is int
                        and type(tl) is int
                        and type(ic) is int
                        and type(iu) is int
                        and type(il) is int
                    ):
                        rows += pack(
                            step, tc, tu, tl, ic, iu, ir, il, qp, qr, qc or -1,
                            n_new, n_res, n_run, len(pre), len(fin), nt, rt, ut, spec,
                            -1 if smp is None else sum(smp.values()) if type(smp) is dict else sum(smp),
                            nw, nr, _held(pre, new, res, run) if pre else 0, pos, pos + n - 1, t, su, kv,
                        )  # fmt: skip
                        fast = True
                except (KeyError, TypeError, IndexError, AttributeError, struct.error):
                    pass  # not the recorder's shape: the general path decides
            elif kind == "runner" and have_header:
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
                        runner_rows += pack_runner(
                            step,
                            pass_ != "target",
                            rows_,
                            -1 if cap is None else cap,
                            -1 if padded is None else padded,
                        )
                        fast = True
                except (KeyError, struct.error):
                    pass
            if not fast:
                line_no += data.count(b"\n", counted, pos)
                counted = pos
                self._line = line_no + 1
                self._record(pos, pos + n - 1)
                have_header = self.header is not None
            pos += n
            if pos >= stop:
                break
        self._line = line_no + data.count(b"\n", counted, pos)

    def finish(self) -> Torn | None:
        """End of input: a last line without newline is parsed if whole, else reported torn."""
        data = self._data
        if self._pos >= len(data):
            return None
        start, end = self._pos, len(data)
        line = self._line + 1
        try:
            orjson.loads(data[start:end])
        except orjson.JSONDecodeError:
            return Torn(line=line, offset=start, length=end - start)
        self._line = line
        self._record(start, end)
        self._pos = end
        return None

    def _problem(self, error: TraceError) -> None:
        if self.strict:
            raise error
        self.problems.append(error)

    def _record(self, start: int, end: int) -> None:
        line = self._line
        try:
            record = orjson.loads(self._data[start:end])
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
                raise TraceError(
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
                self.footer = _with_defaults(record, schema.FOOTER_DEFAULTS)
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
            raise TraceError(self.path, str(exc), line=line, field="schema") from None
        if major > schema.SCHEMA_MAJOR:
            raise TraceVersionError(
                self.path,
                f"schema version {major}.{minor} is newer than this schedscope reads "
                f"({schema.SCHEMA_MAJOR}.x); upgrade schedscope to read it",
                line=line,
                field="schema",
            )
        if not isinstance(record.get("config"), dict):
            raise TraceError(self.path, "the header has no engine config object", line=line, field="config")
        header = _with_defaults(record, schema.HEADER_DEFAULTS)
        header["config"] = _with_defaults(dict(record["config"]), schema.CONFIG_DEFAULTS)
        return header

    def _add_step(self, r: dict[str, Any], line: int, start: int, end: int) -> None:
        path = self.path
        for key in schema.STEP_REQUIRED:
            if key not in r:
                raise TraceError(path, "missing", line=line, field=key)
        try:
            compact.expand(r)  # a 1.2 step in the 1.1 layout: every check below applies to both
        except compact.CompactError as exc:
            raise TraceError(path, exc.message, line=line, field=exc.field) from None
        step = _int(r, "step", None, path, line)
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
        columns = {name: table[name].copy() for name in (*_INT_COLS, *_FLOAT_COLS)}
        spans = np.stack([table["_start"], table["_end"]], axis=1)
        del table
        runner = _join_runner(columns["step"], np.frombuffer(self._runner_rows, _RUNNER_DTYPE).copy())
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
            _data=self._data,
            _spans=spans,
        )


def _join_runner(steps: np.ndarray, records: np.ndarray) -> dict[str, np.ndarray]:
    """Runner columns per step row: rows (and padded rows) summed over a step's records
    of each pass, the capacity of its last one; -1 where a step has none (padded: where
    none of them noted padding)."""
    runner = {name: np.full(len(steps), -1, dtype=np.int64) for name in RUNNER_COLS}
    if not len(records) or not len(steps):
        return runner
    if bool((records["rows"] < 0).any()):
        return _join_runner_exact(steps, records, runner)
    # Group by (step, pass), keeping file order inside a group.
    order = np.lexsort((np.arange(len(records)), records["pass"], records["step"]))
    rec = records[order]
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


def _read_bytes(path: Path) -> tuple[bytes | bytearray, str | None]:
    """The file's decompressed bytes, and a note if a compressed stream was cut short."""
    raw = path.read_bytes()
    if path.suffix == ".gz" or raw[:2] == b"\x1f\x8b":
        # Into one growing bytearray, 16 MiB of output at a time: no list of chunks
        # plus their join (twice the trace in memory at once).
        out = bytearray()
        note = None
        while raw:
            d = zlib.decompressobj(wbits=31)
            tail = raw
            try:
                while not d.eof:
                    chunk = d.decompress(tail, 1 << 24)
                    out += chunk
                    tail = d.unconsumed_tail
                    if not tail and not chunk:
                        break
            except zlib.error as exc:
                note = f"gzip data corrupt ({exc}); kept what decompressed"
                break
            if not d.eof:
                out += d.flush()
                note = "gzip stream cut short; kept what decompressed"
                break
            raw = d.unused_data  # appended writes make several gzip members
        return out, note
    if path.suffix == ".zst":
        try:
            import zstandard  # optional: only if installed
        except ImportError:
            raise TraceError(path, "reading .zst needs the 'zstandard' package") from None
        return zstandard.ZstdDecompressor().decompressobj().decompress(raw), None
    return raw, None


def load(path: str | Path, *, strict: bool = True, progress: Progress | None = None) -> Trace:
    """Load a whole trace file. See the module docstring for the error contract."""
    path = Path(path)
    try:
        data, note = _read_bytes(path)
    except FileNotFoundError:
        raise TraceError(path, "no such file") from None
    except IsADirectoryError:
        raise TraceError(path, "is a directory, not a trace file") from None
    except (OSError, EOFError, gzip.BadGzipFile) as exc:
        raise TraceError(path, f"cannot read: {exc}") from None
    builder = TraceBuilder(path, strict=strict)
    total = len(data)
    builder._data = data  # parsed in place: the Trace keeps these bytes for step detail
    builder._parse(progress)
    if progress is not None:
        progress(total, total)
    torn = builder.finish()
    if builder.header is None:
        what = "empty file" if total == 0 else (torn.describe() if torn else "no records")
        raise TraceError(path, f"no complete header record ({what})")
    if torn is None and note is not None:
        builder.problems.append(TraceError(path, note))
    return builder.build(torn)
