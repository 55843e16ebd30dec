#!/usr/bin/env python3
"""TTFT as the client measures it, against what schedscope measures and predicts.

The whole loop a user runs, on a CPU `vllm serve` (the tiny local Llama of
tests/live_support.py) in the configuration users run (async scheduling, prefix caching):

1. record: serve at `--record-seqs` (default 4) under `tracer.scheduler.TracingAsyncScheduler`
   and drive it with `vllm bench serve` (by default a burst: 64 requests at once, 96 prompt and
   48 output tokens, `--ignore-eos`);
2. sweep: `schedscope sweep TRACE --max-num-seqs 4,8,16 --arrivals time --json`, a timed replay
   per setting on the step-time model fitted on the recording;
3. serve each setting live, traced, with the same workload and seed;
4. compare, per setting: output tok/s, TTFT p50/p99 and time to drain as the sweep predicted,
   as the live trace measured (from each request's arrival), as vLLM's own frontend measured
   (`vllm:time_to_first_token_seconds`, arrival to the output processed: its mean; /metrics keeps
   a histogram, not percentiles), and as the client measured (`vllm bench serve`'s figures).

On a 2-core host the API server, the client and EngineCore share the CPU with the model's
worker, which takes all it can while requests run. Left as it is, the API server's streams are
starved: a burst's responses reach the client all at once at the end (TPOT p50 of a few µs),
and the client's TTFT measures the host, not the server. `--engine-nice 10` (the default) lowers
EngineCore's and the worker's priority, so the API server and the client run when they have work,
as they would on a GPU server's own cores; `--engine-nice 0` shows the starved case.

    .venv/bin/python bench/ttft_loop.py                                  # the burst, about 5 min
    .venv/bin/python bench/ttft_loop.py --request-rate 8                 # a steady rate
    .venv/bin/python bench/ttft_loop.py --settings 4,8,16 --record-seqs 4 --prompts 64

The last lines are the table docs/what-if.md shows.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.live_support import (  # noqa: E402
    LiveServer,
    bench_serve,
    build_tiny_llama,
    renice_engine,
    start_server,
)


@dataclass
class Live:
    """One live run: the client's figures, vLLM's own TTFT, and the trace's."""

    seqs: int
    client: dict[str, Any]
    vllm_ttft_mean_ms: float | None
    trace: Path
    measured: dict[str, Any] = field(default_factory=dict)
    load: tuple[float, float] = (0.0, 0.0)  # the host's 1-minute load average before and after


def vllm_ttft_mean_ms(server: LiveServer) -> float | None:
    """vLLM's own TTFT (arrival to the first token's output processed in the frontend), mean."""
    text = urllib.request.urlopen(server.base_url + "/metrics", timeout=30).read().decode()
    found = {}
    for line in text.splitlines():
        for key in ("_sum", "_count"):
            if line.startswith(f"vllm:time_to_first_token_seconds{key}"):
                found[key] = float(line.rsplit(" ", 1)[1])
    if not found.get("_count"):
        return None
    return 1e3 * found["_sum"] / found["_count"]


def workload(args: argparse.Namespace) -> list[str]:
    return [
        "--dataset-name", "random", "--random-input-len", str(args.input_len),
        "--random-output-len", str(args.output_len), "--random-range-ratio", "0", "--ignore-eos",
        "--num-prompts", str(args.prompts), "--request-rate", str(args.request_rate),
        "--seed", str(args.seed),
        "--percentile-metrics", "ttft,tpot,itl", "--metric-percentiles", "50,99", "--disable-tqdm",
        "--save-detailed",
    ]  # fmt: skip


