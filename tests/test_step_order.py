"""A trace that adds up, or says where it does not: step numbers increase and nothing steps
after the footer, on every path that reads steps (load's whole-file, 4 MiB window, gzip and
pipe paths, TraceBuilder as the source feeds it, uploads, the sidecar), while a stream copy's
`gap` records are declared holes. The malformed traces are made from bench/gen_trace.py's."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import pytest

from tests.conftest import ROOT
from tests.stream_support import records, wait_for
from tracer.doctor import record_verdicts
from tracer.live.stream import StreamHub, StreamServer
from tracer.render.summary import summary_lines
from tracer.render.text import footer_mismatch
from tracer.trace import index_files, reader, sidecar, sidecar_restore
from tracer.trace.builder import TraceBuilder
from tracer.trace.errors import TraceError, TraceOrderError
from tracer.trace.ingest import load_bytes
from tracer.trace.reader import load, open_builder
from tracer.trace.source import TraceSource
from tracer.trace.trace_type import FooterCount, Trace

WHY = "(two writers on one file, or a joined copy?)"


@pytest.fixture(scope="module")
def good(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """12 steps as the recorder writes them: a runner record before each step, then the footer."""
    out = tmp_path_factory.mktemp("gen") / "good.jsonl"
    args = ["--steps", "12", "--seed", "3", "--arrival-rate", "0.8", "--max-running", "4"]
    subprocess.run([sys.executable, str(ROOT / "bench" / "gen_trace.py"), str(out), *args], check=True)
    return out


def _lines(path: Path) -> tuple[list[bytes], list[int]]:
    lines = path.read_bytes().splitlines(keepends=True)
    return lines, [i for i, line in enumerate(lines) if orjson.loads(line)["kind"] == "step"]


def malformed(good: Path, kind: str) -> tuple[list[bytes], int, str]:
    """(the file's lines, the 1-based line of the offending record, the error's message)."""
    lines, steps = _lines(good)
    assert len(steps) == 12 and orjson.loads(lines[-1])["kind"] == "footer"
    if kind == "repeat":  # 1 2 3 4 4 5 …: step 4's record again right after it
        at = steps[3] + 1
        lines.insert(at, lines[steps[3]])
        return lines, at + 1, f"step 4 repeated: step numbers must increase {WHY}"
    if kind == "back":  # step 2 again after step 4
        at = steps[3] + 1
        lines.insert(at, lines[steps[1]])
        return lines, at + 1, f"step 2 after step 4: step numbers must increase {WHY}"
    assert kind == "after-footer"  # a 13th step appended after the footer
    extra = orjson.loads(lines[steps[-1]])
    lines.append(orjson.dumps({**extra, "step": 13}) + b"\n")
    message = f"step 13 after the footer (line {len(lines) - 1}), which ended the recording {WHY}"
    return lines, len(lines), message


KINDS = ("repeat", "back", "after-footer")


def _same_columns(a: Trace, b: Trace) -> None:
    for name in a.columns:
        assert np.array_equal(a.columns[name], b.columns[name]), name
    for name in a.runner:  # only the step record is repeated: its runner records are not
        assert np.array_equal(a.runner[name], b.runner[name]), name


def _check_refused(trace_or_error: Any, path: str, line: int, message: str) -> None:
    error = trace_or_error
    assert isinstance(error, TraceOrderError), error
    assert (error.path, error.line, error.field) == (path, line, "step")
    assert str(error) == f"{path}:{line}: field 'step': {message}"


@pytest.mark.parametrize("kind", KINDS)
def test_each_malformed_trace_is_refused_strictly_and_skipped_leniently(
    good: Path, tmp_path: Path, kind: str
) -> None:
    lines, line, message = malformed(good, kind)
    path = tmp_path / f"{kind}.jsonl"
    path.write_bytes(b"".join(lines))
    with pytest.raises(TraceOrderError) as err:
        load(path)
    _check_refused(err.value, str(path), line, message)
    assert err.value.step == (4 if kind == "repeat" else 2 if kind == "back" else 13)
    assert err.value.after == (None if kind == "after-footer" else 4)
    lenient = load(path, strict=False)
    assert len(lenient) == 12 and [str(p) for p in lenient.problems] == [str(err.value)]
    assert list(lenient.columns["step"]) == list(range(1, 13))
    _same_columns(lenient, load(good))
    assert (
        footer_mismatch(lenient.footer_count()) is None
    )  # what was left out is listed, and the rest adds up


@pytest.mark.parametrize("kind", KINDS)
def test_every_read_path_applies_the_same_rule(
    good: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, kind: str
) -> None:
    from tracer.record.writer import GzipMemberSink

    lines, line, message = malformed(good, kind)
    data = b"".join(lines)
    plain = tmp_path / "t.jsonl"
    plain.write_bytes(data)
    gz = tmp_path / "t.jsonl.gz"  # the recorder's multi-member gzip: parsed member by member
    with open(gz, "wb", buffering=0) as raw:
        sink = GzipMemberSink(raw, member_bytes=900)
        for piece in lines:
            sink.write(piece)
        sink.close()

    def in_memory(name: str, chunk: int) -> TraceBuilder:  # a stream or a follower, fed piecemeal
        builder = TraceBuilder(name)
        for at in range(0, len(data), chunk):
            builder.feed(data[at : at + chunk])
        builder.finish()
        return builder

    def followed(chunk: int) -> TraceBuilder:  # a plain file's follower: only columns held
        builder = open_builder(plain)
        for at in range(0, len(data), chunk):
            builder.feed(data[at : at + chunk])
        builder.finish()
        return builder

    def piped() -> Trace:
        fifo = tmp_path / "fifo"
        os.mkfifo(fifo)
        feeder = threading.Thread(target=lambda: fifo.write_bytes(data))
        feeder.start()
        try:
            return load(fifo)
        finally:
            feeder.join()

    attempts: list[tuple[str, Any]] = [
        (str(plain), lambda: load(plain)),
        (str(gz), lambda: load(gz)),
        ("upload", lambda: load_bytes(data, "upload")),
        ("fed", lambda: in_memory("fed", len(data))),
        ("fed", lambda: in_memory("fed", 97)),  # the offending line cut across feeds
        (str(plain), lambda: followed(211)),
        (str(tmp_path / "fifo"), piped),
    ]
    for window in (64, 333, 1 << 22):  # the 4 MiB window path, the record cut at a window's end
        monkeypatch.setattr(reader, "_WINDOW", window)
        attempts.append((str(plain), lambda: load(plain)))
    for name, attempt in attempts:
        with pytest.raises(TraceOrderError) as err:
            attempt()
        _check_refused(err.value, name, line, message)


def test_the_fast_path_and_the_general_path_refuse_alike(good: Path) -> None:
    """A step the fast path could take but for its order is judged by the general path."""
    lines, steps = _lines(good)
    slow = orjson.loads(lines[steps[3]])
    del slow["kv_usage"]  # a key the fast path needs: this record goes the general path
    for repeat in (lines[steps[3]], orjson.dumps(slow) + b"\n"):
        data = b"".join([*lines[: steps[3] + 1], repeat, *lines[steps[3] + 1 :]])
        with pytest.raises(TraceOrderError, match="step 4 repeated"):
            TraceBuilder("t").feed(data)


def test_a_second_footer_is_refused(good: Path, tmp_path: Path) -> None:
    lines, _ = _lines(good)
    path = tmp_path / "two.jsonl"
    path.write_bytes(b"".join([*lines, lines[-1]]))
    with pytest.raises(TraceError) as err:
        load(path)
    assert str(err.value) == (
        f"{path}:{len(lines) + 1}: field 'kind': a second footer, after the one (line {len(lines)}) "
        "that ended the recording: two runs in one file?"
    )
    assert len(load(path, strict=False)) == 12


# -- the sidecar ---------------------------------------------------------------------------------
@pytest.fixture
def sidecars(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sidecar, "MIN_SOURCE_BYTES", 0)  # the generated traces are small
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))


def _sidecar_of(path: Path) -> Path:
    return path.with_name(path.name + index_files.SUFFIX)


def _checks(path: Path) -> int:
    meta, _ = sidecar._read_one(_sidecar_of(path), sidecar_restore.SIDECAR_ARRAYS)
    return int(meta["checks"])


@pytest.mark.usefixtures("sidecars")
@pytest.mark.parametrize("kind", KINDS)
def test_a_lenient_sidecar_does_not_hide_the_error_from_a_strict_load(
    good: Path, tmp_path: Path, kind: str
) -> None:
    lines, line, message = malformed(good, kind)
    path = tmp_path / "t.jsonl"
    path.write_bytes(b"".join(lines))
    assert len(load(path, strict=False)) == 12 and _sidecar_of(path).exists()
    again = reader.reopen(path, strict=False)  # the lenient findings come back with it
    assert again is not None and len(again) == 12 and len(again.problems) == 1
    assert reader.reopen(path) is None  # a strict open parses, and raises
    with pytest.raises(TraceOrderError) as err:
        load(path)
    _check_refused(err.value, str(path), line, message)


@pytest.mark.usefixtures("sidecars")
@pytest.mark.parametrize("kind", KINDS)
def test_a_sidecar_made_before_the_rule_is_not_trusted(
    good: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, kind: str
) -> None:
    """A sidecar an older reader left (no order rule, so the repeat counted as a step) is
    refused for the checks it lacks, and one whose stored steps do not increase for that."""
    lines, line, message = malformed(good, kind)
    path = tmp_path / "t.jsonl"
    path.write_bytes(b"".join(lines))
    with monkeypatch.context() as old:  # the fast path sends the offending steps to the general one
        old.setattr(TraceBuilder, "_check_order", lambda self, step, line: None)
        old.setattr(sidecar_restore, "SIDECAR_CHECKS", 1)
        assert len(load(path)) == 13 and _checks(path) == 1  # as the old reader had it
    with pytest.raises(TraceOrderError) as err:
        load(path)
    _check_refused(err.value, str(path), line, message)
    if kind == "after-footer":
        return
    with monkeypatch.context() as unchecked:  # the checks marker right, the rows not
        unchecked.setattr(TraceBuilder, "_check_order", lambda self, step, line: None)
        assert len(load(path)) == 13 and _checks(path) == sidecar_restore.SIDECAR_CHECKS
    assert reader.reopen(path) is None
    with pytest.raises(TraceOrderError):
        load(path)


@pytest.mark.usefixtures("sidecars")
def test_a_step_appended_to_a_file_with_a_sidecar_is_refused(good: Path, tmp_path: Path) -> None:
    """The grown-file path resumes from the sidecar: it knows the footer, and the last step."""
    lines, line, message = malformed(good, "after-footer")
    path = tmp_path / "t.jsonl"
    path.write_bytes(b"".join(lines[:-1]))
    assert len(load(path)) == 12 and _sidecar_of(path).exists()
    with path.open("ab") as f:
        f.write(lines[-1])
    with pytest.raises(TraceOrderError) as err:
        load(path)
    _check_refused(err.value, str(path), line, message)
    step_12 = lines[_lines(good)[1][-1]]
    path.write_bytes(b"".join(lines[:-2]))  # no footer yet: a step not above the last one
    assert len(load(path)) == 12
    with path.open("ab") as f:
        f.write(step_12)
    with pytest.raises(TraceOrderError, match="step 12 repeated"):
        load(path)


# -- the viewers' source ---------------------------------------------------------------------------
def test_a_source_refuses_strictly_and_skips_leniently(good: Path, tmp_path: Path) -> None:
    lines, line, message = malformed(good, "repeat")
    path = tmp_path / "t.jsonl"
    path.write_bytes(b"".join(lines))
    errors: list[TraceError] = []
    strict = TraceSource.file(path)
    strict.bind(on_error=errors.append)
    assert strict.start().join(10)
    assert len(errors) == 1
    _check_refused(errors[0], str(path), line, message)
    lenient = TraceSource.file(path, strict=False)
    assert lenient.start().join(10)
    assert lenient.trace is not None and len(lenient.trace) == 12 and len(lenient.trace.problems) == 1


def test_a_followed_file_refuses_a_repeat_appended_to_it(good: Path, tmp_path: Path) -> None:
    lines, line, message = malformed(good, "repeat")
    path = tmp_path / "live.jsonl"
    path.write_bytes(b"".join(lines[: line - 1]))
    errors: list[TraceError] = []
    steps: list[int] = []
    source = TraceSource.follow(path, poll=0.01, interval=0.01)
    source.bind(on_error=errors.append, on_update=lambda trace, version: steps.append(len(trace)))
    source.start()
    try:
        wait_for(lambda: steps and steps[-1] == 4)
        with path.open("ab") as f:
            f.write(b"".join(lines[line - 1 :]))
        wait_for(lambda: errors)
        _check_refused(errors[0], str(path), line, message)
    finally:
        source.close()


# -- a stream copy's gaps ----------------------------------------------------------------------------
def test_a_stream_copy_with_a_gap_loads_and_its_footer_is_explained(good: Path, tmp_path: Path) -> None:
    """Cut off for falling behind: the saved copy declares the hole as a `gap` record. It
    loads strictly, and summary and doctor say why the footer counts more steps."""
    lines, steps = _lines(good)
    hub = StreamHub(backlog=6, viewer_queue=8)
    hub.publish(records(lines[: steps[1] + 1]))
    server = StreamServer(hub, "127.0.0.1", 0, heartbeat=0.1)
    save = tmp_path / "copy.jsonl"
    source = TraceSource.stream(server.url, save=save, interval=0.02, backoff=(0.01, 0.05), timeout=0.4)
    seen: list[Trace] = []
    source.bind(on_update=lambda trace, version: seen.append(trace))
    source.start()
    try:
        wait_for(lambda: seen and len(seen[-1]) == 2)
        hub.publish(records(lines[steps[1] + 1 :]))  # ten steps and the footer at once: cut off
        wait_for(lambda: seen[-1].footer is not None)
    finally:
        source.close()
        server.close()
    copy = load(save)
    assert copy.gaps and copy.problems == []
    kept = copy.columns["step"].tolist()
    assert kept[:2] == [1, 2] and kept[-1] == 12 and len(kept) < 12
    missing = 12 - len(kept)
    mismatch = f"the footer counts 12 steps written, {len(kept)} were read"
    mismatch += f" ({missing} in the live stream's gaps)"
    assert footer_mismatch(copy.footer_count()) == mismatch
    assert f"differs  {mismatch}" in list(summary_lines(copy))
    assert mismatch in record_verdicts(copy)[0].sentence


def test_gap_records_in_a_file_are_holes_not_repeats(good: Path, tmp_path: Path) -> None:
    lines, steps = _lines(good)
    gap = orjson.dumps({"kind": "gap", "after": 4, "before": 8, "reason": "not received"}) + b"\n"
    kept = [*lines[: steps[3] + 1], gap, *lines[steps[7] - 1 :]]  # steps 5..7 (and their runner records) gone
    path = tmp_path / "copy.jsonl"
    path.write_bytes(b"".join(kept))
    trace = load(path)
    assert trace.columns["step"].tolist() == [1, 2, 3, 4, 8, 9, 10, 11, 12] and trace.gaps == [(4, 8)]
    mismatch = "the footer counts 12 steps written, 9 were read (3 in the live stream's gaps)"
    # The trace states the counts; render words them.
    assert trace.footer_count() == FooterCount(
        written=12, read=9, in_gaps=3, dropped=0, out_of_order=0, malformed=0
    )
    assert footer_mismatch(trace.footer_count()) == mismatch
    # A gap does not make room for a repeat: the step after it must still exceed the last.
    path.write_bytes(b"".join([*lines[: steps[3] + 1], gap, lines[steps[3]], *lines[steps[3] + 1 :]]))
    with pytest.raises(TraceOrderError, match="step 4 repeated"):
        load(path)


# -- summary and doctor --------------------------------------------------------------------------------
def _schedscope(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run(
        [sys.executable, "-m", "tracer.cli", *args], capture_output=True, text=True, env=env, cwd=ROOT
    )


def test_summary_and_doctor_say_when_the_footer_differs(good: Path, tmp_path: Path) -> None:
    lines, steps = _lines(good)
    lost = tmp_path / "lost.jsonl"  # step 5's record missing: 11 read, the footer says 12
    lost.write_bytes(b"".join(line for i, line in enumerate(lines) if i != steps[4]))
    trace = load(lost)
    mismatch = "the footer counts 12 steps written, 11 were read"
    assert footer_mismatch(trace.footer_count()) == mismatch
    assert f"differs  {mismatch}" in list(summary_lines(trace))
    verdict = record_verdicts(trace)[0]
    assert verdict.status == "FAIL" and mismatch in verdict.sentence
    torn = tmp_path / "torn.jsonl"  # no footer: as before, no count to compare with
    torn.write_bytes(b"".join(lines[:-1]) + lines[-1][:20])
    trace = load(torn)
    assert trace.footer is None and footer_mismatch(trace.footer_count()) is None
    assert not any(line.startswith("differs") for line in summary_lines(trace))
    assert len(load(good)) == 12 and footer_mismatch(load(good).footer_count()) is None


def test_the_cli_refuses_and_lenient_lists_what_it_left_out(good: Path, tmp_path: Path) -> None:
    lines, line, message = malformed(good, "back")
    path = tmp_path / "back.jsonl"
    path.write_bytes(b"".join(lines))
    for command in ("summary", "flags"):
        strict = _schedscope(command, str(path))
        assert strict.returncode == 2
        assert strict.stderr.strip() == (
            f"schedscope: error: {path}:{line}: field 'step': {message} (--lenient skips out-of-order steps)"
        )
    lenient = _schedscope("summary", "--lenient", str(path))
    assert lenient.returncode == 0, lenient.stderr
    out = lenient.stdout.splitlines()
    assert "steps    12 (footer: 12 steps written, 0 records dropped)" in out
    assert f"skipped  {path}:{line}: field 'step': {message}" in out
