#!/usr/bin/env python3
"""Reader at scale: memory and speed of `tracer.trace.reader.load` on a big trace.

Each variant runs in its own subprocess (so each peak RSS is its own); the variants
alternate within each repetition and every ratio is the median over repetitions:

- whole: today's approach before the step stores, reproduced with the same parser:
  the whole file read into memory and parsed in place, the Trace keeping its bytes;
- windowed: `load(path, sidecar=False)`: parsed in 4 MiB windows, steps read back
  from the file (FileStore);
- first: `load(path)` with no sidecar yet (parses, then writes `<trace>.ssidx`);
- reopen: `load(path)` again (maps the sidecar);
- with --gz: the trace gzip-compressed as one member (gzip.open, the old writer)
  and in members (the writer's GzipMemberSink), each loaded without a sidecar.

Peak RSS is the subprocess's ru_maxrss (imports included). MB/s is uncompressed
bytes per CPU second of the load (the work is single-threaded: on an idle machine
that is wall time; on a shared one it leaves out waits for a core); wall times are
shown beside it, and the sidecar re-open ratio is by wall time. `step` is the median
latency of Trace.step(i) over 200 random rows, measured right after the load (a
cold FileStore: the first read opens the file). The trace is linked into --dir, so
sidecars are written there (and XDG_CACHE_HOME points there): nothing is written next
to the trace itself.

    .venv/bin/python bench/reader_scale.py /work/big/t200k.jsonl --dir /tmp/rs --reps 1
    .venv/bin/python bench/reader_scale.py --quick      # a generated 3,000-step trace
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import BENCH, ROOT, fmt_spread, machine

PY = sys.executable
VARIANTS = ("whole", "windowed", "first", "reopen")


def worker(kind: str, path: Path) -> dict[str, Any]:
    import random
    import resource

    from tracer.trace.builder import TraceBuilder
    from tracer.trace.reader import load

    t0, c0 = time.perf_counter(), time.process_time()
    if kind == "whole":
        builder = TraceBuilder(path)
        builder._adopt(path.read_bytes())
        builder._parse()
        trace = builder.build(builder.finish())
    else:
        trace = load(path, sidecar=kind in ("first", "reopen"))
    load_s, cpu_s = time.perf_counter() - t0, time.process_time() - c0
    rng = random.Random(7)
    lat = []
    for _ in range(200):
        i = rng.randrange(len(trace))
        s = time.perf_counter()
        trace.step(i)
        lat.append(time.perf_counter() - s)
    lat.sort()
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return {
        "load_s": load_s,
        "cpu_s": cpu_s,
        "steps": len(trace),
        "rss": usage.ru_maxrss * 1024,
        "read_mb": usage.ru_inblock * 512 / 1e6,  # from the disk, not the page cache
        "step_us": lat[len(lat) // 2] * 1e6,
        "step_p90_us": lat[int(len(lat) * 0.9)] * 1e6,
        "store": type(trace.store).__name__,
    }


def run(kind: str, path: Path, cache: Path) -> dict[str, Any]:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "XDG_CACHE_HOME": str(cache)}
    out = subprocess.run(
        [PY, __file__, "--worker", kind, str(path)], env=env, capture_output=True, text=True, check=False
    )
    if out.returncode:
        raise SystemExit(f"{kind} failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def sidecars(link: Path, cache: Path) -> list[Path]:
    return [p for p in (link.with_name(link.name + ".ssidx"), *cache.glob("**/*.ssidx")) if p.exists()]


def compress(src: Path, dir: Path) -> tuple[Path, Path]:
    """(one member, several members) gzip copies of `src`."""
    import gzip

    from tracer.record.writer import GzipMemberSink

    one, many = dir / "one.jsonl.gz", dir / "many.jsonl.gz"
    with open(src, "rb") as f, gzip.open(one, "wb", compresslevel=3) as g:
        while chunk := f.read(1 << 24):
            g.write(chunk)
    with open(src, "rb") as f, open(many, "wb", buffering=0) as raw:
        sink = GzipMemberSink(raw)
        for line in f:  # record by record, as the writer gives them
            sink.write(line)
        sink.close()
    return one, many


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("trace", nargs="?", type=Path, help="a plain .jsonl trace (default: generate one)")
    ap.add_argument("--dir", type=Path, help="scratch directory (default: a temporary one)")
    ap.add_argument("--steps", type=int, default=20_000, help="steps of a generated trace")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--gz", action="store_true", help="also time single- and multi-member gzip copies")
    ap.add_argument("--quick", action="store_true", help="3,000 generated steps, 2 repetitions, --gz")
    ap.add_argument("--worker", nargs=2, metavar=("KIND", "PATH"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        print(json.dumps(worker(args.worker[0], Path(args.worker[1]))))
        return
    if args.quick:
        args.steps, args.reps, args.gz = 3_000, 2, True
    with tempfile.TemporaryDirectory(prefix="reader_scale_") as tmp:
        scratch = args.dir or Path(tmp)
        scratch.mkdir(parents=True, exist_ok=True)
        cache = scratch / "cache"
        src = args.trace
        if src is None:
            src = scratch / f"gen_{args.steps}.jsonl"
            if not src.exists():
                # --no-index: the first load must parse (no recording index beside the trace).
                gen = [str(BENCH / "gen_trace.py"), str(src), "--steps", str(args.steps), "--no-index"]
                gen += [
                    "--max-running",
                    "256",
                    "--arrival-rate",
                    "3",
                    "--kv-blocks",
                    "200000",
                    "--budget",
                    "8192",
                ]
                subprocess.run([PY, *gen], check=True, capture_output=True)
        link = scratch / src.name
        if link.resolve() != src.resolve():
            link.unlink(missing_ok=True)
            link.symlink_to(src.resolve())
        size = src.stat().st_size
        print(f"{machine()}\ntrace: {src} ({size / 1e6:,.1f} MB)")
        results: dict[str, list[dict[str, Any]]] = {k: [] for k in VARIANTS}
        for rep in range(args.reps):
            for kind in VARIANTS:
                if kind == "first":
                    for p in sidecars(link, cache):
                        p.unlink()
                results[kind].append(r := run(kind, link, cache))
                print(
                    f"  rep {rep + 1} {kind:>8}: {r['load_s']:7.2f} s (CPU {r['cpu_s']:6.2f} s)  "
                    f"{size / 1e6 / r['cpu_s']:7.1f} MB/s  "
                    f"peak RSS {r['rss'] / 1e6:8.1f} MB ({r['rss'] / size:.3f}x file)  "
                    f"step {r['step_us']:7.1f} us (p90 {r['step_p90_us']:.1f})  {r['store']}  "
                    f"disk {r['read_mb']:.0f} MB",
                    flush=True,
                )
        made = sidecars(link, cache)
        print(f"sidecar: {', '.join(f'{p} ({p.stat().st_size / 1e6:.1f} MB)' for p in made)}")

        def ratio(a: str, b: str, key: str) -> list[float]:
            return [x[key] / y[key] for x, y in zip(results[a], results[b], strict=True)]

        rss = ratio("windowed", "whole", "rss")
        speed = ratio("whole", "windowed", "cpu_s")  # MB/s windowed / whole
        wall = ratio("whole", "windowed", "load_s")
        reopen = ratio("first", "reopen", "load_s")
        step = ratio("windowed", "whole", "step_us")
        last = results["windowed"][-1]["rss"] / size
        print(f"peak RSS windowed/whole: {fmt_spread(rss)}; windowed/file: {last:.3f}x")
        print(f"MB/s windowed/whole: {fmt_spread(speed)} by CPU time, {fmt_spread(wall)} by wall time")
        print(f"first load / re-open with sidecar: {fmt_spread(reopen, digits=1)}")
        print(f"Trace.step latency windowed/whole: {fmt_spread(step)}")
        if args.gz:
            one, many = compress(src, scratch)
            gz: dict[str, list[dict[str, Any]]] = {"one": [], "many": []}
            for rep in range(args.reps):
                for name, path in (("one", one), ("many", many)):
                    gz[name].append(r := run("windowed", path, cache))
                    print(
                        f"  rep {rep + 1} gz {name:>4}: {r['load_s']:7.2f} s  "
                        f"peak RSS {r['rss'] / 1e6:8.1f} MB  "
                        f"step {r['step_us']:7.1f} us  {r['store']}",
                        flush=True,
                    )
            g_rss = [a["rss"] / b["rss"] for a, b in zip(gz["many"], gz["one"], strict=True)]
            g_speed = [b["load_s"] / a["load_s"] for a, b in zip(gz["many"], gz["one"], strict=True)]
            print(f"gz members/one member: peak RSS {fmt_spread(g_rss)}, speed {fmt_spread(g_speed)}")
        med = sorted(rss)[len(rss) // 2]
        print(
            f"Reader scale figure: peak RSS {med:.3f}x of today's on a {size / 1e6:,.0f} MB trace, "
            f"{sorted(speed)[len(speed) // 2]:.2f}x its MB/s; re-open with sidecar "
            f"{sorted(reopen)[len(reopen) // 2]:.0f}x faster than the first load"
        )


if __name__ == "__main__":
    main()
