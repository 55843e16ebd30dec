"""The trace process (SCHEDSCOPE_WRITER=process, a server's default) on vLLM's real Scheduler:
it writes what the writer thread writes, serves the stream and /metrics, and neither its
death, nor its stall, nor EngineCore's kill costs the scheduler or the trace anything but
counted drops."""

from __future__ import annotations

import fcntl
import os
import signal
import socket
import subprocess
import sys
import textwrap
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

import orjson
import pytest
from pytest import MonkeyPatch

from tests.conftest import ROOT
from tracer.trace import schema
from tracer.trace.attach import StreamFollower
from tracer.trace.reader import load

pytestmark = pytest.mark.vllm

# Fields that differ between any two runs: clocks, the process, the tracer's own time.
VOLATILE = {"start_time", "t0", "pid", "end_time", "t", "sched_us", "hooks_s", "writer_thread_s"}
F_SETPIPE_SZ = 1031  # Linux fcntl


def comparable(path: Path) -> list[dict[str, Any]]:
    rows = [orjson.loads(line) for line in path.read_bytes().splitlines()]
    for row in rows:  # an arrival's clock too: ["a", id, prompt, max_tokens, priority, arrival, prefix]
        for entry in row.get("inputs") or ():
            if entry[0] == "a":
                entry[5] = None
    return [{k: v for k, v in row.items() if k not in VOLATILE} for row in rows]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def traced(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, writer: str, name: str, scenario: str) -> Any:
    from tracer.scheduler import TracingScheduler
    from tracer.whatif.offline import build_scheduler
    from tracer.whatif.scenarios import SCENARIOS

    monkeypatch.setenv("SCHEDSCOPE_TRACE", str(tmp_path / name))
    monkeypatch.setenv("SCHEDSCOPE_WRITER", writer)
    spec, requests = SCENARIOS[scenario]
    return build_scheduler(spec, TracingScheduler), requests


@pytest.mark.parametrize("scenario", ["ngram_preempt", "dflash_k7"])
def test_the_trace_process_writes_what_the_writer_thread_writes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, scenario: str
) -> None:
    from tracer.record.shipper import TraceShipper
    from tracer.whatif.offline import run_workload
    from tracer.whatif.scenarios import mixed_accept

    files = {}
    for writer in ("thread", "process"):
        sched, requests = traced(tmp_path, monkeypatch, writer, f"{writer}.jsonl", scenario)
        assert isinstance(sched._schedscope.writer, TraceShipper) == (writer == "process")
        run_workload(sched, requests, accept=mixed_accept)
        sched.shutdown()
        files[writer] = tmp_path / f"{writer}.jsonl"
    thread, process = comparable(files["thread"]), comparable(files["process"])
    assert len(process) == len(thread) > 5
    assert process == thread  # every step, runner and footer record, field for field
    assert process[-1]["kind"] == schema.FOOTER and process[-1]["records_dropped"] == 0
    assert not files["process"].with_name("process.jsonl" + schema.KEPT_FOOTER_SUFFIX).exists()
    assert len(load(files["process"])) == process[-1]["steps_written"]


def test_the_trace_process_serves_the_stream_and_metrics(tmp_path: Path, monkeypatch: MonkeyPatch) -> None:
    """A viewer attached to the trace process's stream gets the file's bytes; /metrics on the
    same port counts the same steps."""
    from tracer.whatif.offline import run_workload
    from tracer.whatif.scenarios import mixed_accept

    port = free_port()
    monkeypatch.setenv("SCHEDSCOPE_STREAM", f"127.0.0.1:{port}")
    sched, requests = traced(tmp_path, monkeypatch, "process", "t.jsonl", "ngram_preempt")
    assert sched._schedscope_stream is None  # it runs in the trace process, not here
    url = f"http://127.0.0.1:{port}/trace"
    deadline = time.monotonic() + 60
    while True:  # the process binds the port as it starts
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2) as resp:
                assert resp.status == 200
            break
        except OSError:
            assert time.monotonic() < deadline, "the trace process never served its port"
            time.sleep(0.1)
    received: list[bytes] = []
    attached = threading.Event()

    def view() -> None:
        for event in StreamFollower(url).events(max_reconnects=0):
            attached.set()
            if event.kind in ("run", "record"):
                received.append(event.line)
                if event.record and event.record["kind"] == "footer":
                    return

    viewer = threading.Thread(target=view, daemon=True)
    viewer.start()
    assert attached.wait(30)
    # It yields the CPU to the server: niceness NICE above EngineCore's (here, this process's).
    from tracer.live.trace_process import NICE

    child = sched._schedscope.writer.pid
    assert NICE > 0
    assert os.getpriority(os.PRIO_PROCESS, child) == min(19, os.getpriority(os.PRIO_PROCESS, 0) + NICE)
    run_workload(sched, requests, accept=mixed_accept)
    sched._schedscope.writer.force_flush()
    steps = sched._schedscope.step
    deadline = time.monotonic() + 30
    counted = None
    while time.monotonic() < deadline:  # the process counts what it has read
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as resp:
            text = resp.read().decode()
        line = next(x for x in text.splitlines() if x.startswith("schedscope_steps_total"))
        counted = float(line.split()[-1])
        if counted == steps:
            break
        time.sleep(0.2)
    assert counted == steps > 10
    sched.shutdown()
    viewer.join(60)
    assert not viewer.is_alive(), "the footer never reached the viewer"
    assert b"".join(received) == (tmp_path / "t.jsonl").read_bytes()