def serve_once(args: argparse.Namespace, model: Path, work: Path, seqs: int) -> Live:
    out = work / f"seqs{seqs}"
    out.mkdir(parents=True, exist_ok=True)
    trace = out / "trace.jsonl"
    trace.unlink(missing_ok=True)
    server_args = [
        "--async-scheduling", "--enable-prefix-caching", "--max-num-seqs", str(seqs),
        "--shutdown-timeout", "10", "--scheduler-cls", "tracer.scheduler.TracingAsyncScheduler",
    ]  # fmt: skip
    env = {"SCHEDSCOPE_TRACE": str(trace)}
    with start_server(model, extra_args=server_args, env=env, log_path=out / "server.log", timeout=300) as s:
        if args.engine_nice:
            renice_engine(s, args.engine_nice)
        before = os.getloadavg()[0]
        client = bench_serve(s, out, *workload(args), timeout=1800)
        after = os.getloadavg()[0]
        mean = vllm_ttft_mean_ms(s)
    if client.get("completed") != args.prompts:
        raise SystemExit(f"seqs={seqs}: {client.get('completed')} of {args.prompts} completed")
    live = Live(seqs, client, mean, trace, load=(before, after))
    live.measured = measured(trace, client)
    return live


def measured(path: Path, client: dict[str, Any]) -> dict[str, Any]:
    """The trace's own figures (throughput, TTFT from arrival, drain), and the client's TTFT
    split against it (`schedscope timing --client`)."""
    import numpy as np

    from tracer.analysis.client_ttft import split
    from tracer.analysis.clock import performance
    from tracer.trace.reader import load

    trace = load(path)
    perf = performance(trace)
    parts = split(trace, client).parts_ms
    return {
        "client_extra_p50_ms": {k: float(np.median(parts[k])) for k in ("before_arrival", "way_back")},
        "output_tok_s": perf.output_tok_s,
        "ttft_ms": perf.ttft_ms,
        "ttft_from": perf.ttft_from,
        "ttft_parts_ms": perf.ttft_parts_ms,
        "drain_s": perf.drain_s,
    }


def sweep(args: argparse.Namespace, trace: Path) -> dict[int, dict[str, Any]]:
    cmd = [
        sys.executable, "-m", "tracer.cli", "sweep", str(trace), "--policy", "stock",
        "--max-num-seqs", args.settings, "--arrivals", "time", "--json",
    ]  # fmt: skip
    done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, check=True)
    doc = json.loads(done.stdout)
    return {int(r["setting"]["max_num_seqs"]): r for r in doc["results"]}


def pct(new: float | None, ref: float | None) -> str:
    if new is None or not ref:
        return "n/a"
    return f"{100 * (new - ref) / ref:+.0f}%"


def _trio(pred: float | None, meas: float | None, client: float) -> str:
    def f(x: float | None) -> str:
        return "n/a" if x is None else f"{x:,.0f}"

    return f"{f(pred)}/{f(meas)}/{f(client)} ({pct(pred, client)},{pct(meas, client)})"


EXTRA = "client extra p50 ms: before arrival + way back"


def table(predicted: dict[int, dict[str, Any]], lives: list[Live], recorded: Live) -> list[str]:
    """Predicted against each live run (the recording first: the sweep's own setting)."""
    lines = [
        f"{'run':>6}  {'out tok/s pred/live':>20}  {'TTFT p50 pred/trace/client ms':>32}  "
        f"{'TTFT p99 pred/trace/client ms':>32}  {'drain pred/duration s':>22}"
    ]
    for name, live in [("rec", recorded), *((str(x.seqs), x) for x in lives)]:
        p, m, c = predicted[live.seqs], live.measured, live.client
        ct = c["output_throughput"]
        out = f"{p['output_tok_s']:,.0f}/{ct:,.0f} ({pct(p['output_tok_s'], ct)})"
        ttft = m["ttft_ms"] or {}
        p50 = _trio(p["ttft_p50_ms"], ttft.get("p50"), c["median_ttft_ms"])
        p99 = _trio(p["ttft_p99_ms"], ttft.get("p99"), c["p99_ttft_ms"])
        drain = f"{p['drain_ms'] / 1e3:.2f}/{c['duration']:.2f} ({pct(p['drain_ms'] / 1e3, c['duration'])})"
        tag = f"rec {live.seqs}" if name == "rec" else name
        lines.append(f"{tag:>6}  {out:>20}  {p50:>32}  {p99:>32}  {drain:>22}")
    lines += [
        "(err): predicted, and the live trace's TTFT from arrival, against the client's figure",
        "",
        f"{'run':>6}  {'TTFT mean trace/vLLM ms':>24}  {EXTRA:>47}",
    ]
    for name, live in [(f"rec {recorded.seqs}", recorded), *((str(x.seqs), x) for x in lives)]:
        m = live.measured
        mean = "n/a"
        if m["ttft_parts_ms"] and live.vllm_ttft_mean_ms:
            tm = sum(m["ttft_parts_ms"].values())
            mean = f"{tm:,.0f}/{live.vllm_ttft_mean_ms:,.0f} ({pct(tm, live.vllm_ttft_mean_ms)})"
        extra = m["client_extra_p50_ms"]
        split_text = f"{extra['before_arrival']:,.1f} + {extra['way_back']:,.1f}"
        lines.append(f"{name:>6}  {mean:>24}  {split_text:>47}")
    lines.append("vLLM: its /metrics TTFT histogram's mean (arrival to the first token's output processed)")
    return lines


