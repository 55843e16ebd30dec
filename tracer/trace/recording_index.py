"""The recording index: the reader's sidecar for a trace, written while the trace is recorded.

A first open of a trace then maps its columns instead of parsing it (tracer.trace.reader's
sidecar, docs/trace-format.md). Two feed one: a process beside the recorder that follows
the file as the writer thread writes it (tracer.trace.index_follower), and the saver of a
followed stream (`attach.RunSaver`, a viewer's `--save` copy). Each hands every record
written here, with its parsed value: the step rows are packed by the reader's fast path
(`rows.fast_step_row`, every type checked) and the per-request entry columns collected
by the reader's own collector (tracer.trace.entries), so the index holds exactly what a
parse of the file would. A `gap` record (a stream copy's declared
hole) ends the index quietly: the reader's general path counts gaps, so such a copy is
parsed on its first open.

The index goes to `<trace>.ssidx` in segments (`sidecar.append_segment`): every
`interval` seconds the rows and entries of the steps written since the last segment, with
the reader's meta as of that point (the fingerprint of the file so far: its size, mtime and
hashes), and a last one after the footer. So a killed server leaves a file whose whole
segments describe a prefix of its trace (the reader parses the rest), and one cut short
mid-segment is read up to it. Nothing here is trusted by the reader beyond its own
checks: the fingerprint, the step order and every array's length.

The trace file stays complete without it. Anything unexpected (a record the fast path
does not take, a step out of order, the trace written elsewhere, an index that cannot be
written) stops the index for good with one warning; the segments written so far stay
valid for the prefix they describe.
"""

from __future__ import annotations

import logging
import os
import time
from pathlib import Path
from typing import Any

import orjson

from tracer.trace import index_files, schema, sidecar
from tracer.trace.builder import TraceBuilder
from tracer.trace.entries import EntryCollector
from tracer.trace.index_files import RECORDING_INDEX_INTERVAL_S as INTERVAL_S
from tracer.trace.index_files import recording_index_wanted
from tracer.trace.rows import fast_runner_row, fast_step_row, kv_pool
from tracer.trace.sidecar_restore import SIDECAR_CHECKS, row_arrays

logger = logging.getLogger("schedscope.recording_index")


def recording_index(path: str | Path | None, *, interval_s: float = INTERVAL_S) -> RecordingIndex | None:
    """The recording index for a trace written to `path` in this process, or None
    (`recording_index_wanted`)."""
    return RecordingIndex(path, interval_s=interval_s) if recording_index_wanted(path) else None


