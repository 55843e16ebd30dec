#!/usr/bin/env python3
"""What reading every running request's demand costs the scheduler thread, warm and cold.

`Recorder.before_schedule` reads `len(_all_token_ids) + len(spec_token_ids) -
num_computed_tokens` off each running vLLM `Request` before schedule(). That read is
the largest part of the tracer's hooks at 256 running (P1). This bench times it on
the P1 scheduler's own requests (bench/p1_tracer_overhead.py: real vLLM Scheduler, ngram
K=3, after warm-up steps), three ways in one run:

  warm    the requests were just read (as right after vLLM's own schedule() loop);
  cold    after copying `--evict` MiB through the cache (more than the L2): the requests as
          a forward pass leaves them;
  engine  where before_schedule runs in a server: the cache flushed as above (the forward
          pass), then update_from_output() and update_draft_token_ids(), which EngineCore
          calls between the forward pass and the next schedule().

Each form of the loop is timed both ways, alternated, `--reps` times; the medians are printed.
The forms give the same list (checked), so any of them could replace the one in use. One
form is split in two around schedule() (`split_before`, `split_after`: the draft lists
schedule() replaces taken before it, the rest read after it, with the tokens it scheduled
added back): its cost is the first cold plus the second warm.

    PYTHONPATH=$PWD .venv/bin/python bench/demand_read.py
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from operator import add, attrgetter, sub
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from _common import machine
from p1_tracer_overhead import Loop, build


def forms(running: list) -> dict:
    """The loops timed, by name; the first is the recorder's."""
    all_ids, spec_ids = attrgetter("_all_token_ids"), attrgetter("spec_token_ids")
    computed = attrgetter("num_computed_tokens")
    three = attrgetter("_all_token_ids", "spec_token_ids", "num_computed_tokens")

    def comprehension() -> list[int]:  # tracer.record.recorder.Recorder.before_schedule
        return [len(r._all_token_ids) + len(r.spec_token_ids) - r.num_computed_tokens for r in running]

    def chained_maps() -> list[int]:
        lens = map(add, map(len, map(all_ids, running)), map(len, map(spec_ids, running)))
        return list(map(sub, lens, map(computed, running)))

    def three_passes() -> list[int]:
        a = list(map(len, map(all_ids, running)))
        b = list(map(len, map(spec_ids, running)))
        return list(map(sub, map(add, a, b), map(computed, running)))

    def one_getter() -> list[int]:
        return [len(a) + len(b) - c for a, b, c in map(three, running)]

    def property_read() -> list[int]:  # vLLM's own num_tokens_with_spec property
        return [r.num_tokens_with_spec - r.num_computed_tokens for r in running]

    # The read split around schedule(): before it, only the draft lists that schedule()
    # replaces (cold); after it, the rest, while schedule() has left the requests in the cache
    # (warm), the tokens it scheduled added back (none here, so the result is the same).
    specs = list(map(spec_ids, running))
    scheduled = {r.request_id: 0 for r in running}

    def split_before() -> list:
        return list(map(spec_ids, running))

    def split_after() -> list[int]:
        get = scheduled.get
        return [
            len(r._all_token_ids) + len(sp) - r.num_computed_tokens + get(r.request_id, 0)
            for r, sp in zip(running, specs, strict=True)
        ]

    loops = (comprehension, chained_maps, three_passes, one_getter, property_read, split_after)
    return {f.__name__: f for f in loops} | {"split_before": split_before}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--requests", type=int, default=256, help="running requests")
    ap.add_argument("--reps", type=int, default=300, help="timings of each form, each way")
    ap.add_argument("--evict", type=int, default=6, help="MiB copied before each cold timing")
    ap.add_argument("--quick", action="store_true", help="30 timings of each form")
    args = ap.parse_args()
    if args.quick:
        args.reps = 30
    warmup = 20  # past the prefills: every request decoding with drafts
    timed_steps = args.reps * 7  # one engine step per form and rep (seven forms)
    sched = build(args.requests, warmup + timed_steps)
    loop = Loop(sched)
    loop.run(warmup)
    loop.apply()  # as before_schedule meets them: the output applied, the drafts handed over
    running = list(sched.running)
    timed = forms(running)
    expected = timed["comprehension"]()
    for name, f in timed.items():
        assert name == "split_before" or f() == expected, f"{name} reads other demands"
    src, dst = bytearray(os.urandom(args.evict << 20)), bytearray(args.evict << 20)
    warm: dict[str, list[int]] = {name: [] for name in timed}
    cold: dict[str, list[int]] = {name: [] for name in timed}
    engine: dict[str, list[int]] = {name: [] for name in timed}
    clock = time.perf_counter_ns
    for _ in range(args.reps):
        for name, f in timed.items():
            f()
            t = clock()
            f()
            warm[name].append(clock() - t)
            dst[:] = src  # through the cache: the requests' lines leave L1 and L2
            t = clock()
            f()
            cold[name].append(clock() - t)
            # One engine step: schedule(), the forward pass (the flush), the output applied.
            loop.pending = sched.schedule()
            loop.driver.step_index += 1
            dst[:] = src
            loop.apply()
            t = clock()
            f()
            engine[name].append(clock() - t)
    assert sched.running == running and timed["comprehension"]() == expected, "the requests changed"
    print(f"demand read: {machine()}")
    print(f"{args.requests} running requests of the P1 scheduler; median of {args.reps}, us a step")
    print(f"  {'form':14s} {'warm':>7s} {'cold':>7s} {'engine':>7s}  cold per request")
    for name in timed:
        w, c = statistics.median(warm[name]) / 1000, statistics.median(cold[name]) / 1000
        e = statistics.median(engine[name]) / 1000
        print(f"  {name:14s} {w:7.1f} {c:7.1f} {e:7.1f}  {c * 1000 / args.requests:5.0f} ns")
    cold_loop = statistics.median(cold["comprehension"]) / 1000
    engine_loop = statistics.median(engine["comprehension"]) / 1000
    split = (statistics.median(cold["split_before"]) + statistics.median(warm["split_after"])) / 1000
    print(f"  split around schedule(): split_before cold + split_after warm = {split:.1f} us")
    print(
        f"demand read figure: the recorder's loop at {args.requests} running, cold, {cold_loop:.1f} us; "
        f"in EngineCore's order {engine_loop:.1f} us; split around schedule() {split:.1f} us "
        f"({split / cold_loop:.2f}x cold)"
    )


if __name__ == "__main__":
    main()