def run_line(live: Live) -> str:
    """One run's client figures and the host's load: the comparison assumes an otherwise idle
    host, and a run beside other work is slower in a way no recording predicts."""
    c = live.client
    return (
        f"{c['output_throughput']:,.0f} output tok/s, TTFT p50 {c['median_ttft_ms']:,.0f} ms, "
        f"{c['duration']:.2f} s; load average {live.load[0]:.2f} before, {live.load[1]:.2f} after"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--record-seqs", type=int, default=4, help="max_num_seqs of the recording (default 4)"
    )
    parser.add_argument(
        "--settings", default="4,8,16", help="max_num_seqs to predict and serve (default 4,8,16)"
    )
    parser.add_argument("--prompts", type=int, default=64)
    parser.add_argument("--input-len", type=int, default=96)
    parser.add_argument("--output-len", type=int, default=48)
    parser.add_argument("--request-rate", default="inf", help="requests/s (default inf: a burst)")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument(
        "--engine-nice", type=int, default=10, help="renice EngineCore and its worker (0: off)"
    )
    parser.add_argument("--workdir", type=Path, help="keep the traces and logs here (default: a temp dir)")
    parser.add_argument("--json", type=Path, help="also write every figure here")
    args = parser.parse_args(argv)
    work = args.workdir or Path(tempfile.mkdtemp(prefix="schedscope-ttft-"))
    work.mkdir(parents=True, exist_ok=True)
    model = build_tiny_llama(work / "model")
    print(f"workdir {work}; record at max_num_seqs={args.record_seqs}, rate {args.request_rate}", flush=True)
    recorded = serve_once(args, model, work / "record", args.record_seqs)
    print(f"recorded {recorded.trace}: {run_line(recorded)}", flush=True)
    predicted = sweep(args, recorded.trace)
    print(f"swept max_num_seqs {args.settings}", flush=True)
    lives = []
    for seqs in (int(s) for s in args.settings.split(",")):
        lives.append(serve_once(args, model, work / "live", seqs))
        print(f"served max_num_seqs={seqs}: {run_line(lives[-1])}", flush=True)
    lines = table(predicted, lives, recorded)
    print()
    print("\n".join(lines))
    if args.json:
        doc = {
            "args": {k: str(v) for k, v in vars(args).items()},
            "recorded": {
                "client": recorded.client,
                "measured": recorded.measured,
                "vllm_ttft_mean_ms": recorded.vllm_ttft_mean_ms,
            },
            "predicted": predicted,
            "live": [
                {
                    "seqs": x.seqs,
                    "client": x.client,
                    "vllm_ttft_mean_ms": x.vllm_ttft_mean_ms,
                    "measured": x.measured,
                }
                for x in lives
            ],
        }
        args.json.write_text(json.dumps(doc, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
