"""The reader's contract: torn files, garbage lines, versions, compression, defaults."""

from __future__ import annotations

import gzip
import zlib
from pathlib import Path
from typing import Any

import orjson
import pytest

from tracer.trace.builder import TraceBuilder
from tracer.trace.errors import TraceError, TraceVersionError
from tracer.trace.reader import load


def header(**over: Any) -> dict[str, Any]:
    rec = {
        "kind": "header",
        "schema": "1.0",
        "config": {"max_num_batched_tokens": 16, "max_num_scheduled_tokens": 16, "draft_slots": 3},
    }
    rec.update(over)
    return rec


def step(i: int, used: int = 10, reserved: int = 3, **over: Any) -> dict[str, Any]:
    rec = {
        "kind": "step",
        "step": i,
        "t": float(i),
        "target": {"cap": 16, "used": used, "left": 16 - used},
        "input": {"cap": 16, "used": used + reserved, "reserved": reserved, "left": 16 - used - reserved},
        "new": [[f"r{i}", used, 0, 40]],
    }
    rec.update(over)
    return rec


def write(path: Path, records: list[Any], tail: bytes = b"") -> Path:
    lines = [r if isinstance(r, bytes) else orjson.dumps(r) for r in records]
    path.write_bytes(b"".join(line + b"\n" for line in lines) + tail)
    return path


def test_round_trip_columns_and_detail(tmp_path: Path) -> None:
    path = write(
        tmp_path / "t.jsonl",
        [
            header(),
            step(1),
            {"kind": "runner", "step": 1, "pass": "target", "rows": 10, "cap": 16},
            step(2, used=13),
            {"kind": "footer", "steps_written": 2, "records_dropped": 0},
        ],
    )
    trace = load(path)
    assert len(trace) == 2 and trace.torn is None and trace.problems == []
    assert list(trace.columns["target_used"]) == [10, 13]
    assert list(trace.columns["input_reserved"]) == [3, 3]
    assert list(trace.runner["target_rows"]) == [10, -1]
    assert trace.footer == {
        "kind": "footer",
        "steps_written": 2,
        "records_dropped": 0,
        "errors": 0,
        "end_time": None,
    }
    detail = trace.step(1)
    assert detail["new"] == [["r2", 13, 0, 40]]
    assert detail["preempted"] == [] and detail["sampled"] is None  # defaults filled


def test_torn_last_line_keeps_every_complete_step(tmp_path: Path) -> None:
    full = write(tmp_path / "full.jsonl", [header(), step(1), step(2), step(3)]).read_bytes()
    third = full.index(b'{"kind":"step","step":3')
    torn_path = tmp_path / "torn.jsonl"
    torn_path.write_bytes(full[: third + 25])
    trace = load(torn_path)
    assert len(trace) == 2
    assert trace.torn is not None
    assert (trace.torn.line, trace.torn.offset, trace.torn.length) == (4, third, 25)
    assert "torn at line 4" in trace.torn.describe()


def test_truncation_at_every_offset_loads_or_fails_cleanly(tmp_path: Path) -> None:
    full = write(tmp_path / "full.jsonl", [header(), step(1), step(2)]).read_bytes()
    header_end = full.index(b"\n") + 1
    step_ends = [i + 1 for i, b in enumerate(full) if b == ord("\n")][1:]
    cut = tmp_path / "cut.jsonl"
    for n in range(len(full) + 1):
        cut.write_bytes(full[:n])
        if n < header_end - 1:
            with pytest.raises(TraceError, match="no complete header record"):
                load(cut)
            continue
        trace = load(cut)
        complete = sum(1 for end in step_ends if end - 1 <= n)  # a line missing only "\n" is whole
        assert len(trace) == complete, n
        assert (trace.torn is None) == (
            n in (header_end - 1, header_end, *step_ends, *(e - 1 for e in step_ends))
        )


def test_garbage_line_names_file_line_and_is_fatal_by_default(tmp_path: Path) -> None:
    path = write(tmp_path / "g.jsonl", [header(), step(1), b"\x00garbage{", step(2)])
    with pytest.raises(TraceError) as err:
        load(path)
    assert err.value.line == 3 and err.value.path == str(path)
    assert str(err.value).startswith(f"{path}:3: not a JSON record")
    lenient = load(path, strict=False)
    assert len(lenient) == 2 and len(lenient.problems) == 1 and lenient.problems[0].line == 3


