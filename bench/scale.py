#!/usr/bin/env python3
"""Traces at production scale: every figure of the issue's limits, measured in one run.

Traces: 256 running requests from bench/gen_trace.py. The 200,000-step figures use
--trace (default /work/big/t200k.jsonl); the smaller sizes of the fit are its first N
steps, copied once under --dir (a prefix of a gen_trace run: no footer).

Each figure is timed from what the user does, never after an excluded load:
- `schedscope summary` / `flags` / `diff A B`: the command as a subprocess, from its
  start to its exit; peak RSS from the kernel (wait4). Here `diff` runs each smaller trace
  against itself (both sides loaded and analysed, as for two traces) on a first open, for the
  fit; bench/diff_scale.py measures the diff of two 200k traces, first open and re-open;
- first full load: `tracer.trace.reader.load()` in a fresh interpreter (MB/s over the
  file's bytes, wall time; peak RSS / file size), and the same for the baseline reader
  (`git archive BASELINE tracer`), the limit being "no slower than today";
- re-open with a sidecar (only when tracer/trace/sidecar.py exists): a fresh interpreter's
  start to `load(..., sidecar=True)` plus the budget analysis and series of the whole run,
  the sidecar written by an excluded first open;
- TUI (bench/tui_bench.py's `measure`, headless 160x50) in its own process: first data
  frame from make_app(), key to frame medians, peak RSS;
- web: `schedscope web TRACE` started as a subprocess, Debian's headless chromium opens
  the page (the browser itself starts before, excluded); first figure drawn (the timeline's
  traces hold data, seen by a check the page runs every 2 ms between its tasks) from the
  command's start; zoom = Plotly.relayout until the server's
  re-decimated data is in the figure; the server's peak RSS (VmHWM);
- 1,000,000 steps: each figure fitted as a + b·steps (least squares over the sizes
  measured) and evaluated at 1M; the fit's points are printed.

    .venv/bin/python bench/scale.py                       # about 20 min on 2 busy cores
    .venv/bin/python bench/scale.py --sizes 25000 50000 --no-web --no-tui   # a quick look
    .venv/bin/python bench/scale.py --web-only                            # the web figures alone
    .venv/bin/python bench/scale.py --web-only --recording-index   # the same, its recording index read
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import json
import os
import re
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import ROOT, first_steps, machine

PY = sys.executable
BASELINE = "7aea626"  # the reader and analysis before the production-scale work
CLI = "import sys; from tracer.cli import main; sys.exit(main(sys.argv[1:]))"
MB = 1e6


class Table:
    def __init__(self) -> None:
        self.rows: list[tuple[str, str, str, str]] = []

    def add(self, figure: str, limit: str, measured: str, met: bool | None) -> None:
        verdict = "n/a" if met is None else ("met" if met else "MISSED")
        self.rows.append((figure, limit, measured, verdict))
        print(f"  {figure}: {measured} (limit {limit}: {verdict})", flush=True)

    def print(self) -> None:
        heads = ("figure", "limit", "measured", "met/missed")
        widths = [max(len(h), *(len(r[i]) for r in self.rows)) for i, h in enumerate(heads)]
        line = "  ".join(h.ljust(w) for h, w in zip(heads, widths, strict=True))
        print("\n" + line + "\n" + "-" * len(line))
        for r in self.rows:
            print("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)))


def env_for(tracer_dir: Path, *, sidecar: bool = False) -> dict[str, str]:
    """A child's environment: every figure but the re-open is a first open (no sidecar read
    or written), so an earlier measurement's sidecar never speeds up a later one. Python
    keeps its bytecode as on a user's machine: a PYTHONDONTWRITEBYTECODE=1 in the bench's
    own environment (some sandboxes set it) would compile every module on every run, about
    0.2 s of each figure that no user pays (`warm` runs each tree once first)."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    return {**env, "PYTHONPATH": str(tracer_dir), "SCHEDSCOPE_SIDECAR": "on" if sidecar else "off"}


