#!/usr/bin/env python3
"""P2: trace ingest. tracer.trace.reader.load against a bare orjson loop and pandas.

On a generated trace in the real format (bench/gen_trace.py, 1,000,000 steps by
default, cached under --dir), each contender runs in its own subprocess, so
each peak RSS is its own; the contenders alternate within each repetition and
every ratio is the median over repetitions:

- orjson: `for line in open(path, "rb"): orjson.loads(line)` (gzip.open for .gz),
  the floor any JSON Lines reader pays;
- reader: `tracer.trace.reader.load(path)`, columns and runner join included;
- pandas: `pandas.read_json(path, lines=True)`, on the first --pandas-steps
  steps (default 100,000; its memory grows several times faster than the
  file), against the reader on that same file.

Times exclude interpreter start-up and imports. Ratios use each subprocess's
CPU time (the work is single-threaded, so on an idle machine it equals wall
time; on a shared one it leaves out the waits for a core); wall time is shown
beside it. MB/s is decompressed bytes per CPU second. Peak RSS is the
subprocess's ru_maxrss (imports included) and is also given against the
file's size.

    .venv/bin/python bench/p2_ingest.py            # 1M steps, plain and .gz
    .venv/bin/python bench/p2_ingest.py --quick    # 50k steps, 3 repetitions
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import BENCH, ROOT, first_steps, fmt_spread, machine, peak_rss_bytes, spread

PY = sys.executable


# -- worker side (one measurement per subprocess) -------------------------------------
def worker(kind: str, path: Path) -> dict[str, Any]:
    opener = gzip.open if path.suffix == ".gz" else open
    if kind == "orjson":
        import orjson

        def run() -> int:
            loads, n = orjson.loads, 0
            with opener(path, "rb") as f:
                for line in f:
                    loads(line)
                    n += 1
            return n

    elif kind == "reader":
        from tracer.trace.reader import load

        def run() -> int:
            return len(load(path))

    elif kind == "pandas":
        import pandas as pd

        def run() -> int:
            return len(pd.read_json(path, lines=True))

    else:
        raise SystemExit(f"unknown worker {kind}")
    base = peak_rss_bytes()
    wall, cpu = time.perf_counter(), time.process_time()
    n = run()
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    return {"kind": kind, "seconds": wall, "cpu": cpu, "items": n, "rss": peak_rss_bytes(), "rss_base": base}


def run_worker(kind: str, path: Path) -> dict[str, Any]:
    out = subprocess.run(
        [PY, str(Path(__file__).resolve()), "--worker", kind, str(path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


# -- driver ----------------------------------------------------------------------------
def ensure_trace(directory: Path, steps: int) -> Path:
    """The generated trace for `steps`, made once and reused (generation is the slow part)."""
    directory.mkdir(parents=True, exist_ok=True)
    # Named after the generator's source too: a changed generator makes a new file.
    version = hashlib.sha1((BENCH / "gen_trace.py").read_bytes()).hexdigest()[:8]
    path = directory / f"gen_{steps}_{version}.jsonl"
    if not path.exists():
        tmp = path.with_suffix(".tmp.jsonl")
        # --no-index: P2 times the parse, so the trace is an older one's, without a recording index.
        gen = [PY, str(BENCH / "gen_trace.py"), str(tmp), "--steps", str(steps), "--no-index"]
        subprocess.run(gen, check=True)
        tmp.rename(path)
    return path


def ensure_gz(path: Path) -> Path:
    gz = path.with_suffix(".jsonl.gz")
    if not gz.exists():
        tmp = gz.with_suffix(".tmp.gz")
        with open(path, "rb") as src, gzip.open(tmp, "wb", compresslevel=3) as dst:
            shutil.copyfileobj(src, dst, 1 << 22)  # the level the recorder writes .gz at
        tmp.rename(gz)
    return gz


def ensure_head(path: Path, steps: int) -> Path:
    """The first `steps` step records of `path` (header and runner records with them)."""
    return first_steps(path, steps, path.with_name(f"{path.stem}_head{steps}.jsonl"))


def compare(label: str, path: Path, kinds: list[str], reps: int, raw_size: int) -> dict[str, list]:
    """Alternate the contenders `reps` times; return their measurements per kind."""
    results: dict[str, list] = {k: [] for k in kinds}
    for rep in range(reps):
        order = kinds if rep % 2 == 0 else kinds[::-1]
        for kind in order:
            results[kind].append(run_worker(kind, path))
    size = path.stat().st_size
    print(f"  {label}: {path.name}, {size / 1e6:.1f} MB on disk, {raw_size / 1e6:.1f} MB of JSON Lines")
    for kind in kinds:
        cpu = [r["cpu"] for r in results[kind]]
        wall = spread([r["seconds"] for r in results[kind]])[1]
        rss = [r["rss"] for r in results[kind]]
        _, med, _ = spread(cpu)
        print(
            f"    {kind:7s} CPU {fmt_spread(cpu, ' s', 2)} (wall {wall:.2f} s), "
            f"{raw_size / med / 1e6:6.1f} MB/s, "
            f"peak RSS {spread(rss)[1] / 1e6:7.1f} MB ({spread(rss)[1] / size:.2f}x the file; "
            f"{spread([r['rss_base'] for r in results[kind]])[1] / 1e6:.0f} MB after imports), "
            f"{results[kind][0]['items']:,} items"
        )
    return results


def where_time_goes(path: Path, reps: int) -> dict[str, float]:
    """CPU seconds, in this process on `path` (already in memory), of: the bare loop;
    the same loop that also reads each record's kind and tracks byte offsets (what
    any reader with step detail must do at least); and tracer.trace.reader's TraceBuilder.
    The differences split the reader's time into parsing, bookkeeping and columns."""
    import io

    import orjson

    from tracer.trace.builder import TraceBuilder

    data = path.read_bytes()
    loads = orjson.loads

    def bare() -> None:
        for line in io.BytesIO(data):
            loads(line)

    def dispatch() -> None:
        pos = 0
        for line in io.BytesIO(data):
            r = loads(line)
            if r["kind"] == "step":
                pos += len(line)
            else:
                pos += len(line)

    def builder() -> None:
        b = TraceBuilder(path)
        b.feed(data)  # one bytes chunk: parsed in place, as load() does
        b.build(b.finish())

    out: dict[str, list[float]] = {"bare orjson loop": [], "+ kind and offsets": [], "TraceBuilder": []}
    for _ in range(reps):
        for name, fn in zip(out, (bare, dispatch, builder), strict=True):
            t0 = time.process_time()
            fn()
            out[name].append(time.process_time() - t0)
    return {name: spread(v)[1] for name, v in out.items()}


