from __future__ import annotations

import time
from pathlib import Path

import pytest

from tracer.reader import Trace
from web.follow import FileFollower

from .helpers import lines


class Sink:
    def __init__(self) -> None:
        self.traces: list[tuple[int, int]] = []

    def __call__(self, trace: Trace, version: int) -> None:
        self.traces.append((len(trace), version))


def test_follows_a_growing_file_step_by_step(tmp_path: Path) -> None:
    src = lines()
    path = tmp_path / "live.jsonl"
    sink = Sink()
    f = FileFollower(path, sink)
    assert not f.poll() and "waiting" in f.status
    path.write_bytes(src[0])
    assert f.poll() and sink.traces[-1] == (0, 1)  # header only: an empty trace to show
    with path.open("ab") as out:
        out.write(src[1] + src[2][:50])  # a step and a half: the torn half waits
    assert f.poll() and sink.traces[-1] == (1, 2)
    with path.open("ab") as out:
        out.write(src[2][50:])
    assert f.poll() and sink.traces[-1] == (2, 3)
    assert not f.poll()  # nothing new, nothing published
    path.write_bytes(src[0] + src[1])  # rewritten shorter: start over
    assert f.poll() and sink.traces[-1] == (1, 4)


def test_the_thread_publishes_within_a_second(tmp_path: Path) -> None:
    src = lines()
    path = tmp_path / "live.jsonl"
    path.write_bytes(src[0] + src[1])
    sink = Sink()
    f = FileFollower(path, sink, interval=0.05).start()
    try:
        with path.open("ab") as out:
            out.write(src[2] + src[3])
        deadline = time.monotonic() + 1.0
        while time.monotonic() < deadline and (not sink.traces or sink.traces[-1][0] < 3):
            time.sleep(0.02)
        assert sink.traces[-1][0] == 3
    finally:
        f.stop()


def test_a_bad_header_is_reported_not_raised(tmp_path: Path) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_bytes(b'{"kind":"step","step":1}\n')
    sink = Sink()
    f = FileFollower(path, sink)
    assert not f.poll() and "cannot follow" in f.status
    assert not f.poll()  # the same bad file is not read again
    path.write_bytes(b"".join(lines()[:2]))  # rewritten as a trace: it is followed
    assert f.poll() and sink.traces[-1] == (1, 1)


def test_compressed_files_cannot_be_followed(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"plain \.jsonl"):
        FileFollower(tmp_path / "x.jsonl.gz", Sink()).start()
