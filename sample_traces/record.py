"""Re-record the offline sample traces with vLLM's real Scheduler (tracer.scheduler).

    .venv/bin/python sample_traces/record.py [NAME ...]

Each scenario in tracer.scenarios is driven through TracingScheduler with
deterministic model outputs; see sample_traces/README.md for what each shows.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
FILES = {
    "dflash_k7": "dflash_k7_additive.jsonl",
    "ngram_preempt": "ngram_preempt.jsonl",
    "draft_model": "draft_model.jsonl",
}


def record(name: str, path: Path) -> Path:
    from tracer.offline import build_scheduler, run_workload
    from tracer.scenarios import SCENARIOS, mixed_accept
    from tracer.scheduler import TracingScheduler

    spec, requests = SCENARIOS[name]
    os.environ["SCHEDSCOPE_TRACE"] = str(path)
    try:
        sched = build_scheduler(spec, TracingScheduler)
        run_workload(sched, requests, accept=mixed_accept)
        sched.shutdown()
    finally:
        del os.environ["SCHEDSCOPE_TRACE"]
    return path


if __name__ == "__main__":
    sys.path.insert(0, str(HERE.parent))
    for name in sys.argv[1:] or FILES:
        print(record(name, HERE / FILES[name]))
