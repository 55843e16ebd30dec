"""tracer.trace.store: step detail read from memory, from the file in place, or from one gzip member.

Every store must give the same steps as the bytes in memory; torn, truncated and
changed files load every complete step or fail naming the file and what is wrong.
"""

from __future__ import annotations

import gzip
import os
import pickle
import shutil
import threading
import zlib
from pathlib import Path

import numpy as np
import pytest

from tests.conftest import ROOT
from tracer.record.writer import GzipMemberSink
from tracer.trace.builder import TraceBuilder
from tracer.trace.errors import TraceError
from tracer.trace.reader import load, open_builder
from tracer.trace.store import FileStore, GzipMemberStore, MemoryStore
from tracer.trace.trace_type import Trace

SAMPLES = sorted((ROOT / "sample_traces").glob("*.jsonl"))


def members_gz(src: Path, out: Path, member_bytes: int = 4096) -> Path:
    """`src` gzip-compressed as the writer does it, in many small members."""
    with open(src, "rb") as f, open(out, "wb", buffering=0) as raw:
        sink = GzipMemberSink(raw, member_bytes=member_bytes)
        for line in f:
            sink.write(line)
        sink.close()
    return out


def gzip_members(data: bytes) -> list[tuple[int, int]]:
    """(compressed offset, length) of each gzip member in `data`."""
    out, at = [], 0
    while at < len(data):
        d = zlib.decompressobj(wbits=31)
        d.decompress(data[at:])
        used = len(data) - at - len(d.unused_data)
        out.append((at, used))
        at += used
    return out


def in_memory(path: Path) -> Trace:
    builder = TraceBuilder(path)
    builder.feed(path.read_bytes())
    return builder.build(builder.finish())


def assert_same_steps(a: Trace, b: Trace) -> None:
    assert len(a) == len(b) > 0
    for name, column in a.columns.items():
        np.testing.assert_array_equal(b.columns[name], column, err_msg=name)
    for name, column in a.runner.items():
        np.testing.assert_array_equal(b.runner[name], column, err_msg=name)
    assert [b.step(i) for i in range(len(b))] == [a.step(i) for i in range(len(a))]
    assert b.steps() == a.steps()
    assert [raw for _, raw in b.raw_many(range(len(b)))] == [b.raw(i) for i in range(len(b))]


@pytest.mark.parametrize("path", SAMPLES, ids=lambda p: p.stem)
def test_every_store_gives_the_same_steps(path: Path, tmp_path: Path) -> None:
    reference = in_memory(path)
    assert isinstance(reference.store, MemoryStore)
    plain = load(path, sidecar=False)
    assert isinstance(plain.store, FileStore) and plain.store.held == 0
    assert_same_steps(reference, plain)

    one = tmp_path / "one.jsonl.gz"
    one.write_bytes(gzip.compress(path.read_bytes()))
    single = load(one)
    assert isinstance(single.store, MemoryStore)  # an old single-member .gz: in memory, as before
    assert_same_steps(reference, single)

    many = members_gz(path, tmp_path / "many.jsonl.gz", member_bytes=512)
    assert len(gzip_members(many.read_bytes())) > 1
    multi = load(many)
    assert isinstance(multi.store, GzipMemberStore)
    assert len(multi.store.members) == len(gzip_members(many.read_bytes()))
    assert_same_steps(reference, multi)
    assert multi.header == reference.header and multi.footer == reference.footer


def test_raw_many_sorted_once_each_and_bounds_checked() -> None:
    trace = load(SAMPLES[0], sidecar=False)
    got = list(trace.raw_many([3, 1, 3, 0]))
    assert [row for row, _ in got] == [0, 1, 3]
    assert [raw for _, raw in got] == [trace.raw(0), trace.raw(1), trace.raw(3)]
    assert list(trace.raw_many([])) == []
    with pytest.raises(IndexError):
        list(trace.raw_many([len(trace)]))


