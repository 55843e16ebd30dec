"""The tracer never hurts the scheduler it observes (issue: fail-safe tracer).

Each fault runs the real vLLM Scheduler traced and untraced: the SchedulerOutputs
must be identical, drops must be counted (footer and log), and no schedule()
call may be held up by the tracer beyond a small bound.
"""

from __future__ import annotations

import errno
import io
import logging
import socket
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from tracer.trace.reader import load
from tracer.whatif.offline import build_scheduler, run_workload
from tracer.whatif.scenarios import SCENARIOS, mixed_accept

pytestmark = pytest.mark.vllm
# Generous: a blocked tracer would stall for seconds; a healthy step takes < 5 ms.
STEP_BOUND_S = 0.1


def run(cls: type, scenario: str = "ngram_preempt") -> tuple[Any, list[Any], list[float]]:
    spec, requests = SCENARIOS[scenario]
    sched = build_scheduler(spec, cls)
    times: list[float] = []

    def timed(s: Any) -> Any:
        start = time.perf_counter()
        out = s.schedule()
        times.append(time.perf_counter() - start)
        return out

    steps = run_workload(sched, requests, accept=mixed_accept, schedule=timed)
    return sched, [out for out, _ in steps], times


def stock_outputs(monkeypatch: pytest.MonkeyPatch, scenario: str = "ngram_preempt") -> list[Any]:
    from vllm.v1.core.sched.scheduler import Scheduler

    with monkeypatch.context() as m:
        m.delenv("SCHEDSCOPE_TRACE", raising=False)
        m.delenv("SCHEDSCOPE_STREAM", raising=False)
        sched, outs, _ = run(Scheduler, scenario)
        sched.shutdown()
    return outs


class FullDisk(io.RawIOBase):
    """A trace file on a disk that fills up after `room` bytes."""

    def __init__(self, room: int) -> None:
        self.room = room
        self.written = 0

    def writable(self) -> bool:
        return True

    def write(self, data: Any) -> int:
        if self.written + len(data) > self.room:
            raise OSError(errno.ENOSPC, "No space left on device")
        self.written += len(data)
        return len(data)


class StuckDisk(io.RawIOBase):
    """A trace file whose writes hang until released (a stuck NFS mount)."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.data = bytearray()

    def writable(self) -> bool:
        return True

    def write(self, data: Any) -> int:
        self.release.wait()
        self.data += data
        return len(data)

    def close(self) -> None:
        pass


def test_disk_full(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    from tracer.record import wiring
    from tracer.scheduler import TracingScheduler

    disk = FullDisk(room=3000)
    monkeypatch.setattr(wiring, "open_sink", lambda path: disk)
    monkeypatch.setenv("SCHEDSCOPE_TRACE", str(tmp_path / "t.jsonl"))
    monkeypatch.setenv("SCHEDSCOPE_WRITER", "thread")  # the writer thread's own faults
    with caplog.at_level(logging.WARNING, logger="schedscope"):
        sched, traced, times = run(TracingScheduler)
        sched.shutdown()
    assert traced == stock_outputs(monkeypatch)
    writer = sched._schedscope.writer
    assert writer.failed is not None and "No space left" in writer.failed
    assert writer.dropped > 0 and writer.records_written > 0
    assert any("trace writing stopped" in r.getMessage() for r in caplog.records)
    assert any(f"{writer.dropped} trace records dropped" in r.getMessage() for r in caplog.records)
    assert max(times) < STEP_BOUND_S


def test_blocked_writer(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    from tracer.record import wiring
    from tracer.scheduler import TracingScheduler

    disk = StuckDisk()
    monkeypatch.setattr(wiring, "open_sink", lambda path: disk)
    monkeypatch.setenv("SCHEDSCOPE_TRACE", str(tmp_path / "t.jsonl"))
    monkeypatch.setenv("SCHEDSCOPE_WRITER", "thread")  # the writer thread's own faults
    monkeypatch.setenv("SCHEDSCOPE_QUEUE", "8")
    with caplog.at_level(logging.WARNING, logger="schedscope"):
        sched, traced, times = run(TracingScheduler)
        assert max(times) < STEP_BOUND_S  # measured while the writer is stuck
        disk.release.set()
        sched.shutdown()
    assert traced == stock_outputs(monkeypatch)
    path = tmp_path / "stuck.jsonl"
    path.write_bytes(bytes(disk.data))
    trace = load(path)
    assert trace.footer is not None and trace.footer["records_dropped"] > 0
    assert trace.footer["steps_written"] + trace.footer["records_dropped"] >= len(traced)
    assert any("dropping records" in r.getMessage() for r in caplog.records)


def test_viewers_that_die_or_never_read(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from tracer.scheduler import TracingScheduler

    monkeypatch.setenv("SCHEDSCOPE_TRACE", str(tmp_path / "t.jsonl"))
    monkeypatch.setenv("SCHEDSCOPE_WRITER", "thread")  # the writer thread's own faults
    monkeypatch.setenv("SCHEDSCOPE_STREAM", "127.0.0.1:0")
    spec, requests = SCENARIOS["ngram_preempt"]
    sched = build_scheduler(spec, TracingScheduler)
    server = sched._schedscope_stream
    host, port = server.address[:2]
    never_reads = socket.create_connection((host, port))
    never_reads.sendall(b"GET /trace HTTP/1.1\r\nHost: x\r\n\r\n")
    killed = socket.create_connection((host, port))
    killed.sendall(b"GET /trace HTTP/1.1\r\nHost: x\r\n\r\n")
    while server.hub.viewers < 2:
        time.sleep(0.01)
    times: list[float] = []

    def timed(s: Any) -> Any:
        if len(times) == 3:
            killed.close()  # dies mid-stream
        start = time.perf_counter()
        out = s.schedule()
        times.append(time.perf_counter() - start)
        return out

    traced = [out for out, _ in run_workload(sched, requests, accept=mixed_accept, schedule=timed)]
    sched.shutdown()
    server.close()
    never_reads.close()
    assert traced == stock_outputs(monkeypatch)
    assert max(times) < STEP_BOUND_S
    trace = load(tmp_path / "t.jsonl")
    assert trace.footer["records_dropped"] == 0 and len(trace) == len(traced)