def ratios(results: dict[str, list], a: str, b: str) -> list[float]:
    """Per repetition, a's CPU time over b's: CPU time, not wall, so that waiting for a
    core on a shared machine does not count (the work is single-threaded)."""
    return [x["cpu"] / y["cpu"] for x, y in zip(results[a], results[b], strict=True)]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--worker", nargs=2, metavar=("KIND", "PATH"), help=argparse.SUPPRESS)
    ap.add_argument("--steps", type=int, default=1_000_000)
    ap.add_argument("--pandas-steps", type=int, default=100_000)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--dir", type=Path, default=Path(tempfile.gettempdir()) / "schedscope-bench")
    ap.add_argument("--no-gz", action="store_true", help="skip the .gz figures")
    ap.add_argument("--no-pandas", action="store_true", help="skip the pandas comparison")
    ap.add_argument("--profile", action="store_true", help="also split the reader's time (in-process)")
    ap.add_argument("--quick", action="store_true", help="50,000 steps, 3 repetitions")
    args = ap.parse_args(argv)
    if args.worker:
        print(json.dumps(worker(args.worker[0], Path(args.worker[1]))))
        return 0
    if args.quick:
        args.steps, args.pandas_steps, args.reps = 50_000, 50_000, 3
    try:
        import pandas  # noqa: F401
    except ImportError:
        args.no_pandas = True
        print("  (pandas is not installed: `pip install -e '.[bench]'` for the pandas comparison)")

    print(f"P2 trace ingest: {machine()}")
    path = ensure_trace(args.dir, args.steps)
    raw = path.stat().st_size
    steps = args.steps
    print(f"  trace: {steps:,} steps, {raw / steps:.0f} bytes per step (bench/gen_trace.py defaults)")
    plain = compare("plain", path, ["orjson", "reader"], args.reps, raw)
    gz_ratio: list[float] = []
    if not args.no_gz:
        gz = compare("gzip", ensure_gz(path), ["orjson", "reader"], args.reps, raw)
        gz_ratio = ratios(gz, "reader", "orjson")
    pandas_ratio: list[float] = []
    if not args.no_pandas:
        head = path if args.pandas_steps >= steps else ensure_head(path, args.pandas_steps)
        label = f"pandas ({min(args.pandas_steps, steps):,} steps)"
        versus = compare(label, head, ["reader", "pandas"], args.reps, head.stat().st_size)
        pandas_ratio = ratios(versus, "pandas", "reader")

    if args.profile or args.quick:
        head = path if steps <= 100_000 else ensure_head(path, 100_000)
        split = where_time_goes(head, args.reps)
        base = split["bare orjson loop"]
        print(f"  where the reader's time goes ({head.name}, in-process CPU, median of {args.reps}):")
        for name, secs in split.items():
            print(f"    {name:22s} {secs:6.2f} s  {secs / base:5.2f}x")

    reader_ratio = ratios(plain, "reader", "orjson")
    print(f"  reader / bare orjson loop, plain: {fmt_spread(reader_ratio, 'x', 2)}")
    if gz_ratio:
        print(f"  reader / bare orjson loop, .gz:   {fmt_spread(gz_ratio, 'x', 2)}")
    if pandas_ratio:
        print(f"  pandas.read_json / reader:        {fmt_spread(pandas_ratio, 'x', 1)}")
    med = spread(reader_ratio)[1]
    figure = (
        f"P2 figure: {steps:,}-step trace, reader {med:.2f}x a bare orjson loop (target <= 1.5x: "
        f"{'met' if med <= 1.5 else 'NOT met'})"
    )
    if pandas_ratio:
        pm = spread(pandas_ratio)[1]
        verdict = "met" if pm >= 5 else "NOT met"
        figure += f"; {pm:.1f}x faster than pandas.read_json (target >= 5x: {verdict})"
    print(figure)
    return 0


if __name__ == "__main__":
    sys.exit(main())