def test_malformed_field_is_named(tmp_path: Path) -> None:
    bad = step(2)
    bad["input"]["used"] = "lots"
    path = write(tmp_path / "f.jsonl", [header(), step(1), bad])
    with pytest.raises(TraceError) as err:
        load(path)
    assert (err.value.line, err.value.field) == (3, "input.used")
    assert str(err.value) == f"{path}:3: field 'input.used': expected an integer, got 'lots'"
    missing = step(3)
    del missing["target"]
    path = write(tmp_path / "m.jsonl", [header(), missing])
    with pytest.raises(TraceError, match=r":2: field 'target': missing"):
        load(path)


def test_newer_major_version_is_refused(tmp_path: Path) -> None:
    path = write(tmp_path / "v2.jsonl", [header(schema="2.0"), step(1)])
    with pytest.raises(TraceVersionError) as err:
        load(path)
    assert str(err.value) == (
        f"{path}:1: field 'schema': schema version 2.0 is newer than this schedscope reads (1.x); "
        "upgrade schedscope to read it"
    )


def test_newer_minor_and_unknown_keys_load(tmp_path: Path) -> None:
    rec = step(1, future_field={"x": 1})
    path = write(
        tmp_path / "v19.jsonl",
        [header(schema="1.9", new_header_key=1), rec, {"kind": "future_kind", "step": 1}],
    )
    trace = load(path)
    assert len(trace) == 1 and trace.step(0)["future_field"] == {"x": 1}


def test_older_trace_gets_defaults(tmp_path: Path) -> None:
    old = header()
    old["config"] = {"max_num_batched_tokens": 16}
    path = write(tmp_path / "old.jsonl", [old, step(1)])
    trace = load(path)
    assert trace.config["draft_slots"] == 0 and trace.config["scheduling_policy"] == "fcfs"
    assert trace.header["policy"] == "stock"


def test_bad_version_string_and_missing_header(tmp_path: Path) -> None:
    with pytest.raises(TraceError, match=r":1: field 'schema': schema version must be a string"):
        load(write(tmp_path / "a.jsonl", [header(schema=1)]))
    with pytest.raises(TraceError, match=r":1: field 'kind': the first record must be a header"):
        load(write(tmp_path / "b.jsonl", [step(1)]))
    empty = tmp_path / "e.jsonl"
    empty.write_bytes(b"")
    with pytest.raises(TraceError, match=r"no complete header record \(empty file\)"):
        load(empty)
    with pytest.raises(TraceError, match="no such file"):
        load(tmp_path / "missing.jsonl")


def test_non_utf8_line_is_a_clean_error(tmp_path: Path) -> None:
    path = write(tmp_path / "u.jsonl", [header(), b'{"kind":"step","step":1,"x":"\xff\xfe"}'])
    with pytest.raises(TraceError, match=r":2: not a JSON record"):
        load(path)


