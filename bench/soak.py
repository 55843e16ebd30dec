#!/usr/bin/env python3
"""Soak: a live CPU `vllm serve`, traced, streamed and scraped, under load and idle in turn.

A tiny local Llama (tests/live_support.py) serves ngram K=3 with SCHEDSCOPE_TRACE,
SCHEDSCOPE_STREAM and SCHEDSCOPE_METRICS set. Two `schedscope attach --json --save`
viewers follow the stream; viewer B is killed (SIGKILL) during a load phase and
restarted into a second file. Load phases (concurrent completions) alternate with
idle phases longer than the stall timeout (8 s), so idle must not look stalled.
/metrics is scraped through the run. After the server is stopped (SIGTERM, footer
written) it checks:

- the server's trace: footer present, 0 records dropped, 0 tracer errors;
- every saved copy loads strictly and equals the server's file step for step: A the
  whole run, the restarted B the run's tail from the server's backlog on (a fresh
  attach gets the recent ring, not the whole run), the killed B the steps it got, a
  prefix; each copy holds one run (no copy.1.jsonl);
- the last scrape (taken idle, after the last load) equals the trace's totals;
- scrapes never went backwards.

    .venv/bin/python bench/soak.py                  # 4 cycles of 40 s load + 12 s idle (about 5 min)
    .venv/bin/python bench/soak.py --quick          # 2 cycles of 10 s + 10 s
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.live_support import build_tiny_llama, free_port, start_server  # noqa: E402
from tests.test_metrics import expected_from_trace, scrape  # noqa: E402
from tracer.trace.reader import load  # noqa: E402

WORDS = ("the", "scheduler", "decides", "which", "requests", "run", "in", "each", "step", "hello", "world")


def _prompt(i: int) -> str:
    return " ".join(WORDS[(i + j) % len(WORDS)] for j in range(8 + i % 24))


def _viewer(url: str, save: Path, log: Path) -> subprocess.Popen[bytes]:
    cmd = [sys.executable, "-m", "tracer.cli", "attach", url, "--json", "--save", str(save)]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    with open(log, "ab") as out:
        return subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=out)


def _load(server: Any, seconds: float, concurrency: int, counter: list[int]) -> None:
    """Closed-loop load: `concurrency` clients send completions back to back for `seconds`."""
    stop = time.monotonic() + seconds

    def client(k: int) -> None:
        i = k
        while time.monotonic() < stop:
            server.complete(_prompt(i), 16 + i % 48, ignore_eos=True)
            counter[0] += 1
            i += concurrency

    threads = [threading.Thread(target=client, args=(k,)) for k in range(concurrency)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


def _steps(path: Path) -> list[dict[str, Any]]:
    return load(path).steps()  # strict: a second header or a malformed line raises


def _wait_for_footer(path: Path, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if path.exists() and b'"kind":"footer"' in path.read_bytes()[-4096:]:
            return True
        time.sleep(0.2)
    return False


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cycles", type=int, default=4)
    ap.add_argument("--load-s", type=float, default=40.0)
    ap.add_argument("--idle-s", type=float, default=12.0, help="idle phase; > 8 s, the stall timeout")
    ap.add_argument("--concurrency", type=int, default=8)
    ap.add_argument("--quick", action="store_true", help="2 cycles of 10 s load, 10 s idle")
    ap.add_argument("--workdir", type=Path, help="keep the files here (default: a temporary directory)")
    args = ap.parse_args(argv)
    if args.quick:
        args.cycles, args.load_s, args.idle_s = 2, 10.0, 10.0
    budget = args.cycles * (args.load_s + args.idle_s)
    if budget > 540:
        ap.error(f"the run would take {budget:.0f} s of load and idle; keep it under 9 minutes")

    tmp = args.workdir or Path(tempfile.mkdtemp(prefix="schedscope-soak-"))
    tmp.mkdir(parents=True, exist_ok=True)
    model = build_tiny_llama(Path(tempfile.gettempdir()) / "schedscope-soak-model", seed=0)
    trace_path = tmp / "server.jsonl"
    stream_port, metrics_port = free_port(), free_port()
    env = {
        "SCHEDSCOPE_TRACE": str(trace_path),
        "SCHEDSCOPE_STREAM": f"127.0.0.1:{stream_port}",
        "SCHEDSCOPE_METRICS": f"127.0.0.1:{metrics_port}",
    }
    spec = {"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_max": 3, "prompt_lookup_min": 1}
    extra = [
        "--speculative-config", json.dumps(spec),
        "--scheduler-cls", "tracer.scheduler.TracingScheduler",
        "--max-num-batched-tokens", "256",
        "--shutdown-timeout", "10",
    ]  # fmt: skip
    url = f"http://127.0.0.1:{stream_port}/trace"
    metrics_url = f"http://127.0.0.1:{metrics_port}/metrics"
    copies = {"A": tmp / "copy_a.jsonl", "B1": tmp / "copy_b1.jsonl", "B2": tmp / "copy_b2.jsonl"}
    requests = [0]
    scrapes: list[dict[str, Any]] = []
    scrape_ms: list[float] = []
    t_start = time.monotonic()
    print(f"soak: {args.cycles} cycles of {args.load_s:.0f} s load ({args.concurrency} clients) "
          f"+ {args.idle_s:.0f} s idle; files in {tmp}", flush=True)  # fmt: skip

    def take_scrape() -> dict[str, Any]:
        t0 = time.perf_counter()
        s = scrape(metrics_url)
        scrape_ms.append((time.perf_counter() - t0) * 1000)
        scrapes.append(s)
        return s

    viewers: dict[str, subprocess.Popen[bytes]] = {}
    with start_server(model, extra_args=extra, env=env, log_path=tmp / "server.log") as server:
        viewers["A"] = _viewer(url, copies["A"], tmp / "viewer_a.log")
        viewers["B1"] = _viewer(url, copies["B1"], tmp / "viewer_b1.log")
        time.sleep(3.0)  # attached before the first step: the idle server sends heartbeats only
        for cycle in range(args.cycles):
            loader = threading.Thread(target=_load, args=(server, args.load_s, args.concurrency, requests))
            loader.start()
            if cycle == 1:
                time.sleep(args.load_s / 2)
                viewers["B1"].send_signal(signal.SIGKILL)  # mid-load, as a crash would
                viewers["B1"].wait()
                viewers["B2"] = _viewer(url, copies["B2"], tmp / "viewer_b2.log")
            while loader.is_alive():
                take_scrape()
                loader.join(2.0)
            time.sleep(args.idle_s)
            s = take_scrape()
            print(f"  cycle {cycle + 1}: {requests[0]} requests so far, "
                  f"{int(s.get('schedscope_steps_total', 0))} steps", flush=True)  # fmt: skip
        final = take_scrape()
    t_served = time.monotonic() - t_start
    ok = _wait_for_footer(copies["A"], 20) and _wait_for_footer(copies["B2"], 20)
    for p in viewers.values():
        if p.poll() is None:
            p.send_signal(signal.SIGINT)  # the saver closes its file
    for p in viewers.values():
        try:
            p.wait(10)
        except subprocess.TimeoutExpired:
            p.kill()

    failures: list[str] = []
    trace = load(trace_path)
    server_steps = trace.steps()
    footer = trace.footer or {}
    if not trace.footer:
        failures.append("the server's trace has no footer")
    if footer.get("records_dropped", -1) != 0 or footer.get("errors", -1) != 0:
        failures.append(f"footer: {footer}")
    if not ok:
        failures.append("a viewer never received the footer")
    report: dict[str, Any] = {}
    for name, path in copies.items():
        runs = sorted(path.parent.glob(path.stem + ".*" + path.suffix))
        if runs:
            failures.append(f"{name}: more than one run saved ({[r.name for r in runs]})")
        got = load(path)
        steps = got.steps()
        first = steps[0]["step"] if steps else None
        offset = (first or 1) - 1
        same = steps == server_steps[offset : offset + len(steps)]
        # A viewer attached mid-run gets the server's recent backlog (a bounded ring), not
        # the whole run: its copy must be the run's contiguous tail, to the last step.
        full = same and offset + len(steps) == len(server_steps)
        report[name] = {"steps": len(steps), "first": first, "gaps": got.gaps, "torn": bool(got.torn)}
        if not same:
            failures.append(f"{name}: its steps differ from the server's")
        if name != "B1" and not full:
            failures.append(f"{name}: holds steps {first}..{offset + len(steps)} of 1..{len(server_steps)}")
        if name == "A" and offset:
            failures.append("A, attached before the first step, missed the run's first steps")
        if name != "B1" and got.footer != trace.footer:
            failures.append(f"{name}: footer differs")
    want = expected_from_trace(trace_path)
    got_totals = {k: final.get(k) for k in want}
    if got_totals != want:
        failures.append(f"metrics {got_totals} != trace {want}")
    keys = (
        "schedscope_steps_total",
        "schedscope_target_tokens_scheduled_total",
        "schedscope_preemptions_total",
    )
    for a, b in itertools.pairwise(scrapes):
        if any(b.get(k, 0) < a.get(k, 0) for k in keys):
            failures.append("a scrape went backwards")
            break
    scrape_ms.sort()
    copies_line = ", ".join(
        f"{n} {r['steps']} steps from step {r['first']}, gaps {r['gaps'] or 'none'}"
        + (", torn last line" if r["torn"] else "")
        for n, r in report.items()
    )
    print(
        f"soak figures: {t_served:.0f} s served, {requests[0]} requests, {len(server_steps)} steps, "
        f"{trace_path.stat().st_size / 1e6:.1f} MB trace, records dropped {footer.get('records_dropped')}, "
        f"tracer errors {footer.get('errors')}\n  copies: {copies_line}\n"
        f"  metrics: {len(scrapes)} scrapes, median {scrape_ms[len(scrape_ms) // 2]:.1f} ms, "
        f"max {scrape_ms[-1]:.1f} ms; final steps {int(final.get('schedscope_steps_total', 0))}, "
        f"target tokens {int(final.get('schedscope_target_tokens_scheduled_total', 0))}, "
        f"preemptions {int(final.get('schedscope_preemptions_total', 0))}, "
        f"equal to the trace: {got_totals == want}",
        flush=True,
    )
    print("soak: " + ("PASS" if not failures else "FAIL\n  " + "\n  ".join(failures)), flush=True)
    return 0 if not failures else 1


if __name__ == "__main__":
    code = main()
    sys.stdout.flush()
    os._exit(code)  # skip interpreter teardown (triton's leak reports at exit)