def test_file_store_is_safe_from_several_threads(tmp_path: Path) -> None:
    trace = load(SAMPLES[0], sidecar=False)
    want = [trace.raw(i) for i in range(len(trace))]
    fresh = pickle.loads(pickle.dumps(trace))  # no fd yet: the threads race to open it
    errors: list[BaseException] = []

    def read() -> None:
        try:
            for _ in range(20):
                assert [fresh.raw(i) for i in range(len(fresh))] == want
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=read) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors


def test_a_trace_on_a_file_store_pickles_without_its_fd(tmp_path: Path) -> None:
    trace = load(SAMPLES[0], sidecar=False)
    copy = pickle.loads(pickle.dumps(trace))
    assert copy.step(len(copy) - 1) == trace.step(len(trace) - 1)


def test_a_truncated_or_replaced_file_is_reported_not_misread(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    shutil.copy(SAMPLES[0], path)
    trace = load(path, sidecar=False)
    last = len(trace) - 1
    with open(path, "r+b") as f:
        f.truncate(int(trace._spans[last, 0]) + 3)
    with pytest.raises(TraceError, match=r"t\.jsonl: ends before byte \d+.*truncated or rewritten"):
        trace.step(last)

    # A loaded trace keeps the fd it was parsed from: a replaced or deleted file still
    # reads as it was (as when a trace's bytes were held in memory).
    shutil.copy(SAMPLES[0], path)
    trace = load(path, sidecar=False)
    copy = pickle.loads(pickle.dumps(trace))  # no fd: opens the path when first read
    replacement = tmp_path / "new.jsonl"
    shutil.copy(SAMPLES[1], replacement)
    os.replace(replacement, path)
    assert trace.steps() == in_memory(SAMPLES[0]).steps()
    with pytest.raises(TraceError, match=r"t\.jsonl: was replaced since it was loaded"):
        copy.step(0)
    path.unlink()
    assert trace.step(len(trace) - 1) == in_memory(SAMPLES[0]).step(len(trace) - 1)
    with pytest.raises(TraceError, match=r"t\.jsonl: cannot read step detail: No such file"):
        pickle.loads(pickle.dumps(trace)).step(0)


def test_a_file_rewritten_in_place_fails_naming_the_row(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    shutil.copy(SAMPLES[0], path)
    trace = load(path, sidecar=False)
    start, end = trace._spans[1].tolist()
    with open(path, "r+b") as f:
        f.seek(start)
        f.write(b"#" * (end - start))
    with pytest.raises(
        TraceError, match=r"t\.jsonl: step row 1 \(bytes \d+\.\.\d+\) is no longer a JSON record"
    ):
        trace.step(1)
    assert trace.step(0) == in_memory(SAMPLES[0]).step(0)


def _complete_steps(data: bytes) -> int:
    return sum(1 for line in data.split(b"\n")[:-1] if line.startswith(b'{"kind":"step"'))


def test_truncated_last_gzip_member_loads_every_complete_step(tmp_path: Path) -> None:
    src = SAMPLES[-1]
    many = members_gz(src, tmp_path / "many.jsonl.gz", member_bytes=2048)
    data = many.read_bytes()
    coff, clen = gzip_members(data)[-2]
    for cut in (coff + clen // 2, coff + 12, len(data) - 3):
        torn = tmp_path / f"torn_{cut}.jsonl.gz"
        torn.write_bytes(data[:cut])
        prefix = _inflate_all(data[:cut])
        trace = load(torn)
        assert len(trace) == _complete_steps(prefix) > 0, cut
        assert isinstance(trace.store, GzipMemberStore)
        reference = in_memory(src)
        assert [trace.step(i) for i in range(len(trace))] == [reference.step(i) for i in range(len(trace))]
        assert trace.torn is not None or any("cut short" in p.message for p in trace.problems)


def _inflate_all(data: bytes) -> bytes:
    out = b""
    while data:
        d = zlib.decompressobj(wbits=31)
        out += d.decompress(data) + (b"" if d.eof else d.flush())
        if not d.eof:
            break
        data = d.unused_data
    return out


def test_corrupt_member_keeps_the_steps_before_it(tmp_path: Path) -> None:
    src = SAMPLES[-1]
    many = members_gz(src, tmp_path / "many.jsonl.gz", member_bytes=2048)
    data = bytearray(many.read_bytes())
    spans = gzip_members(bytes(data))
    k = len(spans) // 2
    coff, clen = spans[k]
    data[coff + clen // 2 : coff + clen // 2 + 8] = b"\xff" * 8
    bad = tmp_path / "bad.jsonl.gz"
    bad.write_bytes(bytes(data))
    trace = load(bad)
    good = _inflate_all(bytes(data[:coff]))
    assert len(trace) >= _complete_steps(good) > 0
    assert any("gzip data corrupt" in p.message for p in trace.problems), trace.problems
    reference = in_memory(src)
    assert [trace.step(i) for i in range(len(trace))] == [reference.step(i) for i in range(len(trace))]


def test_member_index_past_the_end_fails_naming_file_and_field(tmp_path: Path) -> None:
    many = members_gz(SAMPLES[-1], tmp_path / "many.jsonl.gz", member_bytes=2048)
    trace = load(many)
    members = trace.store.members.copy()  # type: ignore[attr-defined]
    members["coff"][-1] = many.stat().st_size + 100
    broken = GzipMemberStore(many, members)
    start, end = members["ustart"][-1], members["ustart"][-1] + 10
    with pytest.raises(TraceError, match=r"many\.jsonl\.gz: field 'member': gzip member \d+ .*past the end"):
        broken.read(int(start), int(end))
    with pytest.raises(TraceError, match=r"field 'member': bytes .* past the last member"):
        GzipMemberStore(many, members[:1]).read(0, int(members["ustart"][-1]) + 5)


def test_open_builder_on_a_growing_plain_file_holds_only_the_tail(tmp_path: Path) -> None:
    src = SAMPLES[-1].read_bytes()
    path = tmp_path / "growing.jsonl"
    path.write_bytes(b"")
    builder = open_builder(path)
    assert isinstance(builder.store, FileStore)
    longest = max(map(len, src.split(b"\n")))
    fed = 0
    for at in range(0, len(src), 777):  # the file grows; the follower reads what is new
        with open(path, "ab") as f:
            f.write(src[at : at + 777])
        with open(path, "rb") as f:
            f.seek(fed)
            chunk = f.read()
        fed += len(chunk)
        builder.feed(chunk)
        assert len(builder._buf) <= longest + 777, "the builder kept more than the unparsed tail"
        if builder.header is not None and builder.steps_parsed:
            snapshot = builder.build()
            assert snapshot.step(len(snapshot) - 1) == in_memory(SAMPLES[-1]).step(len(snapshot) - 1)
    trace = builder.build(builder.finish())
    assert_same_steps(in_memory(SAMPLES[-1]), trace)
    assert open_builder(tmp_path / "x.jsonl.gz").store is None  # compressed: fed decompressed, kept


def test_torn_plain_file_loads_every_complete_step(tmp_path: Path) -> None:
    src = SAMPLES[-1].read_bytes()
    lines = src.split(b"\n")
    cut = len(src) - len(lines[-2]) // 2 - 1  # halfway into the last record
    path = tmp_path / "torn.jsonl"
    path.write_bytes(src[:cut])
    trace = load(path, sidecar=False)
    assert trace.torn is not None and trace.torn.offset == len(src) - len(lines[-2]) - 1
    assert len(trace) == _complete_steps(src[:cut])
    assert trace.step(len(trace) - 1) == in_memory(SAMPLES[-1]).step(len(trace) - 1)
