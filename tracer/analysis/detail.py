"""Step detail for analyses over big traces: only the steps asked for, parsed in batches,
and where the recorder's layout allows, only the keys asked for.

`Trace.step(i)` parses a whole record (about 22 KB at 256 running requests, most of it the
`running` list and the `sampled` dict) and fills its defaults; an analysis that needs two
small lists of most steps pays for all of it. Here:

- `records(trace, rows)` parses the chosen steps' records in batches (one orjson call per
  batch of lines), defaults filled in as `Trace.step` fills them;
- `region(trace, rows, first, stop)` parses only the consecutive keys from `first` up to
  (not including) `stop` of each chosen record, as one small object. The recorder writes a
  step's keys in one order (docs/trace-format.md), and a needle such as `,"new":` cannot
  occur inside a JSON string (a quote inside a string is always escaped), so its first
  match in a line is a key; none of the objects nested before `new` (target, input, query)
  has such a key. A record written otherwise (another key order, `first` or `stop`
  missing) is parsed whole instead: the same values, only slower.

The raw bytes come from the trace's own store (`Trace.raw_many`, read in blocks); nothing
here keeps them beyond a batch. A format 1.2 record comes out in the 1.1 layout, as
`Trace.step` gives it (tracer.trace.compact).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from typing import Any

import numpy as np
import orjson

from tracer.trace import compact, schema
from tracer.trace.trace_type import Trace

BATCH = 2048  # records per orjson call: bounds the parsed objects alive at once


def raw_lines(trace: Trace, rows: Sequence[int] | np.ndarray) -> list[bytes]:
    """The raw bytes of each step row's record, in the order given (read in blocks by the store)."""
    rows = np.asarray(rows, dtype=np.int64)
    got = dict(trace.raw_many(rows))  # increasing row order, each row once
    return [got[row] for row in rows.tolist()]


def with_defaults(record: dict[str, Any]) -> dict[str, Any]:
    """A whole record as `Trace.step` gives it: the 1.1 layout (format 1.2 expanded), defaults filled."""
    compact.expand(record, check=False)
    for key, value in schema.STEP_DEFAULTS.items():
        if key not in record:
            record[key] = list(value) if isinstance(value, list) else value
    return record


def records(trace: Trace, rows: Iterable[int], *, batch: int = BATCH) -> Iterator[tuple[int, dict[str, Any]]]:
    """(row, record) for each row, records as `Trace.step` gives them, parsed `batch` at a time."""
    rows = list(map(int, rows))
    for lo in range(0, len(rows), batch):
        chunk = rows[lo : lo + batch]
        parsed = orjson.loads(b"[" + b",".join(raw_lines(trace, chunk)) + b"]")
        for row, rec in zip(chunk, parsed, strict=True):
            yield row, with_defaults(rec)


def needle(key: str) -> bytes:
    """The bytes that start top-level `key` in a record, leading comma included."""
    return b',"' + key.encode() + b'":'


def region(
    trace: Trace, rows: Iterable[int], first: str, stop: str | None, *, batch: int = BATCH
) -> Iterator[tuple[int, dict[str, Any]]]:
    """(row, {key: value}) for the keys of each row's record from `first` up to `stop`, in
    the recorder's key order; a record not laid out that way is parsed whole (its dict then
    holds every key, defaults filled in). Read values with .get: a key the recorder did not
    write between the two is absent."""
    start_needle = needle(first)
    stop_needle = needle(stop) if stop is not None else None  # None: to the record's end
    rows = list(map(int, rows))
    for lo in range(0, len(rows), batch):
        chunk = rows[lo : lo + batch]
        pieces: list[bytes] = []
        whole: list[int] = []  # positions in chunk to parse as whole records
        lines = raw_lines(trace, chunk)
        for j, line in enumerate(lines):
            a = line.find(start_needle)
            if stop_needle is None:
                b = line.rstrip().rfind(b"}") if a >= 0 else -1
            else:
                b = line.find(stop_needle, a + 1) if a >= 0 else -1
            if b < 0:
                whole.append(j)
                pieces.append(b"{}")
            else:
                pieces.append(b"{" + line[a + 1 : b] + b"}")
        parsed = orjson.loads(b"[" + b",".join(pieces) + b"]")
        for j in whole:
            parsed[j] = with_defaults(orjson.loads(lines[j]))
        for row, rec in zip(chunk, parsed, strict=True):
            # A 1.2 record's groups are parallel arrays: the 1.1 entries every caller reads
            # (a region holds the groups it names; expand leaves absent keys alone).
            yield row, compact.expand(rec, check=False)


def rows_of_steps(trace: Trace, steps: np.ndarray | list[int]) -> np.ndarray:
    """Row index (0-based) of each recorded step number; -1 where the trace has no such step."""
    recorded = trace.columns["step"]
    steps = np.asarray(steps, dtype=np.int64)
    if not len(recorded):
        return np.full(len(steps), -1, dtype=np.int64)
    # Steps are recorded in increasing order; searchsorted keeps this O(log n) per lookup.
    pos = np.clip(np.searchsorted(recorded, steps), 0, len(recorded) - 1)
    return np.where(recorded[pos] == steps, pos, -1)
