"""Live stream load: end-to-end latency and sustained rate to two viewer processes.

    .venv/bin/python bench/stream_bench.py [--quick] [--steps N] [--rate STEPS_PER_S]

vLLM's real Scheduler (ngram K=3, --running requests, 8 by default) runs TracingScheduler
with SCHEDSCOPE_STREAM on loopback, paced at --rate steps per second. Two
viewer processes (`schedscope attach --json`) read the stream. Latency is
measured from schedule() returning (the record's t + sched_us, CLOCK_MONOTONIC,
shared by processes on Linux) to the record's arrival in a viewer. Targets:
median ≤ 250 ms; 2,000 steps/s with 0 drops to both viewers.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
VIEWER = r"""
import sys, time, orjson
from tracer.trace.attach import StreamFollower
out = open(sys.argv[2], "w")
for event in StreamFollower(sys.argv[1]).events(max_reconnects=0):
    if event.kind != "record":
        continue
    rec = event.record
    if rec["kind"] == "step":
        out.write(f"{rec['step']} {time.monotonic() - (rec['t'] + rec['sched_us'] / 1e6)}\n")
    elif rec["kind"] == "footer":
        break
out.close()
"""


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="1,000 steps (CI guard)")
    parser.add_argument("--steps", type=int, default=10_000)
    parser.add_argument("--rate", type=float, default=2000.0, help="steps per second to sustain")
    parser.add_argument(
        "--running", type=int, default=8, help="running requests (cheap steps reach the rate)"
    )
    parser.add_argument(
        "--synthetic",
        action="store_true",
        help="feed the stream with recorded sample steps instead of a live scheduler (the stream alone)",
    )
    args = parser.parse_args()
    steps = 1000 if args.quick else args.steps
    sys.path.insert(0, str(ROOT))

    from tracer.scheduler import TracingScheduler
    from tracer.trace.reader import load
    from tracer.whatif.offline import EngineSpec, RequestSpec, build_scheduler, run_workload

    tmp = Path(tempfile.mkdtemp(prefix="schedscope-stream-bench-"))
    if args.synthetic:
        return synthetic(args, steps, tmp)
    os.environ["SCHEDSCOPE_TRACE"] = str(tmp / "trace.jsonl")
    os.environ["SCHEDSCOPE_STREAM"] = "127.0.0.1:0"
    os.environ["SCHEDSCOPE_WRITER"] = "thread"  # the hub in this process, where the bench reads it
    spec = EngineSpec(
        method="ngram",
        num_speculative_tokens=3,
        max_num_batched_tokens=8192,
        max_num_seqs=64,
        max_model_len=1 << 16,
        num_kv_blocks=300_000,
    )
    sched = build_scheduler(spec, TracingScheduler)
    url = sched._schedscope_stream.url
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("SCHEDSCOPE_STREAM")
    env.pop("SCHEDSCOPE_TRACE")
    outs = [tmp / f"viewer{i}.txt" for i in range(2)]
    viewers = [subprocess.Popen([sys.executable, "-c", VIEWER, url, str(o)], env=env) for o in outs]
    while sched._schedscope_stream.hub.viewers < 2:
        time.sleep(0.05)

    period = 1.0 / args.rate
    next_at = time.perf_counter()

    def paced(s: object) -> object:
        nonlocal next_at
        next_at += period
        delay = next_at - time.perf_counter()
        if delay > 0:
            time.sleep(delay)
        return s.schedule()  # type: ignore[attr-defined]

    # Long-lived decodes, no drafts accepted: one token a step, steady state.
    requests = [RequestSpec(f"r{i}", 16, steps + 10) for i in range(args.running)]
    start = time.perf_counter()
    run_workload(sched, requests, accept=lambda r, s, n: 0, schedule=paced, max_steps=steps)
    elapsed = time.perf_counter() - start
    sched.shutdown()
    for v in viewers:
        v.wait(60)
    trace = load(tmp / "trace.jsonl")
    hub = sched._schedscope_stream.hub
    lat = []
    received = []
    for o in outs:
        rows = [line.split() for line in o.read_text().splitlines()]
        received.append(len(rows))
        lat += [float(r[1]) * 1000 for r in rows]
    print(
        f"steps {len(trace)} in {elapsed:.2f}s = {len(trace) / elapsed:.0f} steps/s (target {args.rate:.0f})"
    )
    print(
        f"viewers received {received} of {len(trace)} steps; cut off {hub.viewers_cut}; "
        f"file drops {trace.footer['records_dropped']}"
    )
    q = statistics.quantiles(lat, n=100)
    print(
        f"latency schedule() -> viewer: median {statistics.median(lat):.1f} ms, p99 {q[98]:.1f} ms, "
        f"max {max(lat):.1f} ms (target median <= 250 ms)"
    )
    ok = (
        all(r == len(trace) for r in received)
        and hub.viewers_cut == 0
        and trace.footer["records_dropped"] == 0
    )
    print(
        f"stream: {'0 drops to both viewers' if ok else 'DROPS'} at {len(trace) / elapsed:.0f} steps/s, "
        f"median latency {statistics.median(lat):.1f} ms"
    )
    return 0 if ok else 1


def synthetic(args: argparse.Namespace, steps: int, tmp: Path) -> int:
    """The stream alone: StreamHub + StreamServer fed at --rate with real step
    records (from a sample trace, renumbered), as the writer thread would."""
    import orjson

    from tracer.live.stream import StreamHub, StreamServer
    from tracer.record.writer import Record

    sample = (ROOT / "sample_traces" / "ngram_preempt.jsonl").read_bytes().splitlines()
    header, body = sample[0] + b"\n", [orjson.loads(x) for x in sample[1:] if b'"kind":"step"' in x]
    hub = StreamHub()
    server = StreamServer(hub, "127.0.0.1", 0)
    hub.publish([Record("header", None, header)])
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    outs = [tmp / f"viewer{i}.txt" for i in range(2)]
    viewers = [subprocess.Popen([sys.executable, "-c", VIEWER, server.url, str(o)], env=env) for o in outs]
    while hub.viewers < 2:
        time.sleep(0.05)
    period = 1.0 / args.rate
    start = next_at = time.perf_counter()
    batch: list[Record] = []
    for i in range(1, steps + 1):
        rec = dict(body[i % len(body)], step=i)
        rec["t"], rec["sched_us"] = time.monotonic(), 0.0
        batch.append(Record("step", i, orjson.dumps(rec, option=orjson.OPT_APPEND_NEWLINE)))
        next_at += period
        if len(batch) >= 40 or i == steps:  # the writer drains every 20 ms: ~40 steps at 2,000/s
            hub.publish(batch)
            batch = []
            delay = next_at - time.perf_counter()
            if delay > 0:
                time.sleep(delay)
    elapsed = time.perf_counter() - start
    hub.publish([Record("footer", None, orjson.dumps({"kind": "footer"}, option=orjson.OPT_APPEND_NEWLINE))])
    for v in viewers:
        v.wait(60)
    server.close()
    received = [len(o.read_text().splitlines()) for o in outs]
    lat = [float(line.split()[1]) * 1000 for o in outs for line in o.read_text().splitlines()]
    ok = all(r == steps for r in received) and hub.viewers_cut == 0
    print(
        f"synthetic: {steps} steps in {elapsed:.2f}s = {steps / elapsed:.0f} steps/s; viewers received "
        f"{received}; cut off {hub.viewers_cut}"
    )
    print(
        f"stream alone: {'0 drops to both viewers' if ok else 'DROPS'} at {steps / elapsed:.0f} steps/s, "
        f"median latency {statistics.median(lat):.1f} ms (p99 {statistics.quantiles(lat, n=100)[98]:.1f} ms)"
    )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
