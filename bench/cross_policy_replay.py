"""Cross-policy replays against vLLM's real Scheduler on random small DSpark/DFlash workloads.

    .venv/bin/python bench/cross_policy_replay.py [--seeds 100:180] [--accept all|none|pos|mixed]

Each seed draws a workload (K 2-4, B 12-24, max_num_seqs 4 or 8, 3-7 requests of 1-9 prompt
tokens and 2-9 output tokens arriving before steps 1-6), runs it through vLLM's scheduler under
`additive`, `cap` and `separate` with the offline driver, and replays each recording under the
two other policies. A replay that does not re-make the direct run of its target policy is
printed with its first divergence. Acceptance: `all` or `none` of the real drafts, `mixed`
(either, per seed: the default), or `pos`: a partial count drawn per request and output
position, the model a replay assumes, so a miss there is an estimate (docs/what-if.md, "What a
cross-policy replay can and cannot know"). Placeholders are never accepted.
"""

from __future__ import annotations

import argparse
import random
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
POLICIES = ("additive", "cap", "separate")


def workload(seed: int) -> tuple[Any, list[Any]]:
    from tracer.whatif.offline import EngineSpec, RequestSpec

    rng = random.Random(seed)
    spec = EngineSpec(
        method=rng.choice(["dspark", "dspark", "dflash"]),
        num_speculative_tokens=rng.choice([2, 3, 4]),
        max_num_batched_tokens=rng.choice([12, 16, 24]),
        max_num_seqs=rng.choice([4, 8]),
        max_model_len=256,
    )
    requests = [
        RequestSpec(
            f"r{i}",
            rng.choice([1, 1, 1, 2, 5, 9]),
            rng.choice([2, 3, 6, 9]),
            arrival_step=rng.choice([1, 1, 2, 3, 4, 6]),
        )
        for i in range(rng.randint(3, 7))
    ]
    return spec, requests


def acceptance(kind: str, seed: int, current: list[Any]) -> Any:
    """accept(req_id, step, drafts) for the offline driver."""
    if kind == "all":
        return lambda rid, step, drafts: drafts
    if kind == "none":
        return lambda rid, step, drafts: 0

    def by_position(rid: str, step: int, drafts: int) -> int:
        at = current[0].requests[rid].num_output_tokens  # tokens sampled so far
        return min(drafts, random.Random(f"{seed}/{rid}/{at}").randint(0, 4))

    return by_position


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--seeds", default="100:180", help="a range, first:end (default 100:180)")
    parser.add_argument("--accept", choices=["all", "none", "pos", "mixed"], default="mixed")
    args = parser.parse_args()
    sys.path.insert(0, str(ROOT))
    from tracer.policies import scheduler_class
    from tracer.render.fidelity import fidelity_lines
    from tracer.trace.reader import load
    from tracer.whatif.fidelity import compare_runs
    from tracer.whatif.offline import build_scheduler, run_workload
    from tracer.whatif.replay import recording_to, replay
    from tracer.whatif.workload import workload_from_trace

    first, end = (int(x) for x in args.seeds.split(":"))
    root = Path(tempfile.mkdtemp(prefix="cross-policy-"))
    replays = missed = 0
    for seed in range(first, end):
        spec, requests = workload(seed)
        kind = random.Random(seed).choice(["all", "all", "none"]) if args.accept == "mixed" else args.accept
        current: list[Any] = [None]
        accept = acceptance(kind, seed, current)
        traces = {}
        for policy in POLICIES:
            path = root / f"{seed}-{policy}.jsonl"
            with recording_to(path):
                sched = build_scheduler(spec, scheduler_class(policy))
            current[0] = sched
            try:
                run_workload(sched, requests, accept=accept)
            finally:
                sched.shutdown()
            traces[policy] = load(path)
        for source in POLICIES:
            for target in POLICIES:
                if source == target:
                    continue
                out = root / f"{seed}-{source}-{target}.jsonl"
                replayed = load(replay(workload_from_trace(traces[source]), target, out))
                fidelity = compare_runs(traces[target], replayed, policy=target, exact=True, notes=[])
                replays += 1
                if not fidelity.identical:
                    missed += 1
                    what = f"{kind}, {spec.method} K={spec.num_speculative_tokens}"
                    print(f"seed {seed} ({what}): {source} -> {target}")
                    print("   ", "\n    ".join(fidelity_lines(fidelity)[:6]))
    print(f"{missed} of {replays} cross-policy replays differ from vLLM's direct run ({root})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