class RecordingIndex:
    """Fed by one writer or follower: `add` each record written (in order, with its bytes'
    offset), `checkpoint` now and then, `close` after the footer and the file are closed.

    `fd`: the trace, held open by a follower, which reads it behind its writer: a segment
    then fingerprints the bytes it covers, the file having grown past them. Without it,
    the writer itself feeds the index and a segment is written only when the file holds
    exactly what was added."""

    def __init__(self, trace: str | Path, *, interval_s: float = INTERVAL_S, fd: int | None = None) -> None:
        self.trace = Path(trace)
        self._fd = fd
        self.interval_s = interval_s
        self.failed: str | None = None
        self._target: Path | None = None
        self._segment = 0
        self._next = time.monotonic() + interval_s
        self._pos = 0  # bytes of the trace the index covers
        self._lines = 0
        self._header: dict[str, Any] | None = None
        self._pool: int | None = None  # the header's KV blocks, which no step's free count exceeds
        self._footer: dict[str, Any] | None = None
        self._footer_line: int | None = None
        self._hooks: list[dict[str, Any]] = []
        self._last = -(1 << 63)
        self._ids_written = 0
        self._new_segment()

    def _new_segment(self) -> None:
        self._rows = bytearray()
        self._runner = bytearray()
        collector = EntryCollector()
        if self._segment:  # request codes run on across segments
            collector.codes, collector.ids = self._entries.codes, self._entries.ids
            collector.live = self._entries.live
        self._entries = collector

    def stop(self, why: str | None) -> None:
        """No more segments; `why` is logged once (None: quietly, the trace itself stopped)."""
        if self.failed is None:
            self.failed = why or "the trace stopped"
            if why is not None:
                logger.log(
                    # A viewer's copy of a stream: its first open parses, nothing more (the
                    # TUI's screen is no place for it); the recorder's own file: a warning.
                    logging.WARNING if self._fd is not None else logging.INFO,
                    "schedscope: no more recording index for %s (%s); the trace itself is unaffected",
                    self.trace,
                    why,
                )

    # -- the writer's or the follower's thread -------------------------------------------

    def add(self, kind: str, value: Any, line: bytes, offset: int) -> None:
        """Record `value` (the dict it was encoded from), written as `line` at byte `offset`."""
        if self.failed is not None:
            return
        if offset != self._pos:
            self.stop(f"a record at byte {offset}, where {self._pos} was due")
            return
        end = offset + len(line)
        if kind == schema.STEP:
            open_ = self._footer is None
            row = fast_step_row(value, offset, end - 1, self._last, self._pool) if open_ else None
            if row is None:
                self.stop(f"step {value.get('step')!r} is not what the reader's fast path takes")
                return
            self._rows += row
            self._last = value["step"]
            self._entries.add(value)
            if self._entries.failed is not None:
                self.stop(f"entry columns: {self._entries.failed}")
                return
        elif kind == schema.RUNNER:
            row = fast_runner_row(value)
            if row is None:
                if value.get("step") is not None:  # a step-less pass is skipped by the reader too
                    self.stop("a runner record the reader's fast path does not take")
                    return
            else:
                self._runner += row
        elif kind == schema.HEADER:
            builder = TraceBuilder(self.trace)
            builder.feed(line)  # the header exactly as the reader reads it, defaults and all
            self._header = builder.header
            self._pool = kv_pool(builder.header)
        elif kind == schema.HOOKS:
            self._hooks.append(orjson.loads(line))
        elif kind == schema.GAP:
            self.stop(None)  # a declared hole: the reader's general path counts it
            return
        elif kind == schema.FOOTER:
            self._footer = {**schema.FOOTER_DEFAULTS, **orjson.loads(line)}
            self._footer_line = self._lines + 1
        self._pos = end
        self._lines += 1

    def due(self) -> bool:
        return self.failed is None and time.monotonic() >= self._next

    def checkpoint(self) -> None:
        """Write the steps since the last segment: the file holds exactly what was added
        (the writer flushed it), or, followed, at least that."""
        if self.failed is not None or self._header is None:
            return
        self._next = time.monotonic() + self.interval_s
        if self._pos < sidecar.MIN_SOURCE_BYTES:
            return  # the reader parses a trace this small and keeps no sidecar for it: none here either
        try:
            self._write_segment()
        except Exception as exc:  # an accelerator: never the writer's failure
            self.stop(f"{type(exc).__name__}: {exc}")

    def close(self) -> None:
        """The last segment, after the footer was written and the file closed."""
        self.checkpoint()

    def _write_segment(self) -> None:
        if self._fd is not None:
            st = os.fstat(self._fd)
            if st.st_size < self._pos:
                raise OSError(f"the trace holds {st.st_size} bytes, {self._pos} were read")
            fingerprint = sidecar.fingerprint(self._fd, st, self._pos)
        else:
            with open(self.trace, "rb", buffering=0) as f:
                st = os.fstat(f.fileno())
                if st.st_size != self._pos:
                    raise OSError(f"the trace holds {st.st_size} bytes, {self._pos} were written")
                fingerprint = sidecar.fingerprint(f.fileno(), st)
        meta = {
            "segment": self._segment,
            "born": True,  # the format's key for a recording index's segment (docs/trace-format.md)
            "source": fingerprint,
            "store": "plain",
            "strict": True,
            "header": self._header,
            "checks": SIDECAR_CHECKS,
            "footer": self._footer,
            "footer_line": self._footer_line,
            "gaps": [],
            "hooks": self._hooks,
            "problems": [],
            "torn": None,
            "parsed_end": self._pos,
            "lines": self._lines,
        }
        entries = self._entries.build()
        assert entries is not None  # a failed collector stopped the index in add()
        arrays = row_arrays(self._rows, self._runner)
        arrays.update(entries.arrays(first_id=self._ids_written))
        if self._target is None:
            self._target = self._first_target()
        sidecar.append_segment(self._target, meta, arrays)
        self._ids_written = len(self._entries.ids)
        self._segment += 1
        self._new_segment()

    def _first_target(self) -> Path:
        """Where the index goes: next to the trace, else in the cache directory; any sidecar
        left there by an earlier run of the same path is removed first (unlinked, not
        truncated: a reader may have it mapped)."""
        errors = []
        for target in index_files.locations(self.trace):
            try:
                target.parent.mkdir(parents=True, exist_ok=True)
                if target.exists():
                    target.unlink()
                with open(target, "xb"):
                    pass
                return target
            except OSError as exc:
                errors.append(f"{target}: {exc}")
        raise OSError("; ".join(errors) or "SCHEDSCOPE_SIDECAR=off")
