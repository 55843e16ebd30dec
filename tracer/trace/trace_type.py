"""The Trace: a loaded trace's columns, with each step's full record read on demand.

`Torn` says where a file's incomplete last line starts; `entries_of` gives a Trace's
per-request entry columns (tracer.trace.entries), collected from its records when its load
did not bring them, and `entry_columns` what a pass over them needs, in one bundle.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np
import orjson

from tracer.trace import compact, schema
from tracer.trace.entries import Entries, EntryCollector, EntryColumns
from tracer.trace.errors import TraceError, TraceOrderError
from tracer.trace.rows import with_defaults
from tracer.trace.store import MemoryStore, Store

logger = logging.getLogger("schedscope.reader")
_BATCH = 2048  # records per orjson call in steps_containing: bounds the parsed ones alive at once
# What a load does about the per-request entry columns (Trace.entries): False, nothing; True,
# collects them in its parse or maps them from a sidecar, which is rewritten with them when it
# lacks them; WHILE_PARSING, collects them only when it parses the file anyway (a sidecar
# without them is used as it is: a warm file's derived sidecars may make them needless).
WHILE_PARSING = "while parsing"
EntriesWanted = bool | Literal["while parsing"]


@dataclass(frozen=True)
class Torn:
    """Where an incomplete last line starts (1-based line, byte offset) and its length."""

    line: int
    offset: int
    length: int

    def describe(self) -> str:
        return f"torn at line {self.line} (byte {self.offset}, {self.length} bytes of an incomplete record)"


@dataclass(frozen=True)
class FooterCount:
    """A footer's `steps_written` against the steps read, and what accounts for the
    difference: steps in a stream copy's gaps, records the recorder dropped, step records
    skipped as out of order or (when none were) malformed lines skipped."""

    written: Any
    read: int
    in_gaps: int
    dropped: int
    out_of_order: int
    malformed: int


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
    # The header's facts an analysis reads, set once when the Trace is made (a copy made with
    # dataclasses.replace sets them again): its engine config, and its schema version (None
    # when the header's is not "MAJOR.MINOR"; an absent one is "1.0").
    config: dict[str, Any] = field(init=False, repr=False)
    schema_version: tuple[int, int] | None = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self.config = self.header["config"]
        try:
            self.schema_version = schema.parse_version(self.header.get("schema", "1.0"))
        except ValueError:
            self.schema_version = None

    def __len__(self) -> int:
        return len(self.columns["step"])

    def footer_count(self) -> FooterCount | None:
        """When the footer's `steps_written` is not the number of steps read: both numbers,
        and what accounts for steps read fewer (gaps, dropped or skipped records). None when
        they agree, or without a footer (a torn file: its count was never written)."""
        if self.footer is None:
            return None
        written, read = self.footer.get("steps_written"), len(self)
        if written == read:
            return None
        skipped = sum(isinstance(p, TraceOrderError) for p in self.problems)
        return FooterCount(
            written=written,
            read=read,
            in_gaps=sum(max(0, before - after - 1) for after, before in self.gaps),
            dropped=self.footer.get("records_dropped") or 0,
            out_of_order=skipped,
            malformed=0 if skipped else len(self.problems),
        )

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

    def steps_containing(
        self, needle: bytes, first: int = 0, stop: int | None = None
    ) -> Iterator[tuple[int, dict[str, Any]]]:
        """(row, full record as `step` gives it) for each row in [first, stop) (None: to the
        end) whose raw record contains `needle`, a request id's JSON say: one read of those
        rows' bytes, only the hits parsed, a batch of them per orjson call."""
        end = len(self) if stop is None else min(stop, len(self))
        batch: list[tuple[int, bytes]] = []
        for row, raw in self.raw_many(range(first, end)):
            if needle in raw:
                batch.append((row, raw))
            if len(batch) >= _BATCH:
                yield from _parsed(batch)
                batch = []
        yield from _parsed(batch)

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
        return with_defaults(compact.expand(record, check=False), schema.STEP_DEFAULTS)


def _parsed(batch: list[tuple[int, bytes]]) -> Iterator[tuple[int, dict[str, Any]]]:
    """Each (row, raw record) of `batch` parsed in one orjson call, as `Trace.step` gives it."""
    if batch:
        records = orjson.loads(b"[" + b",".join(raw for _, raw in batch) + b"]")
        for (row, _), record in zip(batch, records, strict=True):
            yield row, with_defaults(compact.expand(record, check=False), schema.STEP_DEFAULTS)


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


def entry_columns(trace: Trace, chunk: int) -> EntryColumns | None:
    """What a pass over the trace's entry columns needs (`Entries.for_pass`: its scheduled
    entries in chunks of about `chunk`), or None when its records do not fit entry columns."""
    e = entries_of(trace)
    return None if e is None else e.for_pass(trace.columns, chunk)
