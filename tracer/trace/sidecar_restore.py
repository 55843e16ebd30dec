"""A built trace saved to its sidecar, and restored from it (tracer.trace.sidecar holds the
file format): the packed step and runner rows, a gzip file's member index, the entry
columns, and the builder's state (header, footer, gaps, problems, where it stopped), so a
plain file that grew since is parsed from there on.
"""

from __future__ import annotations

import dataclasses
import logging
import os
from pathlib import Path

import numpy as np
import orjson

from tracer.trace import sidecar
from tracer.trace.builder import Progress, TraceBuilder
from tracer.trace.columns import ROW_DTYPE, RUNNER_DTYPE
from tracer.trace.entries import SIDECAR_DTYPES as ENTRY_DTYPES
from tracer.trace.entries import Entries, EntryCollector
from tracer.trace.errors import TraceError
from tracer.trace.store import MEMBER_DTYPE, FileStore, GzipMemberStore, Store, file_identity
from tracer.trace.trace_type import EntriesWanted, Torn, Trace, entries_of

logger = logging.getLogger("schedscope.reader")


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
            write_sidecar(path, builder, torn, sidecar.fingerprint(fd, st), "plain")
    except OSError as exc:
        logger.debug("schedscope: no sidecar for %s (%s)", path, exc)


SIDECAR_ARRAYS = {"rows": ROW_DTYPE, "runner": RUNNER_DTYPE, "members": MEMBER_DTYPE, **ENTRY_DTYPES}
# The checks a sidecar's load applied. 2: the step order (TraceBuilder._check_order). A
# sidecar made before it may hold a repeated step or one after the footer: never trusted.
# 3: a step's free KV blocks within the header's pool (why_problem).
SIDECAR_CHECKS = 3


def row_arrays(rows: bytes | bytearray, runner: bytes | bytearray) -> dict[str, np.ndarray]:
    """The sidecar's `rows` and `runner` arrays from packed step and runner rows."""
    return {"rows": np.frombuffer(rows, ROW_DTYPE), "runner": np.frombuffer(runner, RUNNER_DTYPE)}


def write_sidecar(
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


def from_sidecar(
    path: Path,
    fd: int,
    st: os.stat_result,
    strict: bool,
    kind: str,
    progress: Progress | None,
    want_entries: EntriesWanted = False,
) -> tuple[Trace | None, TraceBuilder | None]:
    """(the Trace, None) from a sidecar that matches the file; (None, a builder holding
    everything up to where the sidecar stopped) for a plain file that grew since; or
    (None, None): parse from the start."""
    found = sidecar.read(path, fd, st, SIDECAR_ARRAYS, pieces=True)
    if found is None:
        return None, None
    meta, pieces, status = found
    try:
        # A recording index comes in segments (tracer.trace.recording_index): the step and runner rows are
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
    if want_entries is True and found is None and entries_of(trace) is not None:
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
    """A recording index's segments of one array as one: joined as bytes (NumPy copies a record
    dtype field by field, five times slower)."""
    if len(pieces) == 1:
        return pieces[0]
    return np.concatenate([p.view(np.uint8) for p in pieces]).view(pieces[0].dtype)


def _count_cols(rows: np.ndarray) -> dict[str, np.ndarray]:
    return {name: rows[name] for name in ("n_new", "n_resumed", "n_running", "n_preempted", "n_finished")}