def _child(sched: Any) -> int:
    return sched._schedscope.writer.pid


def _until_dead(pid: int, timeout: float = 10.0) -> None:
    """Until `pid` has exited (a zombie, its pipe closed): SIGKILL is delivered asynchronously,
    and a loaded host may let the workload's frames fit in the pipe before the process is gone."""
    deadline = time.monotonic() + timeout
    stat = Path(f"/proc/{pid}/stat")
    while time.monotonic() < deadline:
        try:
            if stat.read_text().rsplit(")", 1)[1].split()[0] in "ZX":
                return
        except (FileNotFoundError, IndexError):
            return
        time.sleep(0.01)
    raise AssertionError(f"process {pid} still runs {timeout}s after SIGKILL")


def test_a_dead_trace_process_costs_the_scheduler_nothing(tmp_path: Path, monkeypatch: MonkeyPatch) -> None:
    from tracer.whatif.offline import run_workload
    from tracer.whatif.scenarios import mixed_accept

    sched, requests = traced(tmp_path, monkeypatch, "process", "t.jsonl", "ngram_preempt")
    os.kill(_child(sched), signal.SIGKILL)
    _until_dead(_child(sched))
    run_workload(sched, requests, accept=mixed_accept)  # raises nothing, schedules as ever
    writer = sched._schedscope.writer
    writer.force_flush()
    assert writer.failed is not None and "BrokenPipe" in writer.failed
    assert writer.dropped > 10  # every step after the death, counted
    sched.shutdown()
    assert sched._schedscope.errors == 0


def test_a_stalled_trace_process_never_blocks_schedule(tmp_path: Path, monkeypatch: MonkeyPatch) -> None:
    """SIGSTOP the process: the pipe fills, the queue fills, records are dropped and counted,
    and schedule() takes no longer for it. SIGCONT: the trace resumes, its footer counts them."""
    from tracer.whatif.offline import run_workload
    from tracer.whatif.scenarios import mixed_accept

    monkeypatch.setenv("SCHEDSCOPE_QUEUE", "4")
    sched, requests = traced(tmp_path, monkeypatch, "process", "t.jsonl", "ngram_preempt")
    writer = sched._schedscope.writer
    pid = _child(sched)
    os.kill(pid, signal.SIGSTOP)
    # The smallest pipe (one page), so that this small run's frames fill it behind the stall.
    fcntl.fcntl(writer._fd, F_SETPIPE_SZ, 4096)
    try:
        slowest = 0.0
        schedule = sched.schedule

        def timed(*a: Any, **kw: Any) -> Any:
            nonlocal slowest
            t0 = time.monotonic()
            try:
                return schedule(*a, **kw)
            finally:
                slowest = max(slowest, time.monotonic() - t0)

        sched.schedule = timed
        run_workload(sched, requests, accept=mixed_accept)
        assert writer.dropped > 0  # the queue filled behind the blocked shipper
        assert slowest < 2.0  # never waited for the stalled process
    finally:
        os.kill(pid, signal.SIGCONT)
    dropped = writer.dropped
    sched.shutdown()
    rows = [orjson.loads(line) for line in (tmp_path / "t.jsonl").read_bytes().splitlines()]
    assert rows[-1]["kind"] == schema.FOOTER
    assert rows[-1]["records_dropped"] == dropped > 0
    assert rows[-1]["steps_written"] == sum(row["kind"] == schema.STEP for row in rows)


KILLED = textwrap.dedent(
    """
    import os, sys, time
    from tracer.scheduler import TracingScheduler
    from tracer.whatif.offline import build_scheduler, run_workload
    from tracer.whatif.scenarios import SCENARIOS, mixed_accept

    spec, requests = SCENARIOS["ngram_preempt"]
    sched = build_scheduler(spec, TracingScheduler)
    writer = sched._schedscope.writer
    run_workload(sched, requests, accept=mixed_accept)
    writer.force_flush()  # every step is in the pipe: what the process must still write
    print(writer.pid, sched._schedscope.step, flush=True)
    time.sleep(600)  # killed here, before any footer
    """
)


def test_a_killed_engine_core_leaves_a_complete_trace(tmp_path: Path) -> None:
    """SIGKILL the process that schedules: the trace process writes every record it was sent
    and leaves the footer's facts beside the trace; the reader adopts them."""
    path = tmp_path / "t.jsonl"
    env = {**os.environ, "SCHEDSCOPE_TRACE": str(path), "SCHEDSCOPE_WRITER": "process"}
    env["PYTHONPATH"] = str(ROOT)
    proc = subprocess.Popen(
        [sys.executable, "-c", KILLED], cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline().split()
        assert line, "the scheduling process died before its steps"
        child, steps = int(line[0]), int(line[1])
        proc.kill()
        proc.wait(30)
    finally:
        if proc.poll() is None:
            proc.kill()
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:  # the trace process ends at the end of its input
        try:
            os.kill(child, 0)
        except ProcessLookupError:
            break
        time.sleep(0.1)
    else:
        pytest.fail("the trace process outlived its input by a minute")
    rows = [orjson.loads(line) for line in path.read_bytes().splitlines()]
    assert rows[-1]["kind"] != schema.FOOTER  # no footer: the engine never closed the trace
    trace = load(path)  # strict: every line whole
    assert len(trace) == steps > 10
    assert trace.footer is not None and trace.footer.get("kept") is True
    assert trace.footer["steps_written"] == steps and trace.footer["records_dropped"] == 0