def test_gzip_and_truncated_gzip(tmp_path: Path) -> None:
    plain = write(tmp_path / "p.jsonl", [header(), *(step(i) for i in range(1, 200))]).read_bytes()
    gz = tmp_path / "t.jsonl.gz"
    gz.write_bytes(gzip.compress(plain))
    assert len(load(gz)) == 199
    cut = tmp_path / "cut.jsonl.gz"
    cut.write_bytes(gz.read_bytes()[: len(gz.read_bytes()) * 2 // 3])
    trace = load(cut)
    assert 0 < len(trace) < 199
    assert trace.torn is not None or trace.problems


def test_builder_feeds_incrementally(tmp_path: Path) -> None:
    data = write(tmp_path / "x.jsonl", [header(), step(1), step(2)]).read_bytes()
    builder = TraceBuilder("live")
    added = [builder.feed(data[i : i + 7]) for i in range(0, len(data), 7)]
    assert sum(added) == 2 and builder.finish() is None
    assert list(builder.build().columns["step"]) == [1, 2]


def test_a_stream_heartbeat_in_a_file_is_ignored_even_strictly(tmp_path: Path) -> None:
    """Heartbeats are stream only; one that reached a file (before the header, between steps,
    or as an unterminated last line) is skipped, never an error nor a step."""
    beat = {"kind": "heartbeat", "t": 1.7e9, "last_step": 1, "idle_since": None}
    path = write(
        tmp_path / "t.jsonl",
        [beat, header(), step(1), beat, step(2)],
        tail=orjson.dumps({**beat, "idle_since": 1.7e9}),
    )
    for strict in (True, False):
        trace = load(path, strict=strict)
        assert list(trace.columns["step"]) == [1, 2] and not trace.problems and trace.torn is None
    builder = TraceBuilder(path)
    builder.feed(path.read_bytes())
    assert builder.steps_parsed == 2 and builder.header is not None


def _in_memory(path: Path) -> Any:
    builder = TraceBuilder(path)
    builder.feed(path.read_bytes())
    return builder.build(builder.finish())


@pytest.mark.parametrize("window", [64, 333, 1 << 22])
def test_windowed_load_equals_the_whole_file_parse(tmp_path: Path, monkeypatch, window: int) -> None:  # type: ignore[no-untyped-def]
    """A plain file is parsed in windows: records cut at a window's end (and records longer
    than a window) load as they do from the whole file, and steps read back from the file."""
    import tracer.trace.reader as reader

    records = [header(), *(step(i, used=i % 16) for i in range(1, 60)), step(60, new=[["x" * 900, 3]])]
    path = write(tmp_path / "t.jsonl", [*records, {"kind": "footer"}], tail=b'{"kind":"st')
    monkeypatch.setattr(reader, "_WINDOW", window)
    seen: list[tuple[int, int]] = []
    trace = load(path, progress=lambda done, total: seen.append((done, total)))
    reference = _in_memory(path)
    assert len(trace) == len(reference) == 60 and trace.torn == reference.torn is not None
    for name, column in reference.columns.items():
        assert list(trace.columns[name]) == list(column), name
    assert trace.steps() == reference.steps() and trace.footer == reference.footer
    size = path.stat().st_size
    assert seen[-1] == (size, size) and [d for d, _ in seen] == sorted(d for d, _ in seen)


def test_truncated_multi_member_gzip_at_every_offset_loads_or_fails_cleanly(tmp_path: Path) -> None:
    from tracer.record.writer import GzipMemberSink

    plain = write(tmp_path / "p.jsonl", [header(), *(step(i) for i in range(1, 40))])
    gz = tmp_path / "m.jsonl.gz"
    with open(gz, "wb", buffering=0) as raw:
        sink = GzipMemberSink(raw, member_bytes=600)
        for line in plain.read_bytes().splitlines(keepends=True):
            sink.write(line)
        sink.close()
    data = gz.read_bytes()
    ends, rest = [], data
    while rest:
        d = zlib.decompressobj(wbits=31)
        d.decompress(rest)
        rest = d.unused_data
        ends.append(len(data) - len(rest))
    assert len(ends) > 3
    reference = _in_memory(plain)
    cut = tmp_path / "cut.jsonl.gz"
    for n in sorted({*range(0, len(data) + 1, 7), *ends}):
        cut.write_bytes(data[:n])
        try:
            trace = load(cut)
        except TraceError as exc:
            assert exc.path == str(cut) and "no complete header record" in exc.message, exc
            continue
        assert [trace.step(i) for i in range(len(trace))] == reference.steps()[: len(trace)], n
        # Cut exactly after a member, the file is a whole gzip file of fewer records.
        assert len(trace) == 39 or trace.torn is not None or trace.problems or n in ends, n


def test_a_pipe_loads_into_memory(tmp_path: Path) -> None:
    import os
    import threading

    data = write(tmp_path / "t.jsonl", [header(), step(1), step(2)]).read_bytes()
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    feeder = threading.Thread(target=lambda: fifo.write_bytes(data))
    feeder.start()
    trace = load(fifo)
    feeder.join()
    assert list(trace.columns["step"]) == [1, 2] and trace.step(1)["step"] == 2
