"""How long can a sick tracer hold up schedule()? Stock vs traced under faults.

    .venv/bin/python bench/failsafe_bench.py [--quick]

vLLM's real Scheduler, the `ngram_preempt` workload repeated; for each case the
per-step wall time of schedule() (tracer snapshot included), alternating the
cases round by round. Cases: stock Scheduler; TracingScheduler writing to a
healthy file; to a file whose writes hang (stuck disk); to a disk that is full;
and streaming to one viewer that never reads. Figures: median and max per step.
"""

from __future__ import annotations

import argparse
import errno
import io
import os
import socket
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent


class Stuck(io.RawIOBase):
    def __init__(self) -> None:
        self.release = threading.Event()

    def writable(self) -> bool:
        return True

    def write(self, data: Any) -> int:
        self.release.wait()
        return len(data)


class Full(io.RawIOBase):
    def writable(self) -> bool:
        return True

    def write(self, data: Any) -> int:
        raise OSError(errno.ENOSPC, "No space left on device")


def run_case(case: str, tmp: Path) -> list[float]:
    from vllm.v1.core.sched.scheduler import Scheduler

    from tracer.record import wiring
    from tracer.scheduler import TracingScheduler
    from tracer.whatif.offline import build_scheduler, run_workload
    from tracer.whatif.scenarios import SCENARIOS, mixed_accept

    os.environ.pop("SCHEDSCOPE_STREAM", None)
    os.environ["SCHEDSCOPE_TRACE"] = str(tmp / f"{case}.jsonl")
    os.environ["SCHEDSCOPE_WRITER"] = "thread"  # the writer thread's faults, patched in this process
    original = wiring.open_sink
    stuck = Stuck()
    if case == "stuck disk":
        wiring.open_sink = lambda path: stuck  # type: ignore[assignment]
    elif case == "full disk":
        wiring.open_sink = lambda path: Full()  # type: ignore[assignment]
    elif case == "stalled viewer":
        os.environ["SCHEDSCOPE_STREAM"] = "127.0.0.1:0"
    spec, requests = SCENARIOS["ngram_preempt"]
    try:
        sched = build_scheduler(spec, Scheduler if case == "stock" else TracingScheduler)
        conn = None
        if case == "stalled viewer":
            host, port = sched._schedscope_stream.address[:2]
            conn = socket.create_connection((host, port))
            conn.sendall(b"GET /trace HTTP/1.1\r\nHost: x\r\n\r\n")
        times: list[float] = []

        def timed(s: Any) -> Any:
            start = time.perf_counter()
            out = s.schedule()
            times.append(time.perf_counter() - start)
            return out

        run_workload(sched, requests, accept=mixed_accept, schedule=timed)
        stuck.release.set()
        sched.shutdown()
        if conn is not None:
            conn.close()
            sched._schedscope_stream.close()
        return times
    finally:
        wiring.open_sink = original


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--rounds", type=int, default=15)
    args = parser.parse_args()
    sys.path.insert(0, str(ROOT))
    rounds = 3 if args.quick else args.rounds
    tmp = Path(tempfile.mkdtemp(prefix="schedscope-failsafe-"))
    cases = ["stock", "healthy file", "stuck disk", "full disk", "stalled viewer"]
    times: dict[str, list[float]] = {c: [] for c in cases}
    for _ in range(rounds):
        for case in cases:
            times[case] += run_case(case, tmp)
    base = statistics.median(times["stock"])
    for case in cases:
        t = times[case]
        med = statistics.median(t)
        print(f"{case:15} median {med * 1e6:7.1f} µs ({med / base:.2f}x stock)  max {max(t) * 1e3:6.2f} ms")
    worst = max(max(times[c]) for c in cases[1:]) * 1e3
    stock_worst = max(times["stock"]) * 1e3
    print(f"worst schedule() under any tracer fault: {worst:.2f} ms (stock worst {stock_worst:.2f} ms)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