def warm(tracer_dir: Path) -> None:
    """Run `tracer_dir`'s CLI once, untimed, so its bytecode is cached before any figure."""
    sample = ROOT / "sample_traces" / "live_cpu_ngram.jsonl"
    subprocess.run(
        [PY, "-m", "tracer.cli", "summary", str(sample)], env=env_for(tracer_dir), cwd=tracer_dir,
        capture_output=True, check=True,
    )  # fmt: skip


def run(args: list[str], env: dict[str, str] | None = None, cwd: Path = ROOT) -> tuple[float, int, str]:
    """(wall s, peak RSS bytes, stdout) of one subprocess, from its start to its exit."""
    with tempfile.TemporaryFile() as out:
        t0 = time.perf_counter()
        p = subprocess.Popen(args, stdout=out, stderr=subprocess.PIPE, env=env or env_for(ROOT), cwd=cwd)
        _, status, usage = os.wait4(p.pid, 0)
        wall = time.perf_counter() - t0
        p.returncode = os.waitstatus_to_exitcode(status)
        err = p.stderr.read().decode() if p.stderr else ""
        if p.returncode != 0:
            raise SystemExit(f"{' '.join(args[:4])}... failed ({p.returncode}): {err[-2000:]}")
        out.seek(0)
        return wall, usage.ru_maxrss * 1024, out.read().decode()


# -- traces ---------------------------------------------------------------------------------
def prefix(source: Path, steps: int, directory: Path) -> Path:
    """The first `steps` steps of `source` (and the records before the next step), made once."""
    return first_steps(source, steps, directory / f"{source.stem}.first{steps}.jsonl")


def baseline_tracer(directory: Path, rev: str) -> Path:
    out = directory / f"baseline-{rev}"
    if not (out / "tracer").exists():
        out.mkdir(parents=True, exist_ok=True)
        archive = subprocess.run(
            ["git", "-C", str(ROOT), "archive", rev, "tracer"], capture_output=True, check=True
        )
        subprocess.run(["tar", "-x", "-C", str(out)], input=archive.stdout, check=True)
    return out


# -- children (run in their own interpreter: their RSS is their own) ----------------------
LOAD_CHILD = (
    "import json, sys, time; from tracer.trace.reader import load\n"
    "t = time.perf_counter(); tr = load(sys.argv[1]); dt = time.perf_counter() - t\n"
    "print(json.dumps({'load_s': dt, 'steps': len(tr)}))"
)
SIDECAR_CHILD = (
    "import json, sys, time; from tracer.trace.reader import load\n"
    "from tracer.analysis.budget import analyze; from tracer.analysis.series import step_series\n"
    "tr = load(sys.argv[1], sidecar=True); step_series(tr, analyze(tr))\n"
    "print(json.dumps({'ready': time.time(), 'steps': len(tr)}))"
)


