"""The born index (tracer.trace.born): the reader's sidecar, written by the recorder's writer
thread while it writes the trace.

- A trace the recorder's writer wrote opens without being parsed, and what it opens to equals
  a parse of the file: columns, runner columns, spans, header, footer, hooks and the entry
  columns (so the step pass and the request index equal the reference too).
- The index is never trusted when stale: a kill (trace torn, index cut mid-segment) opens
  from the whole segments and parses the rest, saying so in one line; a file changed since
  is parsed; a step appended after the footer is refused as a parse refuses it.
- Small traces get none (as the reader keeps none for them); gzip and SCHEDSCOPE_SIDECAR=off
  get none.
"""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import orjson
import pytest

from tests.conftest import ROOT
from tests.test_entrypass import assert_equals_reference, assert_same_entries
from tracer.trace import compact, reader, sidecar
from tracer.trace.born import born_index
from tracer.trace.errors import TraceOrderError
from tracer.trace.reader import Trace, load


def _generate(out: Path, *extra: str) -> Path:
    # 2,400 steps at 256 running: about 24 MB, past the 16 MiB below which no sidecar is kept.
    args = ["--steps", "2400", "--seed", "3", "--max-running", "256", "--arrival-rate", "3"]
    args += ["--kv-blocks", "8000", "--budget", "8192", *extra]
    subprocess.run([sys.executable, str(ROOT / "bench" / "gen_trace.py"), str(out), *args], check=True)
    return out


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A trace written by the recorder's writer thread with a segment at every batch."""
    return _generate(tmp_path_factory.mktemp("born") / "run.jsonl", "--index-interval", "0")


