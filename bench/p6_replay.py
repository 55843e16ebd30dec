"""P6, what-if replay speed: scheduler steps per second through vLLM's real
Scheduler at 64 running requests, and the harness's share of the time.

    .venv/bin/python bench/p6_replay.py [--quick] [--rounds N] [--steps N]

A workload of 64 long-lived requests (ngram K=3, a mix of accepted drafts) is
replayed under `separate` with tracer.whatif.replay.replay, exactly as `schedscope
replay` runs it (recording included). vLLM's own schedule() and
update_from_output() are timed inside the run; the rest is the harness
(request building, deterministic model outputs, draft proposals) and the
tracer. Target: >= 1,000 steps/s.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--steps", type=int, default=3000)
    args = parser.parse_args()
    sys.path.insert(0, str(ROOT))
    from vllm.v1.core.sched.scheduler import Scheduler

    from tracer.whatif.offline import EngineSpec, RequestSpec
    from tracer.whatif.replay import replay
    from tracer.whatif.workload import Workload

    steps = 300 if args.quick else args.steps
    rounds = 2 if args.quick else args.rounds
    engine = EngineSpec(
        method="ngram",
        num_speculative_tokens=3,
        max_num_batched_tokens=8192,
        max_num_seqs=64,
        max_model_len=1 << 16,
        num_kv_blocks=200_000,
    )
    requests = [RequestSpec(f"r{i}", 128, 4 * steps) for i in range(64)]
    accepted = {r.id: [(i + k) % 4 for k in range(4 * steps)] for i, r in enumerate(requests)}
    workload = Workload(engine, requests, accepted_in_order=accepted)

    # Time vLLM's own calls from inside the replay.
    spent = {"vllm": 0.0, "first": 0.0}
    vllm_calls = ("schedule", "update_from_output", "update_draft_token_ids", "add_request")
    originals = {name: getattr(Scheduler, name) for name in vllm_calls}

    def timed(name: str) -> Any:
        orig = originals[name]

        def wrapper(self: Any, *a: Any, **kw: Any) -> Any:
            start = time.perf_counter()
            spent["first"] = spent["first"] or start
            try:
                return orig(self, *a, **kw)
            finally:
                spent["vllm"] += time.perf_counter() - start

        return wrapper

    rates, shares = [], []
    tmp = Path(tempfile.mkdtemp(prefix="schedscope-p6-"))
    for name in originals:
        setattr(Scheduler, name, timed(name))
    try:
        for _ in range(rounds):
            spent["vllm"] = spent["first"] = 0.0
            replay(workload, "separate", tmp / "r.jsonl", max_steps=steps)
            # From the first schedule() on: building the scheduler (its KV block
            # pool) is a one-off per replay, not a per-step cost.
            wall = time.perf_counter() - spent["first"]
            rates.append(steps / wall)
            shares.append(1 - spent["vllm"] / wall)
    finally:
        for name, orig in originals.items():
            setattr(Scheduler, name, orig)
    med = statistics.median(rates)
    print(f"replay: {steps} steps x {rounds} rounds at 64 running requests (ngram K=3, policy separate)")
    print(f"steps/s median {med:.0f} (min {min(rates):.0f}, max {max(rates):.0f}); target >= 1000")
    print(
        f"harness + tracer share of the time: median {statistics.median(shares):.0%} "
        f"(vLLM's schedule() + update_from_output(): {1 - statistics.median(shares):.0%})"
    )
    ratio = 1 / (1 - statistics.median(shares))
    print(f"P6: {med:.0f} steps/s; wall / vLLM's own calls = {ratio:.3f}x (goal <= 1.05x)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