def tui_child(path: Path, reps: int) -> None:
    import resource

    import tui_bench

    out = asyncio.run(tui_bench.measure(path, reps))
    out["peak_rss"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    print(json.dumps(out))


# -- the web app in a browser ---------------------------------------------------------------
DRAWN_JS = """
const gd = document.querySelector('#timeline .js-plotly-plot');
return !!(gd && gd.data && gd.data.some(t => t.x && t.x.length > 0));
"""
# Installed before the page's own scripts: the wall-clock time (ms since the epoch) at which the
# timeline first holds data, checked between the page's tasks. The driver's own poll (DRAWN_JS)
# waits behind whatever the page runs next (the other panels' first callbacks), up to 0.6 s late.
DRAWN_AT_JS = """
const watch = setInterval(() => {
  const gd = document.querySelector('#timeline .js-plotly-plot');
  if (gd && gd.data && gd.data.some(t => t.x && t.x.length > 0)) {
    window.__drawnAt = performance.timeOrigin + performance.now();
    clearInterval(watch);
  }
}, 2);
"""
LAST_STEP_JS = """
const gd = document.querySelector('#timeline .js-plotly-plot');
let last = 0;
for (const t of gd.data) { if (t.x && t.x.length) { last = Math.max(last, t.x[t.x.length - 1]); } }
return last;
"""
# Zoom as a user's drag does (relayout), then wait until the server's data replaced the
# figure's: the first line trace's x values change.
# Count the app's callback responses, to tell the server's part of a zoom from the drawing.
SPY_JS = """
window.__responses = 0;
const orig = window.fetch;
window.fetch = async function(...args) {
  const r = await orig.apply(this, args);
  if (String(args[0]).includes('_dash-update-component')) { window.__responses += 1; }
  return r;
};
"""
ZOOM_JS = """
const [lo, hi, done] = arguments;
const gd = document.querySelector('#timeline .js-plotly-plot');
const line = gd.data.findIndex(t => t.x && t.x.length > 1);
const key = () => { const x = gd.data[line].x; return JSON.stringify([x.length, x[0], x[x.length - 1]]); };
const before = key();
const responses = window.__responses;
let answered = null;
const t0 = performance.now();
Plotly.relayout(gd, {'xaxis.range[0]': lo, 'xaxis.range[1]': hi});
const poll = () => {
  const now = performance.now();
  if (answered === null && window.__responses > responses) { answered = now - t0; }
  if (key() !== before) { done([now - t0, answered === null ? now - t0 : answered]); }
  else if (now - t0 > 30000) { done([-1, -1]); }
  else { setTimeout(poll, 2); }
};
poll();
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def vm_hwm(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    return 0


def last_step(path: Path) -> int:
    """The number of the file's last step record, read from its tail (plain files)."""
    with path.open("rb") as f:
        f.seek(max(0, path.stat().st_size - (4 << 20)))
        tail = f.read()
    steps = re.findall(rb'"kind":"step","step":(\d+)', tail)
    if not steps:
        raise SystemExit(f"{path}: no step record in its last 4 MiB")
    return int(steps[-1])


def web_figures(path: Path, zooms: int, *, recording_index: bool = False) -> dict[str, Any]:
    from selenium import webdriver
    from selenium.webdriver.chrome.options import Options
    from selenium.webdriver.chrome.service import Service

    sys.path.insert(0, str(ROOT))
    from tests.web.conftest import CHROMIUM_FLAGS

    options = Options()
    options.binary_location = "/usr/bin/chromium"
    for flag in (*CHROMIUM_FLAGS, "--headless"):
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service("/usr/bin/chromedriver"), options=options)
    driver.set_script_timeout(60)
    port = free_port()
    server = None
    driver.execute_cdp_cmd("Page.addScriptToEvaluateOnNewDocument", {"source": DRAWN_AT_JS})
    try:
        t0, t0_epoch = time.perf_counter(), time.time()
        server = subprocess.Popen(
            [PY, "-c", CLI, "web", str(path), "--port", str(port)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            env=env_for(ROOT, sidecar=recording_index),
            cwd=ROOT,
        )
        while True:  # the page can be asked for once the server listens
            if server.poll() is not None:
                raise SystemExit("schedscope web exited before serving")
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                break
            except OSError:
                time.sleep(0.02)
        served = time.perf_counter() - t0
        driver.get(f"http://127.0.0.1:{port}/")
        while not driver.execute_script(DRAWN_JS):
            if time.perf_counter() - t0 > 600:
                raise SystemExit("no figure drawn in 10 minutes")
            time.sleep(0.01)
        polled = time.perf_counter() - t0
        drawn = float(driver.execute_script("return window.__drawnAt")) / 1000 - t0_epoch
        bundle = driver.execute_script(
            "return 'plotly.js ' + Plotly.version + "
            "(Plotly.PlotSchema.get().traces.scatter3d ? ' (full)' : ' (cartesian)')"
        )
        # Let the page's other first callbacks finish (Dash titles the page "Updating..." meanwhile).
        quiet = time.perf_counter()
        while time.perf_counter() - quiet < 1.0:
            if driver.title.startswith("Updating"):
                quiet = time.perf_counter()
            time.sleep(0.05)
        # Zoom the whole run: wait until the page holds the file's last step (the file is still
        # read while the first figure shows; the page's ticks stop once it is all shown).
        last = float(last_step(path))
        while float(driver.execute_script(LAST_STEP_JS)) < last and time.perf_counter() - t0 < 600:
            time.sleep(0.05)
        steady = time.perf_counter()
        time.sleep(1.0)  # the last tick's answer, and the page's other callbacks on it
        loaded = steady - t0
        driver.execute_script(SPY_JS)
        times, answers = [], []
        for j in range(zooms):
            frac = (0.5, 0.1, 0.01, 0.002, 0.25)[j % 5]
            lo = last * (0.2 + 0.1 * (j % 3))
            drawn_ms, answered_ms = driver.execute_async_script(ZOOM_JS, lo, lo + last * frac)
            times.append(float(drawn_ms))
            answers.append(float(answered_ms))
            driver.execute_async_script(ZOOM_JS, 0, last)  # back out (not counted)
        return {
            "served": served,
            "drawn": drawn,
            "polled": polled,
            "bundle": bundle,
            "loaded": loaded,
            "zoom_ms": times,
            "answer_ms": answers,
            "server_rss": vm_hwm(server.pid),
        }
    finally:
        driver.quit()
        if server is not None:
            server.terminate()
            server.wait(10)


def add_web_figures(table: Table, big: Path, zooms: int, size: str, *, recording_index: bool = False) -> None:
    """The web figures of `big` (bench's docstring), as rows of `table`."""
    if recording_index:  # a just-recorded trace: its recording index read, no sidecar an earlier run derived
        for derived in big.parent.glob(f"{big.name}.*.ssidx"):
            derived.unlink()
        size += ", recording index read"
    web = web_figures(big, zooms, recording_index=recording_index)
    # -1: the zoom's data never arrived within 30 s
    zoom = sorted(ms if ms >= 0 else float("inf") for ms in web["zoom_ms"])
    table.add(
        f"web first figure drawn in chromium from `schedscope web`'s start ({size})",
        "≤ 2 s",
        f"{web['drawn']:.2f} s (server listening at {web['served']:.2f} s; the driver's poll saw it at "
        f"{web['polled']:.2f} s; every step shown at {web['loaded']:.1f} s; {web['bundle']})",
        web["drawn"] <= 2.0,
    )
    table.add(
        f"web zoom once every step is shown (relayout to re-decimated data drawn), worst of {len(zoom)}",
        "≤ 300 ms",
        f"{zoom[-1]:.0f} ms (median {zoom[len(zoom) // 2]:.0f} ms; the callback's response back after "
        f"{sorted(web['answer_ms'])[len(zoom) // 2]:.0f} ms median, the rest is the browser drawing)",
        zoom[-1] <= 300,
    )
    table.add("web server peak RSS", "≤ 1 GB", f"{web['server_rss'] / MB:,.0f} MB", web["server_rss"] <= 1e9)


# -- fitting --------------------------------------------------------------------------------
def fit(points: list[tuple[int, float]], at: int = 1_000_000) -> tuple[float, str]:
    """Least-squares line through (steps, value), evaluated at `at`; the method as text."""
    import numpy as np

    x = np.array([p[0] for p in points], dtype=float)
    y = np.array([p[1] for p in points], dtype=float)
    if len(points) < 2:
        return float("nan"), "one point: no fit"
    b, a = np.polyfit(x, y, 1)
    worst = max(abs((a + b * xi) - yi) / yi for xi, yi in zip(x, y, strict=True) if yi) * 100
    sizes = "/".join(f"{int(v / 1000)}k" for v in x)
    return float(a + b * at), f"linear fit a+b·n over {sizes} steps, worst residual {worst:.0f}%"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--trace", type=Path, default=Path("/work/big/t200k.jsonl"), help="the 200k-step trace")
    ap.add_argument(
        "--sizes", type=int, nargs="+", default=[25_000, 50_000, 100_000], help="fit sizes below it"
    )
    ap.add_argument("--dir", type=Path, default=Path("/tmp/scale-analysis"), help="prefixes, baseline")
    ap.add_argument(
        "--baseline", default=BASELINE, help=f"revision whose reader is 'today' (default {BASELINE})"
    )
    ap.add_argument("--reps", type=int, default=5, help="key presses per TUI key")
    ap.add_argument("--zooms", type=int, default=5)
    ap.add_argument(
        "--load-rounds", type=int, default=3, help="alternated loads, today's reader and this one"
    )
    ap.add_argument("--no-tui", action="store_true")
    ap.add_argument("--no-web", action="store_true")
    ap.add_argument("--web-only", action="store_true", help="only the web figures (about a minute)")
    ap.add_argument("--rounds", type=int, default=1, help="with --web-only: measure the web figures N times")
    ap.add_argument(
        "--recording-index",
        action="store_true",
        help="with --web-only: a just-recorded trace, its recording index (<trace>.ssidx) read rather "
        "than the file parsed (the derived sidecars of earlier runs removed first)",
    )
    ap.add_argument("--child", nargs="+", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        if args.child[0] == "tui":
            tui_child(Path(args.child[1]), int(args.child[2]))
        return 0

    args.dir.mkdir(parents=True, exist_ok=True)
    big = args.trace
    if args.web_only:
        table = Table()
        for r in range(args.rounds):  # a shared machine's noise: each round's figures, not a best
            print(f"round {r + 1} of {args.rounds}: load average {os.getloadavg()[0]:.1f}", flush=True)
            add_web_figures(table, big, args.zooms, big.name, recording_index=args.recording_index)
        table.print()
        return 0
    print(f"scale bench: {machine()}; load average {os.getloadavg()[0]:.1f}")
    print(f"  200k trace: {big} ({big.stat().st_size / MB:,.0f} MB)")
    paths = [prefix(big, n, args.dir) for n in sorted(args.sizes)] + [big]
    table = Table()

    # Commands, at every size (diff below the 200k trace: two of those would not fit).
    per: dict[str, list[tuple[int, float]]] = {}
    full_steps = 0
    for path in paths:
        size = path.stat().st_size
        wall, rss, out = run([PY, "-c", LOAD_CHILD, str(path)])
        n = full_steps = int(json.loads(out)["steps"])
        per.setdefault("load s", []).append((n, wall))
        per.setdefault("load RSS", []).append((n, rss))
        print(
            f"  {n:>7,} steps ({size / MB:,.0f} MB): load {wall:.1f} s, peak RSS {rss / MB:,.0f} MB",
            flush=True,
        )
        for cmd in ("summary", "flags"):
            wall, rss, _ = run([PY, "-c", CLI, cmd, str(path)])
            per.setdefault(f"{cmd} s", []).append((n, wall))
            per.setdefault(f"{cmd} RSS", []).append((n, rss))
            print(f"           {cmd}: {wall:.1f} s, peak RSS {rss / MB:,.0f} MB", flush=True)
        if path != big:
            wall, rss, _ = run([PY, "-c", CLI, "diff", str(path), str(path)])
            per.setdefault("diff s", []).append((n, wall))
            per.setdefault("diff RSS", []).append((n, rss))
            print(f"           diff (itself): {wall:.1f} s, peak RSS {rss / MB:,.0f} MB", flush=True)

    def at(key: str, n: int) -> float:
        return dict(per[key])[n]

    for cmd in ("summary", "flags"):
        table.add(
            f"`schedscope {cmd}`, {full_steps // 1000}k steps",
            "≤ 10 s",
            f"{at(f'{cmd} s', full_steps):.1f} s, peak RSS {at(f'{cmd} RSS', full_steps) / MB:,.0f} MB",
            at(f"{cmd} s", full_steps) <= 10,
        )
    diff_200k, how = fit(per["diff s"], full_steps)
    diff_rss, _ = fit(per["diff RSS"], full_steps)
    table.add(
        f"`schedscope diff A B`, {full_steps // 1000}k steps each (fitted: {how})",
        "≤ 10 s",
        f"{diff_200k:.1f} s, peak RSS {diff_rss / MB:,.0f} MB",
        diff_200k <= 10,
    )

    # First full load against today's reader (the baseline revision's tracer package):
    # alternated, the median of the rounds' ratios (other work on the machine moves both).
    size = big.stat().st_size
    base = baseline_tracer(args.dir, args.baseline)
    rounds: list[tuple[float, float, int, int]] = []
    for _ in range(args.load_rounds):
        wall_base, rss_base, _ = run([PY, "-c", LOAD_CHILD, str(big)], env=env_for(base), cwd=base)
        wall_now, rss_now, _ = run([PY, "-c", LOAD_CHILD, str(big)])
        rounds.append((wall_now, wall_base, rss_now, rss_base))
    ratios = sorted(b / a for a, b, _, _ in rounds)
    wall_now, wall_base, rss_now, rss_base = sorted(rounds)[len(rounds) // 2]
    speed = ratios[len(ratios) // 2]
    table.add(
        f"first full load, MB/s ({full_steps // 1000}k steps, {len(rounds)} alternated rounds)",
        f"≥ today's ({args.baseline}: {size / MB / wall_base:,.0f} MB/s)",
        f"{size / MB / wall_now:,.0f} MB/s ({wall_now:.1f} s); median ratio {speed:.2f}x today's speed "
        f"(min {ratios[0]:.2f}, max {ratios[-1]:.2f})",
        speed >= 1.0,
    )
    table.add(
        "first full load, peak RSS / file size",
        "≤ 0.25x",
        f"{rss_now / size:.2f}x ({rss_now / MB:,.0f} MB; today's {rss_base / size:.2f}x)",
        rss_now / size <= 0.25,
    )

    # Re-open with a sidecar, where the reader has one.
    if (
        importlib.util.find_spec("tracer.trace.sidecar") is not None
        and (ROOT / "tracer/trace/sidecar.py").exists()
    ):
        with_sidecar = env_for(ROOT, sidecar=True)
        run([PY, "-c", SIDECAR_CHILD, str(big)], env=with_sidecar)  # writes the sidecar: excluded
        start = time.time()
        _, rss, out = run([PY, "-c", SIDECAR_CHILD, str(big)], env=with_sidecar)
        ready = json.loads(out)["ready"] - start
        table.add(
            "re-open with a sidecar: start to the full-run timeline (load, analysis, series)",
            "≤ 1 s",
            f"{ready:.2f} s, peak RSS {rss / MB:,.0f} MB",
            ready <= 1.0,
        )
    else:
        print("  re-open with a sidecar: not measured (tracer/trace/sidecar.py is not in this tree)")
        table.add("re-open with a sidecar", "≤ 1 s", "not measured: no tracer/trace/sidecar.py", None)

    if not args.no_tui:
        _, rss, out = run([PY, str(Path(__file__).resolve()), "--child", "tui", str(big), str(args.reps)])
        tui = json.loads(out.strip().splitlines()[-1])
        medians = {k: sorted(v)[len(v) // 2] * 1e3 for k, v in tui["keys"].items()}
        worst_key = max(medians, key=medians.__getitem__)
        worst_press = max(max(v) for v in tui["keys"].values()) * 1e3
        table.add(
            f"TUI first data frame from make_app ({full_steps // 1000}k steps)",
            "≤ 1 s",
            f"{tui['first_data_frame']:.2f} s (every step loaded at {tui['loaded']:.1f} s)",
            tui["first_data_frame"] <= 1.0,
        )
        table.add(
            f"TUI key to frame, worst median of {len(medians)} keys × {args.reps}",
            "≤ 50 ms",
            f"{medians[worst_key]:.1f} ms ({worst_key}; worst single press {worst_press:.0f} ms)",
            medians[worst_key] <= 50,
        )
        table.add(
            "TUI peak RSS (loading and loaded)",
            "≤ 1 GB",
            f"{tui['peak_rss'] / MB:,.0f} MB (after load {tui['rss_after_load'] / MB:,.0f} MB)",
            tui["peak_rss"] <= 1e9,
        )

    if not args.no_web:
        add_web_figures(table, big, args.zooms, f"{full_steps // 1000}k")

    # 1M steps by extrapolation.
    for key, unit in (("summary", "s"), ("flags", "s"), ("diff", "s"), ("load", "s")):
        t, how = fit(per[f"{key} s"])
        r, _ = fit(per[f"{key} RSS"])
        points = ", ".join(f"{n // 1000}k: {v:.1f} s" for n, v in per[f"{key} s"])
        limit = "≤ 10 s" if key in ("summary", "flags", "diff") else "(none)"
        table.add(
            f"1M steps, {key} ({how}; {points})",
            limit,
            f"{t:.0f} {unit}, peak RSS {r / MB:,.0f} MB",
            (t <= 10) if key != "load" else None,
        )
    print(f"load average {os.getloadavg()[0]:.1f} at the end ({os.cpu_count()} CPUs)")
    table.print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
