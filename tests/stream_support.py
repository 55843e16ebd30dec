"""Trace lines as the writer hands them to its taps: `Record`s with their kind and step."""

from __future__ import annotations

from collections.abc import Iterable

import orjson

from tracer.record.writer import Record


def records(lines: Iterable[bytes]) -> list[Record]:
    """Records for encoded lines (a test's or a file's), kind and step read off each."""
    out = []
    for line in lines:
        record = orjson.loads(line)
        step = record.get("step")
        out.append(Record(record["kind"], step if type(step) is int else None, line))
    return out
