"""The recording index (tracer.trace.recording_index): the reader's sidecar, written while the
recorder's writer thread writes the trace, by a process that follows the file
(tracer.trace.index_follower).

- A trace the recorder's writer wrote opens without being parsed, and what it opens to equals
  a parse of the file: columns, runner columns, spans, header, footer, hooks and the entry
  columns (so the step pass and the request index equal the reference too).
- The index is never trusted when stale: a kill (trace torn, index cut mid-segment) opens
  from the whole segments and parses the rest, saying so in one line; a file changed since
  is parsed; a step appended after the footer is refused as a parse refuses it.
- The follower outlives a killed server only to index what it had written: its index then
  covers every complete record. A file that shrinks under it, or a line that is no record,
  stops it with one warning, the segments written so far kept.
- Small traces get none (as the reader keeps none for them); gzip and SCHEDSCOPE_SIDECAR=off
  get none.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import signal
import struct
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import orjson
import pytest

from tests.conftest import ROOT
from tests.test_entry_features import assert_equals_reference, assert_same_entries
from tracer.trace import reader, sidecar
from tracer.trace.errors import TraceOrderError
from tracer.trace.index_follower import follow
from tracer.trace.reader import load
from tracer.trace.recording_index import recording_index
from tracer.trace.trace_type import Trace


def _generate(out: Path, *extra: str) -> Path:
    # 2,400 steps at 256 running: about 24 MB, past the 16 MiB below which no sidecar is kept.
    args = ["--steps", "2400", "--seed", "3", "--max-running", "256", "--arrival-rate", "3"]
    args += ["--kv-blocks", "8000", "--budget", "8192", *extra]
    subprocess.run([sys.executable, str(ROOT / "bench" / "gen_trace.py"), str(out), *args], check=True)
    return out


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A trace written through the recorder's writer, its follower writing a segment at every batch."""
    return _generate(tmp_path_factory.mktemp("recording_index") / "run.jsonl", "--index-interval", "0")