@pytest.fixture
def copy(recorded: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    out = tmp_path / "run.jsonl"
    shutil.copy2(recorded, out)  # mtime kept: the index's fingerprint still holds
    shutil.copy2(recorded.with_name(recorded.name + ".ssidx"), out.with_name(out.name + ".ssidx"))
    return out


def _no_parse(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*args: object, **kw: object) -> None:
        raise AssertionError("parsed the trace instead of opening its born index")

    monkeypatch.setattr(reader, "_parse_plain", refuse)


def assert_same_trace(a: Trace, b: Trace) -> None:
    for name in a.columns:
        np.testing.assert_array_equal(a.columns[name], b.columns[name], err_msg=name)
    for name in a.runner:
        np.testing.assert_array_equal(a.runner[name], b.runner[name], err_msg=name)
    np.testing.assert_array_equal(a._spans, b._spans)
    assert (a.header, a.footer, a.hooks, a.gaps, a.torn) == (b.header, b.footer, b.hooks, b.gaps, b.torn)
    assert a.entries is not None and b.entries is not None
    assert_same_entries(a.entries, b.entries)


def _meta(data: bytes, at: int) -> dict:
    """The meta of the sidecar container starting at byte `at`."""
    (n,) = sidecar._LEN.unpack_from(data, at + len(sidecar.MAGIC))
    head = at + len(sidecar.MAGIC) + sidecar._LEN.size
    return orjson.loads(data[head : head + n])


def _segments(index: Path) -> list[int]:
    """Where each segment of a born index starts."""
    data, at, starts = index.read_bytes(), 0, []
    while at < len(data):
        starts.append(at)
        at += _meta(data, at)["total"]
    return starts


def test_a_recorded_trace_opens_from_its_born_index_equal_to_a_parse(
    copy: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    assert len(_segments(copy.with_name(copy.name + ".ssidx"))) > 3
    parsed = load(copy, sidecar=False, entries=True)
    with monkeypatch.context() as m:
        _no_parse(m)
        with caplog.at_level(logging.INFO):
            born = load(copy)
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert born.footer is not None and born.footer["steps_written"] == len(born) == 2400
    assert born.fingerprint is not None
    assert_same_trace(parsed, born)
    assert_equals_reference(born)


def test_the_writers_row_is_the_parsers(recorded: Path) -> None:
    """The born index packs the recorder's steps without the parse's type checks: the same rows."""
    last = -1
    for line in recorded.read_bytes().splitlines():
        rec = orjson.loads(line)
        if rec["kind"] == "step":
            row = reader.recorder_step_row(rec, 10, 20, last)
            assert row is not None and row == reader.fast_step_row(rec, 10, 20, last)
            assert reader.recorder_step_row(rec, 10, 20, rec["step"]) is None  # not after itself
            last, step = rec["step"], rec
    # Another layout (1.1 entries): the parser's own fast path packs it.
    old = compact.expand(step)
    assert reader.recorder_step_row(old, 10, 20, -1) == reader.fast_step_row(old, 10, 20, -1) is not None


def test_a_killed_server_opens_from_the_whole_segments_and_parses_the_rest(
    copy: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    index = copy.with_name(copy.name + ".ssidx")
    starts = _segments(index)
    data = index.read_bytes()
    # The index cut in the middle of its third segment, the trace torn in a line after what the
    # whole segments cover: as a kill leaves them.
    cut = starts[2] + (starts[3] - starts[2]) // 2
    covered = _meta(data, starts[1])["parsed_end"]
    index.write_bytes(data[:cut])
    trace = copy.read_bytes()
    tear = trace.index(b"\n", covered + 100_000) + 500
    copy.write_bytes(trace[:tear])
    expect = load(copy, sidecar=False, entries=True)
    assert expect.footer is None and expect.torn is not None
    with caplog.at_level(logging.WARNING, logger="schedscope.sidecar"):
        got = load(copy, entries=True)
    lines = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(lines) == 1 and "cut short after segment 1" in lines[0], lines
    assert_same_trace(expect, got)
    assert_equals_reference(got)


def _warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]


def test_an_index_cut_inside_its_first_segment_is_not_used(
    copy: Path, caplog: pytest.LogCaptureFixture
) -> None:
    index = copy.with_name(copy.name + ".ssidx")
    index.write_bytes(index.read_bytes()[: _segments(index)[1] - 64])
    expect = load(copy, sidecar=False, entries=True)
    with caplog.at_level(logging.WARNING):
        got = load(copy, entries=True)
    assert len(_warnings(caplog)) == 1 and "is cut short" in _warnings(caplog)[0], _warnings(caplog)
    assert_same_trace(expect, got)
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        load(copy, entries=True)  # rebuilt by that load: said once
    assert not _warnings(caplog)


def test_a_file_changed_since_is_parsed(
    copy: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    data = bytearray(copy.read_bytes())
    at = data.index(b'"kv_usage":', len(data) // 2) + len(b'"kv_usage":')
    data[at] = ord("1") if data[at] != ord("1") else ord("0")  # same size, another value
    copy.write_bytes(bytes(data))
    os.utime(copy, ns=(os.stat(copy).st_atime_ns, os.stat(copy).st_mtime_ns + 10**9))
    expect = load(copy, sidecar=False, entries=True)
    called = []
    real = reader._parse_plain
    monkeypatch.setattr(reader, "_parse_plain", lambda *a: called.append(1) or real(*a))
    with caplog.at_level(logging.WARNING):
        assert_same_trace(expect, load(copy, entries=True))
    assert called
    assert len(_warnings(caplog)) == 1 and "no longer describes" in _warnings(caplog)[0], _warnings(caplog)


def test_a_step_after_the_footer_is_refused_as_a_parse_refuses_it(copy: Path) -> None:
    lines = copy.read_bytes().splitlines()
    step = orjson.loads(next(line for line in reversed(lines) if b'"kind":"step"' in line))
    step["step"] += 1
    with open(copy, "ab") as f:
        f.write(orjson.dumps(step) + b"\n")
    with pytest.raises(TraceOrderError, match="after the footer"):
        load(copy, sidecar=False)
    with pytest.raises(TraceOrderError, match="after the footer"):
        load(copy)  # the index covers up to the footer; the step after it is parsed and refused


def test_no_index_for_a_small_trace_gzip_or_when_sidecars_are_off(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    small = tmp_path / "small.jsonl"
    args = ["--steps", "50", "--max-running", "16", "--index-interval", "0"]
    subprocess.run([sys.executable, str(ROOT / "bench" / "gen_trace.py"), str(small), *args], check=True)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["small.jsonl"]
    assert born_index(tmp_path / "t.jsonl.gz") is None
    assert born_index(None) is None
    monkeypatch.setenv("SCHEDSCOPE_SIDECAR", "off")
    assert born_index(tmp_path / "t.jsonl") is None
