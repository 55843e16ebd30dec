#!/usr/bin/env python3
"""Trace size: bytes per step at 256 running requests, raw and gzipped.

Records a real trace with TracingScheduler on vLLM's Scheduler in the P1 setup
(ngram K=3, server-shaped request ids, every request decoding), then measures
the steady-state step records in three layouts, all of the same steps:

- format 1.2, as recorded (parallel arrays per request group, `sampled` aligned with
  the scheduled order, drafts inputs naming scheduled requests by position);
- format 1.1, the same records converted back by `tracer.trace.compact.expand`
  (exactly what the 1.1 recorder wrote: tests/test_recorder_equivalence.py);
- interned (an estimate, NOT implemented in the recorder or reader): on top of 1.2,
  request ids replaced by small integers, each id written once (in the step that
  first mentions it).

    .venv/bin/python bench/trace_size.py            # 256 running, 200 steps
    .venv/bin/python bench/trace_size.py --quick    # 60 steps
"""

from __future__ import annotations

import argparse
import gzip
import os
import sys
import tempfile
import zlib
from pathlib import Path
from typing import Any

import orjson

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import machine
from p1_tracer_overhead import Loop, build

REQ_LISTS = ("new", "resumed", "running")


def record(n: int, steps: int, warmup: int, path: Path) -> list[bytes]:
    """Step record lines (newline included) after the warm-up, from a real recording."""
    from tracer.scheduler import TracingScheduler

    sched = build(n, warmup + steps, TracingScheduler, path)
    loop = Loop(sched, sched._schedscope.writer.force_flush)
    loop.run(warmup + steps)
    loop.finish()
    assert len(sched.running) == n
    sched.shutdown()
    lines = [line + b"\n" for line in path.read_bytes().splitlines()]
    return [ln for ln in lines if ln.startswith(b'{"kind":"step"') and orjson.loads(ln)["step"] > warmup]


def interned(recs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """1.2 records with ids interned (an estimate of what interning would save)."""
    known: dict[str, int] = {}
    out = []
    for rec in recs:
        rec = orjson.loads(orjson.dumps(rec))
        fresh = []
        for key in REQ_LISTS:
            if not rec[key]:
                continue
            ids = []
            for rid in rec[key]["id"]:
                if rid not in known:
                    known[rid] = len(known)
                    fresh.append(rid)
                ids.append(known[rid])
            rec[key]["id"] = ids
        for key in ("preempted", "finished"):
            rec[key] = [known.get(r, r) for r in rec[key]]
        rec["unscheduled"] = [[known.get(r, r), d] for r, d in rec.get("unscheduled", [])]
        for entry in rec.get("inputs") or ():
            if entry[0] == "d":
                entry[1] = [known.get(r, r) if isinstance(r, str) else r for r in entry[1]]
        if fresh:
            rec["ids"] = fresh  # id table entries, first mention only
        out.append(rec)
    return out


def sizes(lines: list[bytes]) -> tuple[float, float, float]:
    """(raw, gzip level 3 as the recorder writes, gzip level 9) bytes per step."""
    blob = b"".join(lines)
    n = len(lines)
    return len(blob) / n, len(gzip.compress(blob, 3)) / n, len(zlib.compress(blob, 9)) / n


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--requests", type=int, default=256)
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--warmup", type=int, default=16)
    ap.add_argument("--quick", action="store_true", help="60 steps")
    args = ap.parse_args(argv)
    if args.quick:
        args.steps = 60
    import logging

    from tracer.trace import compact, schema

    logging.disable(logging.WARNING)
    print(f"Trace size: {machine()}")
    with tempfile.TemporaryDirectory(prefix="schedscope-size-") as tmp:
        lines = record(args.requests, args.steps, args.warmup, Path(tmp) / "size.jsonl")
    recs = [orjson.loads(ln) for ln in lines]
    assert all(r["running"] == [] or isinstance(r["running"], dict) for r in recs), "not format 1.2"
    n_sched = sum(compact.size(r[key]) for r in recs for key in REQ_LISTS) / len(recs)

    def encode(records: list[dict[str, Any]]) -> list[bytes]:
        return [orjson.dumps(r, option=orjson.OPT_APPEND_NEWLINE | orjson.OPT_NON_STR_KEYS) for r in records]

    layouts = {
        f"format {schema.SCHEMA_VERSION} (recorded)": lines,
        "format 1.1 (same steps, converted)": encode([compact.expand(orjson.loads(ln)) for ln in lines]),
        "interned + 1.2 (estimate)": encode(interned(recs)),
    }
    example = recs[0]["running"]["id"][0]
    print(f"  {len(lines)} steady-state steps, {n_sched:.0f} scheduled per step, ids like {example!r}")
    base = sizes(layouts["format 1.1 (same steps, converted)"])
    for name, encoded in layouts.items():
        raw, gz3, gz9 = sizes(encoded)
        print(
            f"    {name:36s} raw {raw:8.0f} B/step ({raw / base[0]:5.1%} of 1.1), gzip-3 {gz3:7.0f} B/step "
            f"({gz3 / base[1]:5.1%}), zlib-9 {gz9:7.0f} B/step; per scheduled request "
            f"{raw / n_sched:5.1f} B raw, {gz3 / n_sched:5.2f} B gzip-3"
        )
    base = sizes(lines)
    raw, gz3, _ = base
    print(
        f"Trace size figure: {raw:.0f} bytes/step raw, {gz3:.0f} bytes/step gzipped (level 3, as the "
        f"recorder writes .gz) at {args.requests} running requests"
    )
    return 0


if __name__ == "__main__":
    code = main()
    sys.stdout.flush()
    os._exit(code)  # skip triton's exit-time leak reports (see p1_tracer_overhead.py)