@pytest.fixture
def copy(recorded: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    out = tmp_path / "run.jsonl"
    shutil.copy2(recorded, out)  # mtime kept: the index's fingerprint still holds
    shutil.copy2(recorded.with_name(recorded.name + ".ssidx"), out.with_name(out.name + ".ssidx"))
    return out


def _no_parse(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*args: object, **kw: object) -> None:
        raise AssertionError("parsed the trace instead of opening its recording index")

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


def _covered(index: Path) -> int:
    """`parsed_end` of the last whole segment of an index being written, or 0."""
    data, at, end = (index.read_bytes() if index.exists() else b""), 0, 0
    with contextlib.suppress(struct.error, orjson.JSONDecodeError, KeyError):
        while at < len(data):
            meta = _meta(data, at)
            if at + meta["total"] > len(data):
                break  # still being written
            end, at = meta["parsed_end"], at + meta["total"]
    return end


def _segments(index: Path) -> list[int]:
    """Where each segment of a recording index starts."""
    data, at, starts = index.read_bytes(), 0, []
    while at < len(data):
        starts.append(at)
        at += _meta(data, at)["total"]
    return starts


def test_a_recorded_trace_opens_from_its_recording_index_equal_to_a_parse(
    copy: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    assert len(_segments(copy.with_name(copy.name + ".ssidx"))) > 3
    parsed = load(copy, sidecar=False, entries=True)
    with monkeypatch.context() as m:
        _no_parse(m)
        with caplog.at_level(logging.INFO):
            indexed = load(copy)
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert indexed.footer is not None and indexed.footer["steps_written"] == len(indexed) == 2400
    assert indexed.fingerprint is not None
    assert_same_trace(parsed, indexed)
    assert_equals_reference(indexed)


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
    assert recording_index(tmp_path / "t.jsonl.gz") is None
    assert recording_index(None) is None
    monkeypatch.setenv("SCHEDSCOPE_SIDECAR", "off")
    assert recording_index(tmp_path / "t.jsonl") is None


def _follower_of(pid: int) -> int:
    """The one child process of `pid` (the generator's recording index follower)."""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        kids = [
            int(k)
            for task in Path(f"/proc/{pid}/task").iterdir()
            for k in (task / "children").read_text().split()
        ]
        if kids:
            assert len(kids) == 1, kids
            return kids[0]
        time.sleep(0.05)
    raise AssertionError("no follower started")


def _gone(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except FileNotFoundError:
        return True


def test_a_killed_recorders_follower_indexes_every_complete_record(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    out = tmp_path / "killed.jsonl"
    args = ["--steps", "4000", "--seed", "5", "--max-running", "256", "--arrival-rate", "3"]
    args += ["--kv-blocks", "8000", "--budget", "8192", "--index-interval", "1"]
    gen = subprocess.Popen([sys.executable, str(ROOT / "bench" / "gen_trace.py"), str(out), *args])
    follower = _follower_of(gen.pid)
    while not out.exists() or out.stat().st_size < 24 << 20:  # past a first segment's worth
        assert gen.poll() is None, "the generator ended before it was killed"
        time.sleep(0.05)
    gen.send_signal(signal.SIGKILL)
    gen.wait()
    deadline = time.monotonic() + 60
    while not _gone(follower):
        assert time.monotonic() < deadline, "the follower outlived its parent"
        time.sleep(0.05)
    data = out.read_bytes()
    index = out.with_name(out.name + ".ssidx")
    last = _meta(index.read_bytes(), _segments(index)[-1])
    assert last["parsed_end"] == data.rindex(b"\n") + 1  # every complete record, none after
    assert last["footer"] is None
    expect = load(out, sidecar=False, entries=True)
    with caplog.at_level(logging.WARNING):
        got = load(out, entries=True)
    assert_same_trace(expect, got)
    assert_equals_reference(got)


def _follow_in_thread(path: Path) -> tuple[threading.Thread, int, list]:
    """follow() on `path` in a thread; close the returned fd to end it as a writer's close does."""
    r, w = os.pipe()
    got: list = []
    thread = threading.Thread(
        target=lambda: got.append(follow(str(path), interval_s=0, stdin=r, poll_s=0.02))
    )
    thread.start()
    return thread, w, got


def test_the_follower_parses_nothing_until_the_trace_is_big_enough_to_index(
    recorded: Path, tmp_path: Path
) -> None:
    data = recorded.read_bytes()
    small = data.index(b"\n", 1 << 20) + 1
    path = tmp_path / "t.jsonl"
    path.write_bytes(data[:small])
    thread, w, got = _follow_in_thread(path)
    time.sleep(0.3)  # several polls
    os.close(w)  # the run ended small: nothing is parsed, no index written
    thread.join(30)
    assert got and got[0].failed is None and got[0]._pos == 0
    assert not path.with_name(path.name + ".ssidx").exists()
    # A run that grows past the size catches up from its first byte.
    path.write_bytes(data[:small])
    thread, w, got = _follow_in_thread(path)
    time.sleep(0.3)
    with open(path, "ab") as f:
        f.write(data[small:])
    os.close(w)
    thread.join(60)
    assert got and got[0].failed is None and got[0]._pos == len(data)
    assert_same_trace(load(path, sidecar=False, entries=True), load(path, entries=True))


@pytest.mark.parametrize("fault", ["shrunk", "garbage"])
def test_the_follower_stops_with_one_warning_and_keeps_its_segments(
    recorded: Path,
    tmp_path: Path,
    fault: str,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    data = recorded.read_bytes()
    first = data.index(b"\n", 20 << 20) + 1  # past the size below which no segment is written
    path = tmp_path / "t.jsonl"
    path.write_bytes(data[:first])
    with caplog.at_level(logging.WARNING, logger="schedscope.recording_index"):
        thread, w, got = _follow_in_thread(path)
        deadline = time.monotonic() + 30
        index = path.with_name(path.name + ".ssidx")
        while _covered(index) < first:
            assert time.monotonic() < deadline  # caught up with the file
            time.sleep(0.02)
        with open(path, "r+b") as f:
            if fault == "shrunk":
                f.truncate(first - 1000)  # under what the index covers: cut by someone else
            else:
                f.seek(0, 2)
                f.write(b"not json\n" + data[first:])
        os.close(w)
        thread.join(30)
    assert not thread.is_alive()
    assert got and got[0].failed is not None
    lines = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(lines) == 1 and "no more recording index" in lines[0], lines
    segs = _segments(index)
    assert _meta(index.read_bytes(), segs[-1])["parsed_end"] <= first
    expect = load(path, sidecar=False, entries=True, strict=False)
    assert_same_trace(expect, load(path, entries=True, strict=False))
