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

The raw bytes come from the trace's own storage (`Trace.raw_many` when the reader has it,
else the bytes and spans it keeps, searched in place); nothing here keeps a copy.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from typing import Any

import numpy as np
import orjson

from tracer.trace import schema
from tracer.trace.reader import Trace

BATCH = 2048  # records per orjson call: bounds the parsed objects alive at once


def buffer(trace: Trace) -> tuple[bytes | bytearray, np.ndarray] | None:
    """(bytes, spans) to search in place, or None when the trace's storage does not keep
    one contiguous buffer (then `raw_lines` is the way in)."""
    if getattr(trace, "raw_many", None) is not None:
        return None
    data, spans = getattr(trace, "_data", None), getattr(trace, "_spans", None)
    if data is None or spans is None:
        return None
    return data, spans


def raw_lines(trace: Trace, rows: Sequence[int] | np.ndarray) -> list[bytes]:
    """The raw bytes of each step row's record, in the order given."""
    raw_many = getattr(trace, "raw_many", None)
    if raw_many is not None:
        return list(raw_many(rows))
    data, spans = trace._data, trace._spans
    return [bytes(data[s:e]) for s, e in spans[np.asarray(rows, dtype=np.int64)].tolist()]


def with_defaults(record: dict[str, Any]) -> dict[str, Any]:
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
    trace: Trace, rows: Iterable[int], first: str, stop: str, *, batch: int = BATCH
) -> Iterator[tuple[int, dict[str, Any]]]:
    """(row, {key: value}) for the keys of each row's record from `first` up to `stop`, in
    the recorder's key order; a record not laid out that way is parsed whole (its dict then
    holds every key, defaults filled in). Read values with .get: a key the recorder did not
    write between the two is absent."""
    start_needle, stop_needle = needle(first), needle(stop)
    rows = list(map(int, rows))
    buf = buffer(trace)
    for lo in range(0, len(rows), batch):
        chunk = rows[lo : lo + batch]
        pieces: list[bytes] = []
        whole: list[int] = []  # positions in chunk to parse as whole records
        if buf is not None:
            data, spans = buf
            find = data.find
            for j, (s, e) in enumerate(spans[chunk].tolist()):
                a = find(start_needle, s, e)
                b = find(stop_needle, a + 1, e) if a >= 0 else -1
                if b < 0:
                    whole.append(j)
                    pieces.append(b"{}")
                else:
                    pieces.append(b"{" + data[a + 1 : b] + b"}")
            lines = None
        else:
            lines = raw_lines(trace, chunk)
            for j, line in enumerate(lines):
                a = line.find(start_needle)
                b = line.find(stop_needle, a + 1) if a >= 0 else -1
                if b < 0:
                    whole.append(j)
                    pieces.append(b"{}")
                else:
                    pieces.append(b"{" + line[a + 1 : b] + b"}")
        parsed = orjson.loads(b"[" + b",".join(pieces) + b"]")
        if whole:
            full = lines if lines is not None else raw_lines(trace, [chunk[j] for j in whole])
            for n, j in enumerate(whole):
                parsed[j] = with_defaults(orjson.loads(full[j] if lines is not None else full[n]))
        yield from zip(chunk, parsed, strict=True)
