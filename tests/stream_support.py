"""Trace lines as the writer hands them to its taps (`Record`s with their kind and step), and
waiting for a source, stream or viewer thread to get somewhere."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from typing import Any

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


def wait_for(condition: Callable[[], Any], timeout: float = 6.0) -> None:
    """Poll `condition` until it holds; AssertionError after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError("timed out")
        time.sleep(0.01)
