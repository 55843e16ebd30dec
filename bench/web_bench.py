#!/usr/bin/env python3
"""Web app on a 1M-step trace: first figure, zoom re-decimation, points sent.

Targets (issue 7): first figure ready server-side ≤ 2 s; each zoom /
re-decimation callback ≤ 300 ms; ≤ ~4k points per trace sent.

What is timed is the server side of each callback, as Dash runs it: the
Handlers method plus the JSON encoding of its output (dash's to_json), on an
already loaded trace. Loading the file is the reader's job and is reported
beside it, not counted. "First figure" is everything the app does with a fresh
Trace: budget analysis and flags (tracer), the chart, the figure, its JSON.

The trace comes from bench/gen_trace.py (a busy ngram server: preemptions,
a waiting queue) when that script is present, else from the DFlash sample
trace tiled to N steps (every prefill step flagged). Reuse a file with --trace.

    .venv/bin/python bench/web_bench.py                      # 1,000,000 steps
    .venv/bin/python bench/web_bench.py --steps 100000 --rounds 5
    .venv/bin/python bench/web_bench.py --trace /tmp/trace.jsonl
    .venv/bin/python bench/web_bench.py --tiled                # 571k flags: marker thinning
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import orjson  # noqa: E402
from dash._utils import to_json  # noqa: E402

from tracer.trace.reader import load  # noqa: E402
from web import layout as ids  # noqa: E402
from web.callbacks import Handlers, wire  # noqa: E402
from web.model import TraceView  # noqa: E402
from web.store import TraceStore  # noqa: E402

FIRST_FIGURE_S = 2.0
ZOOM_S = 0.300
POINTS = 4000


def make_trace(path: Path, steps: int, tiled: bool) -> str:
    gen = ROOT / "bench" / "gen_trace.py"
    if gen.exists() and not tiled:
        subprocess.run([sys.executable, str(gen), str(path), "--steps", str(steps)], check=True)
        return "bench/gen_trace.py (ngram K=3 server: arrivals, chunked prefills, preemptions)"
    sample = ROOT / "sample_traces" / "dflash_k7_additive.jsonl"
    records = [orjson.loads(line) for line in sample.read_bytes().splitlines() if line.strip()]
    steps_in = [r for r in records if r["kind"] == "step"]
    with path.open("wb") as f:
        f.write(orjson.dumps(records[0]) + b"\n")
        for i in range(steps):
            f.write(orjson.dumps({**steps_in[i % len(steps_in)], "step": i + 1}) + b"\n")
    return f"{sample.name} tiled to {steps} steps"


def timed(fn: Callable[[], Any], rounds: int) -> tuple[list[float], Any]:
    times, out = [], None
    for _ in range(rounds):
        t = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t)
    return times, out


def spread(values: list[float], unit: float = 1000.0, suffix: str = " ms") -> str:
    return (
        f"median {statistics.median(values) * unit:.0f}{suffix} "
        f"(min {min(values) * unit:.0f}, max {max(values) * unit:.0f}, n={len(values)})"
    )


def points(payload: dict[str, Any]) -> int:
    """Largest number of x values any one trace carries in a figure or a Patch."""
    if "operations" in payload:
        return max(
            (len(op["params"]["value"]) for op in payload["operations"] if op["location"][-1] == "x"),
            default=0,
        )
    return max((len(t.get("x", ())) for t in payload["data"]), default=0)


def _prefix(path: Path, steps: int, more: int) -> tuple[bytes, list[bytes]]:
    """The trace's records up to `steps` steps, then each of the next `more` steps' records."""
    head, tail, n = [], [], 0
    with path.open("rb") as f:
        for line in f:
            n += line.startswith(b'{"kind":"step"')
            if n > steps + more:
                break
            if n <= steps:
                head.append(line)
            elif line.startswith(b'{"kind":"step"') or not tail:
                tail.append(line)
            else:
                tail[-1] += line  # runner records ride with their step
    return b"".join(head), tail


def live(path: Path, steps: int, rounds: int, per_tick: int = 100) -> None:
    """--follow: a file of `steps` steps grows by `per_tick` steps between ticks. Timed: from
    the append to the new snapshot in the store (the source's thread: a poll of at most 5 ms,
    read, parse, build, analyze + detect), the first tick's Patch (re-decimates a full view)
    and the next ones (extend)."""
    import tempfile

    from tracer.trace.source import TraceSource
    from web.follow import StoreFeed

    def published(store: TraceStore, rows: int) -> None:
        """Wait until the store's live view holds `rows` steps (every step appended)."""
        while (view := store.get("live")) is None or len(view) < rows:
            time.sleep(0.001)

    head, tail = _prefix(path, steps, 4 * per_tick)
    snap, first, later, first_kib, later_kib = [], [], [], 0.0, 0.0
    with tempfile.TemporaryDirectory() as tmp:
        file = Path(tmp) / "live.jsonl"
        for _ in range(rounds):
            file.write_bytes(head)
            store = TraceStore()
            feed = StoreFeed(TraceSource.follow(file, poll=0.005, interval=0.0), store, "live", "live: ")
            feed.start()
            rows = head.count(b'{"kind":"step"')
            published(store, rows)
            h = Handlers(store)
            _, state, *_ = h.timeline(None, "live", None, None, None, [])
            for k in range(4):
                t = time.perf_counter()
                with file.open("ab") as f:
                    f.write(b"".join(tail[k * per_tick : (k + 1) * per_tick]))
                rows += per_tick
                published(store, rows)
                snap.append(time.perf_counter() - t)
                t = time.perf_counter()
                patch, state, *_ = h.timeline(ids.TICK, "live", None, None, state, [])
                payload = to_json(wire(patch))
                (first if k == 0 else later).append(time.perf_counter() - t)
                if k == 0:
                    first_kib = max(first_kib, len(payload) / 1024)
                else:
                    later_kib = max(later_kib, len(payload) / 1024)
            feed.stop()
    print(
        f"live, {steps:,} steps, +{per_tick} per tick: append to snapshot {spread(snap)}; "
        f"first tick {spread(first)}, ≤{first_kib:.0f} KiB; later ticks {spread(later)}, ≤{later_kib:.0f} KiB"
    )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=1_000_000)
    ap.add_argument("--trace", type=Path, help="use this trace instead of generating one")
    ap.add_argument("--rounds", type=int, default=5, help="repetitions per measurement")
    ap.add_argument("--tiled", action="store_true", help="tile the DFlash sample (flag-heavy) instead")
    ap.add_argument(
        "--live-steps",
        type=int,
        nargs="*",
        default=[10_000, 100_000],
        help="followed-file sizes for the live section (default 10000 100000)",
    )
    args = ap.parse_args(argv)

    source = "given"
    path = args.trace
    if path is None:
        kind = "tiled" if args.tiled else "gen"
        path = Path(os.environ.get("TMPDIR", "/tmp")) / f"schedscope-web-bench-{kind}-{args.steps}.jsonl"
        source = make_trace(path, args.steps, args.tiled) if not path.exists() else f"reused {path}"
    cpu = platform.processor() or platform.machine()
    print(f"machine: {cpu}, {os.cpu_count()} CPUs, Python {platform.python_version()}")
    print(f"trace:   {path} ({path.stat().st_size / 2**20:,.0f} MiB; {source})")

    t = time.perf_counter()
    trace = load(path)
    print(f"load:    {time.perf_counter() - t:.1f} s for {len(trace):,} steps (reader; not counted below)")

    # First figure: a fresh Trace -> model (tracer) -> figure -> JSON, as the first page load.
    def first() -> tuple[str, dict[str, Any]]:
        store = TraceStore()
        store.put(TraceView.build("a", "A", trace))
        fig, state, *_ = Handlers(store).timeline(None, "a", None, None, None, None)
        return to_json(wire(fig)), state

    first_times, (fig_json, state) = timed(first, args.rounds)
    t = time.perf_counter()
    view = TraceView.build("a", "A", trace)
    model_s = time.perf_counter() - t
    fig_points = points(orjson.loads(fig_json))
    print(
        f"first figure: {spread(first_times)}; of which tracer analyze+detect {model_s * 1000:.0f} ms; "
        f"{len(fig_json) / 1024:.0f} KiB JSON, ≤{fig_points} points per trace; "
        f"{len(view.report.flags):,} flags"
    )

    store = TraceStore()
    store.put(view)
    h = Handlers(store)

    def page_load() -> str:  # `schedscope web` builds the view at start: a page load is this
        view.cache.clear()
        fig, *_ = h.timeline(None, "a", None, None, None, None)
        return to_json(wire(fig))

    times, _ = timed(page_load, args.rounds)
    print(f"first figure of a running app (page load: chart, figure, JSON): {spread(times)}")
    last = float(view.steps[-1])
    zooms = {
        "reset (whole trace)": {"xaxis.autorange": True},
        "half": {"xaxis.range[0]": last * 0.25, "xaxis.range[1]": last * 0.75},
        "10%": {"xaxis.range[0]": last * 0.40, "xaxis.range[1]": last * 0.50},
        "1%": {"xaxis.range[0]": last * 0.50, "xaxis.range[1]": last * 0.51},
        "2,000 steps": {"xaxis.range[0]": last / 2, "xaxis.range[1]": last / 2 + 2_000},
        "100 steps": {"xaxis.range[0]": last / 3, "xaxis.range[1]": last / 3 + 100},
    }
    worst, most = 0.0, fig_points
    for name, relayout in zooms.items():

        def zoom(relayout: dict[str, Any] = relayout) -> str:
            patch, *_ = h.timeline(ids.GRAPH, "a", relayout, None, state, None)
            return to_json(wire(patch))

        times, payload = timed(zoom, args.rounds)
        n = points(orjson.loads(payload))
        worst, most = max(worst, max(times)), max(most, n)
        print(f"zoom {name:>20}: {spread(times)}; {len(payload) / 1024:.0f} KiB, ≤{n} points per trace")

    def jump() -> str:
        zoomed = {**state, "range": [10.0, 2010.0]}
        patch, *_ = h.timeline(ids.SELECTED, "a", None, {"key": "a", "step": int(last * 0.9)}, zoomed, None)
        return to_json(wire(patch))

    times, payload = timed(jump, args.rounds)
    worst = max(worst, max(times))
    print(
        f"jump to a step (re-decimates): {spread(times)}; ≤{points(orjson.loads(payload))} points per trace"
    )

    for n in args.live_steps:
        live(path, n, args.rounds)

    ok_first = statistics.median(first_times) <= FIRST_FIGURE_S
    ok_zoom = worst <= ZOOM_S
    ok_points = most <= POINTS
    print(
        f"targets: first figure ≤{FIRST_FIGURE_S:.0f} s {'met' if ok_first else 'MISSED'}; "
        f"zoom ≤{ZOOM_S * 1000:.0f} ms (worst {worst * 1000:.0f}) {'met' if ok_zoom else 'MISSED'}; "
        f"≤{POINTS} points per trace (max {most}) {'met' if ok_points else 'MISSED'}"
    )
    return 0 if ok_first and ok_zoom and ok_points else 1


if __name__ == "__main__":
    sys.exit(main())
