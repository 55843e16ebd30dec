#!/usr/bin/env python3
"""`schedscope why TRACE REQUEST`'s cost: one request's story (tracer.analysis.request_story.request_story)
for 20 admitted requests spread over the trace, the request index and step pass built first
(as a session has them, or a re-open reads them back): CPU time per story and the step records
it reads. A story should read its own span's records, not the trace's.

    .venv/bin/python bench/gen_trace.py /tmp/t20k.jsonl --steps 20000 --max-running 256 \\
        --budget 8192 --kv-blocks 40000 --arrival-rate 4
    .venv/bin/python bench/why_story.py /tmp/t20k.jsonl
    .venv/bin/python bench/why_story.py --quick      # a 2,000-step trace made here

The "before" figure of docs/performance.md: SCHEDSCOPE_BENCH_TRACER pointing at an older tree.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

# This tree's tracer; _common puts SCHEDSCOPE_BENCH_TRACER's before it.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from _common import BENCH

from tracer.analysis import request_story
from tracer.analysis.requests import request_index
from tracer.analysis.step_features import step_pass
from tracer.trace.reader import load
from tracer.trace.trace_type import Trace

STORIES = 20


def measure(path: str) -> str:
    trace = load(path)
    ids = list(request_index(trace).columns.ids)
    step_pass(trace)
    stride = max(1, len(ids) // STORIES)
    chosen = ids[stride // 2 :: stride][:STORIES]
    read = [0]
    raw_many = Trace.raw_many

    def counted(self: Trace, rows: Any) -> Any:
        for item in raw_many(self, rows):
            read[0] += 1
            yield item

    Trace.raw_many = counted  # type: ignore[method-assign]
    cpu, records = [], []
    for rid in chosen:
        read[0] = 0
        t0 = time.process_time()
        request_story.request_story(trace, rid)
        cpu.append(time.process_time() - t0)
        records.append(read[0])
    Trace.raw_many = raw_many  # type: ignore[method-assign]
    return (
        f"why REQUEST figure: {len(trace):,} steps, {len(chosen)} stories: CPU median "
        f"{statistics.median(cpu) * 1e3:.0f} ms (min {min(cpu) * 1e3:.0f}, max {max(cpu) * 1e3:.0f}); "
        f"records read median {statistics.median(records):.0f} (max {max(records)})"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("trace", nargs="?", help="a bench/gen_trace.py trace")
    ap.add_argument("--quick", action="store_true", help="generate and measure a 2,000-step trace")
    args = ap.parse_args()
    if args.trace:
        print(measure(args.trace))
        return
    if not args.quick:
        ap.error("give a TRACE or --quick")
    with tempfile.TemporaryDirectory(prefix="schedscope-why-") as tmp:
        path = str(Path(tmp) / "t.jsonl")
        gen = [sys.executable, str(BENCH / "gen_trace.py"), path, "--steps", "2000", "--max-running", "64"]
        subprocess.run(gen, check=True, stdout=subprocess.DEVNULL)
        print(measure(path))


if __name__ == "__main__":
    main()
