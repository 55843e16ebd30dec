"""Sweep speed: `schedscope sweep` over a 12-setting grid on a 10,000-step trace.

    .venv/bin/python bench/sweep_bench.py [--steps 10000] [--workers 2] [--plot out.html]

The trace is recorded on vLLM's real Scheduler with tracer.whatif.offline (DFlash K=7,
staggered arrivals, partial acceptance), then its timestamps are rewritten with a
known step-time law (1% noise) and its arrival times made wall times, so the
step-time model fits and `--arrivals time` is possible. The grid is policy
(additive, cap, separate) x max_num_batched_tokens (1024, 2048) x K (3, 7), each a
timed replay through tracer.whatif.sweep.sweep, as `schedscope sweep` runs it.
Target: under 2 minutes on this 2-core machine.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import orjson

ROOT = Path(__file__).resolve().parent.parent
LAW = {"step": 2.0, "prefill_tokens": 0.01, "decode_tokens": 0.05, "requests": 0.2, "query_rows": 0.01}


def record(path: Path, steps: int) -> float:
    """Record until the trace has at least `steps` steps; returns seconds spent."""
    from tracer.record.config import ENV_TRACE
    from tracer.scheduler import TracingScheduler
    from tracer.whatif.offline import EngineSpec, RequestSpec, build_scheduler, run_workload
    from tracer.whatif.scenarios import mixed_accept

    spec = EngineSpec(
        method="dflash",
        num_speculative_tokens=7,
        max_num_batched_tokens=2048,
        max_num_seqs=16,
        num_kv_blocks=20_000,
    )
    # ~6 steps per request at 16 in flight: enough requests for `steps` steps.
    n = steps // 6 + 50
    requests = [RequestSpec(f"r{i}", 200 + (97 * i) % 1500, 40 + (31 * i) % 120, 1 + 6 * i) for i in range(n)]
    os.environ[ENV_TRACE] = str(path)
    start = time.perf_counter()
    sched = build_scheduler(spec, TracingScheduler)
    run_workload(sched, requests, accept=mixed_accept, max_steps=steps)
    sched.shutdown()
    del os.environ[ENV_TRACE]
    return time.perf_counter() - start


def retime(src: Path, dst: Path) -> None:
    """Timestamps from LAW (1% noise); arrival wall times just before their step."""
    from tracer.analysis.timing import records_of, step_features
    from tracer.trace.reader import load

    trace = load(src)
    x = step_features(records_of(trace), len(trace)).columns
    ms = sum(c * x[k] for k, c in LAW.items())
    ms = ms * (1 + 0.01 * np.random.default_rng(0).standard_normal(len(ms)))
    lines = [orjson.loads(line) for line in src.read_bytes().splitlines()]
    header = lines[0]
    t = header["t0"] + 1.0 + np.concatenate([[0.0], np.cumsum(ms[:-1])]) / 1e3
    i = 0
    for rec in lines:
        if rec["kind"] == "step":
            rec["t"] = float(t[i])
            for entry in rec["inputs"]:
                if entry[0] == "a":
                    entry[5] = float(t[i]) - 1e-4 - header["t0"] + header["start_time"]
            i += 1
    dst.write_bytes(b"\n".join(orjson.dumps(r) for r in lines) + b"\n")


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--steps", type=int, default=10_000)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--arrivals", choices=["step", "time"], default="step")
    parser.add_argument("--trace", type=Path, help="reuse a trace made by an earlier run")
    parser.add_argument("--plot", help="also write the sweep figure (HTML)")
    args = parser.parse_args()
    sys.path.insert(0, str(ROOT))
    from tracer.render.sweep_report import sweep_lines
    from tracer.trace.reader import load
    from tracer.whatif.sweep import grid, sweep

    tmp = Path(tempfile.mkdtemp(prefix="schedscope-sweep-bench-"))
    path = args.trace
    if path is None:
        raw = tmp / "raw.jsonl"
        took = record(raw, args.steps)
        path = tmp / "trace.jsonl"
        retime(raw, path)
        print(f"recorded {len(load(path)):,} steps in {took:.1f} s: {path}")
    settings = grid(["additive", "cap", "separate"], [1024, 2048], [3, 7])
    start = time.perf_counter()

    def progress(done: int, total: int, label: str) -> None:
        print(f"  {time.perf_counter() - start:6.1f} s  {done}/{total} {label}", file=sys.stderr)

    doc = sweep(
        path,
        settings,
        objective="output_tps",
        arrivals=args.arrivals,
        workers=args.workers,
        progress=progress,
    )
    wall = time.perf_counter() - start
    for line in sweep_lines(doc):
        print(line)
    steps = sum(r["steps"] for r in doc["results"])
    print(
        f"sweep: {len(settings)} settings on a {len(load(path)):,}-step trace, {args.workers} workers, "
        f"arrivals by {args.arrivals}: {wall:.1f} s wall ({steps:,} replayed steps to drain); target < 120 s"
    )
    if args.plot:
        from web.sweep_figure import sweep_figure

        sweep_figure(doc).write_html(args.plot, include_plotlyjs="cdn")
        print(f"wrote {args.plot}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
