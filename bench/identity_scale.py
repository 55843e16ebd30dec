"""Identity replay at a busy server's size: about 250 running requests, preempting.

    .venv/bin/python bench/identity_scale.py [--requests 1500] [--mode async|ngram]

Records a run offline on vLLM's real Scheduler (tracer.whatif.offline), with what a busy
server does: a request arrives every step (eight per step), prompts of 16-1,500
tokens sharing prefix blocks with earlier ones (prefix caching on), a proposer
offering 0-3 drafts, partial acceptance, stop tokens, and a KV cache small enough
to preempt. It then runs `check_fidelity` on that trace, as `schedscope replay
--check` does, and prints the identical-step share and both times.
"""

from __future__ import annotations

import argparse
import random
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--requests", type=int, default=1500)
    parser.add_argument("--mode", choices=["async", "ngram"], default="async")
    parser.add_argument("--quick", action="store_true", help="150 requests")
    args = parser.parse_args()
    sys.path.insert(0, str(ROOT))
    from tracer.policies import scheduler_class
    from tracer.render.fidelity import fidelity_lines
    from tracer.trace.reader import load
    from tracer.whatif.fidelity import check_fidelity
    from tracer.whatif.offline import EngineSpec, RequestSpec, build_scheduler
    from tracer.whatif.replay import Replayer, recording_to
    from tracer.whatif.workload import PositionTable, Workload

    n = 150 if args.quick else args.requests
    is_async = args.mode == "async"
    k = 0 if is_async else 3
    rng = random.Random(7)
    engine = EngineSpec(
        max_num_batched_tokens=8192,
        max_num_seqs=256,
        max_model_len=4096,
        method=None if is_async else "ngram",
        num_speculative_tokens=k,
        num_kv_blocks=9000,
        enable_prefix_caching=True,
    )
    requests: list[RequestSpec] = []
    drafts, accepted, stops = PositionTable(), PositionTable(), {}
    for i in range(n):
        prefix = None
        if requests and rng.random() < 0.6:
            src = rng.choice(requests)
            prefix = (src.id, rng.randint(1, src.prompt_len // 16)) if src.prompt_len >= 16 else None
        r = RequestSpec(
            f"r{i}", rng.randint(16, 1500), rng.randint(100, 400), arrival_step=1 + i // 8, prefix=prefix
        )
        requests.append(r)
        for pos in range(0, r.max_tokens, 3):
            drafts.add(r.id, pos, rng.randint(0, k))
            accepted.add(r.id, pos, rng.randint(0, k))
        if rng.random() < 0.3:
            stops[r.id] = rng.randint(1, r.max_tokens)
    workload = Workload(
        engine, requests, async_scheduling=is_async, accepted=accepted, drafts=drafts, stops=stops
    )
    with tempfile.TemporaryDirectory(prefix="schedscope-identity-") as tmp:
        path = Path(tmp) / "run.jsonl"
        start = time.perf_counter()
        with recording_to(path):
            sched = build_scheduler(engine, scheduler_class("stock", async_scheduling=is_async))
        try:
            Replayer(sched, workload, num_drafts=k, is_async=is_async).run(1_000_000)
        finally:
            sched.shutdown()
        recorded_s = time.perf_counter() - start
        trace = load(path)
        col = trace.columns
        start = time.perf_counter()
        fidelity = check_fidelity(trace)
        check_s = time.perf_counter() - start
    running, preempted = int(col["num_running"].max()), int(col["n_preempted"].sum())
    shared = sum(1 for r in requests if r.prefix)
    print(
        f"recorded {len(trace)} steps ({args.mode}) in {recorded_s:.1f} s: up to {running} running, ", end=""
    )
    print(f"{preempted} preemptions, {shared} prompts sharing a prefix")
    print(*fidelity_lines(fidelity)[:2], sep="\n")
    share = f"{fidelity.identical_share:.1%} of {len(trace)} steps identical"
    print(f"identity at scale: {share}; check took {check_s:.1f} s")
    return 0 if fidelity.identical else 1


if __name__ == "__main__":
    sys.exit(main())
