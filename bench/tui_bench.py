#!/usr/bin/env python3
"""TUI: first frame and key-to-frame latency on a 1,000,000-step trace (issue 4's limits).

The trace comes from bench/gen_trace.py's simulated scheduler and tracer's own
Recorder, run with a DFlash K=7 config under vLLM 0.32's additive charge (7 draft
slots per request, 8 query rows), so the budget binds often and the trace has
additive-double-reservation flags to jump between; cached under --dir.

The app runs headless (Textual's run_test, 160x50) in this process:
- first frame: from make_app() to the main screen's first refresh (the loading view);
- first data frame: the first steps drawn (the file keeps loading in a thread);
- loaded: every step drawn, flags and all;
- key to frame: a key press, until the last frame it caused was written (the driver's
  display call; Pilot's own waits after that are not counted). Each key is pressed
  --reps times, the median is the figure, min and max beside it;
- memory: this process's RSS after loading, against tracer.trace.reader.load() alone in a
  subprocess, and against the trace's columnar arrays.

    .venv/bin/python bench/tui_bench.py             # 1M steps
    .venv/bin/python bench/tui_bench.py --quick     # 50k steps
    .venv/bin/python bench/tui_bench.py --trace FILE
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from _common import fmt_spread, machine, spread

FIRST_FRAME_LIMIT = 2.0
KEY_LIMIT_MS = 50.0
SIZE = (160, 50)


def rss_bytes() -> int:
    """Current resident set size (not the peak: loading's transient lists are gone)."""
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096


# -- the trace --------------------------------------------------------------------------
def ensure_dflash_trace(directory: Path, steps: int) -> Path:
    """The generated trace (made once in a subprocess, so its memory is not this process's)."""
    directory.mkdir(parents=True, exist_ok=True)
    # Named after the generator's source too (as p2_ingest does): a changed generator makes a new file.
    version = hashlib.sha1((Path(__file__).resolve().parent / "gen_trace.py").read_bytes()).hexdigest()[:8]
    path = directory / f"gen_dflash_k7_{steps}_{version}.jsonl"
    if not path.exists():
        tmp = path.with_suffix(".tmp.jsonl")
        subprocess.run([sys.executable, __file__, "--generate", str(tmp), str(steps)], check=True)
        tmp.rename(path)
    return path


def generate_dflash(path: Path, steps: int) -> None:
    """gen_trace's generator with DFlash K=7 under the additive charge."""
    import gen_trace

    slots, k = 7, 7

    class AdditiveDFlash(gen_trace.SimScheduler):  # type: ignore[misc,name-defined]
        def __init__(self, args: argparse.Namespace, draft_slots: int) -> None:
            super().__init__(args, slots)  # vLLM 0.32 charges K slots per request for DFlash

    def dflash_config(args: argparse.Namespace, draft_slots: int) -> dict[str, Any]:
        config = original_config(args, slots)
        config.update(
            spec_method="dflash", draft_slots=slots, query_rows_per_req=k + 1, num_lookahead_tokens=k + 1
        )
        return config

    # generate() reads both names from its module: swap them for this one run.
    original_config = gen_trace.engine_config
    gen_trace.SimScheduler, gen_trace.engine_config = AdditiveDFlash, dflash_config
    # --no-index: the load is the parse these figures have always timed (bench/recording_index_scale.py
    # times the load of a trace with its recording index).
    args = gen_trace.parser().parse_args([str(path), "--steps", str(steps), "--k", str(k), "--no-index"])
    gen_trace.generate(path, args)


def model_only(path: Path) -> dict[str, float]:
    """tracer alone, in a fresh interpreter: load() and detect() times, RSS after both, array sizes."""
    code = (
        "import json, sys, time; sys.path.insert(0, '.')\n"
        "from tracer.trace.reader import load; from tracer.analysis.flags import detect\n"
        f"t0 = time.perf_counter(); t = load({str(path)!r}); t1 = time.perf_counter()\n"
        "r = detect(t); t2 = time.perf_counter()\n"
        "rss = int(open('/proc/self/statm').read().split()[1]) * 4096\n"
        "cols = sum(a.nbytes for a in t.columns.values()) + sum(a.nbytes for a in t.runner.values())\n"
        "out = {'load': t1 - t0, 'detect': t2 - t1, 'rss': rss, 'columns': cols, 'raw': t.store.held}\n"
        "print(json.dumps(out))"
    )
    root = Path(__file__).resolve().parent.parent
    out = subprocess.run([sys.executable, "-c", code], cwd=root, capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


# -- the measurement ----------------------------------------------------------------------
async def measure(path: Path, reps: int) -> dict[str, Any]:
    from tui import make_app
    from tui.screens.main import MainScreen

    t0 = time.perf_counter()
    app = make_app(path)
    frames: list[float] = []
    display = app._display  # the driver write of each frame (private; a bench-only hook)

    def timed_display(*args: Any, **kwargs: Any) -> Any:
        result = display(*args, **kwargs)
        frames.append(time.perf_counter())
        return result

    app._display = timed_display  # type: ignore[method-assign]
    out: dict[str, Any] = {}
    async with app.run_test(size=SIZE) as pilot:
        while "loaded" not in app.marks and app.error is None:
            await pilot.pause(0.05)
        if app.error is not None:
            raise SystemExit(app.error)
        for mark in ("first_frame", "first_data_frame", "loaded"):
            out[mark] = app.marks[mark] - t0
        screen = app.screen_stack[0]
        assert isinstance(screen, MainScreen) and screen.model is not None
        out["steps"] = len(screen.model)
        out["flags"] = len(screen.model.report.flags)
        out["rss_after_load"] = rss_bytes()
        await pilot.pause(0.2)

        async def key(name: str) -> float:
            start = time.perf_counter()
            await pilot.press(name)
            caused = [t for t in frames if t > start]
            return (caused[-1] if caused else time.perf_counter()) - start

        # Start mid-run so every key has somewhere to go; zoom in first so pans move.
        screen.set_cursor(out["steps"] // 3)
        await pilot.pause()
        keys = {
            "cursor (right)": "right",
            "next flag (n)": "n",
            "previous flag (N)": "N",
            "zoom in (+)": "plus",
            "zoom out (-)": "minus",
            "pan ([)": "left_square_bracket",
        }
        times: dict[str, list[float]] = {label: [] for label in keys}
        for _ in range(reps):
            await pilot.press("plus", "plus")  # a window to pan in
            for label, name in keys.items():
                times[label].append(await key(name))
            await pilot.press("0")
        out["keys"] = times
        out["flag_steps_visited"] = screen.cursor
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=1_000_000)
    ap.add_argument("--reps", type=int, default=15)
    ap.add_argument("--trace", type=Path, help="measure this trace instead of the generated one")
    ap.add_argument("--dir", type=Path, default=Path(tempfile.gettempdir()) / "schedscope-bench")
    ap.add_argument("--quick", action="store_true", help="50,000 steps, 5 repetitions")
    ap.add_argument("--generate", nargs=2, metavar=("PATH", "STEPS"), help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.generate:
        generate_dflash(Path(args.generate[0]), int(args.generate[1]))
        return 0
    if args.quick:
        args.steps, args.reps = 50_000, 5

    print(f"TUI bench: {machine()}")
    path = args.trace or ensure_dflash_trace(args.dir, args.steps)
    print(f"  trace: {path} ({path.stat().st_size / 1e6:.0f} MB)")
    load_before = os.getloadavg()[0]
    result = asyncio.run(measure(path, args.reps))
    base = model_only(path)
    # Other processes on the machine inflate every figure: say how busy it was.
    print(f"  load average {load_before:.1f} before, {os.getloadavg()[0]:.1f} after ({os.cpu_count()} CPUs)")
    print(f"  {result['steps']:,} steps, {result['flags']:,} flags, terminal {SIZE[0]}x{SIZE[1]} (headless)")
    print(
        f"  first frame {result['first_frame']:.2f} s (limit {FIRST_FRAME_LIMIT:.0f} s: "
        f"{result['first_frame'] / FIRST_FRAME_LIMIT:.2f}x of it); first data frame "
        f"{result['first_data_frame']:.2f} s ({result['first_data_frame'] / FIRST_FRAME_LIMIT:.2f}x); "
        f"every step loaded {result['loaded']:.1f} s, against tracer.trace.reader.load() "
        f"{base['load']:.1f} s + flags.detect() {base['detect']:.1f} s alone "
        f"({result['loaded'] / (base['load'] + base['detect']):.2f}x)"
    )
    medians = {}
    for label, values in result["keys"].items():
        ms = [v * 1000 for v in values]
        medians[label] = spread(ms)[1]
        share = medians[label] / KEY_LIMIT_MS
        print(f"  key to frame, {label:<18} {fmt_spread(ms, ' ms', 1)} ({share:.2f}x of 50 ms)")
    mb = 1e6
    tui_rss = result["rss_after_load"]
    print(
        f"  memory after load: TUI process {tui_rss / mb:.0f} MB; tracer load() + detect() alone "
        f"{base['rss'] / mb:.0f} MB ({tui_rss / base['rss']:.2f}x); the trace's columnar arrays "
        f"{base['columns'] / mb:.0f} MB, its raw bytes (kept by the reader) {base['raw'] / mb:.0f} MB"
    )
    worst = max(medians.values())
    ok = result["first_data_frame"] <= FIRST_FRAME_LIMIT and worst <= KEY_LIMIT_MS
    print(
        f"TUI {result['steps']:,} steps: first frame {result['first_frame']:.2f} s, first data frame "
        f"{result['first_data_frame']:.2f} s (limit 2 s); key to frame median worst {worst:.1f} ms "
        f"(limit 50 ms): {'within' if ok else 'OVER'} the limits"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
