#!/usr/bin/env python3
"""The tracer's cost on a live server: `vllm bench serve` against a CPU `vllm serve`.

Three contenders serve the same small local Llama (tests/live_support.py) in the
configuration users run: `--async-scheduling`, prefix caching on
(`--enable-prefix-caching`), `--max-num-seqs` above the client's concurrency:

  A  stock: no `--scheduler-cls`, vLLM's own AsyncScheduler;
  B  traced: `tracer.scheduler.TracingAsyncScheduler` with SCHEDSCOPE_TRACE;
  C  streamed: B plus SCHEDSCOPE_STREAM on a loopback port, with one viewer
     attached for the server's whole life (a thread of this process doing a
     streaming GET of /trace and reading every line, so the hub, its HTTP thread
     and the bytes on the socket are all paid). SCHEDSCOPE_METRICS is left unset,
     as users leave it, so the stream server's /metrics counting is on too
     (`--no-metrics` sets it off).

Every measured run is the same `vllm bench serve` workload, the same `--seed`
for all contenders and rounds: the random dataset with fixed input and output
lengths, a shared `--random-prefix-len` prefix (so prefix caching hits),
`--ignore-eos` (every request makes exactly its output length), `--max-concurrency`
64 by default. Before each measured run the server's prefix cache is emptied
(POST /reset_prefix_cache, dev mode on loopback), so every run starts from the
same cache state whatever ran before it on that server; each server gets one
short warm-up run (another seed) after it starts.

KV pressure, as busy servers have it: `--kv-mib 128` leaves the KV cache too small
for 64 requests at once, so requests wait for blocks and running ones are preempted. Each run
prints its output tokens and vLLM's own preemption count (`vllm:num_preemptions_total` on
/metrics, before and after the run), so the pressure can be seen. Early stops are not
covered: without `--ignore-eos` the random-weight model still made every token it was allowed
(2026-12-07), so the workload keeps `--ignore-eos`.

Alternation. A round runs each contender once, in the orders of a Williams design
(`williams_orders`): over a cycle of rounds (4 with the control, 6 without) each
contender runs in each place once and comes right after each other contender
once, so neither going first nor what ran just before (a server stopping, a cache
left warm) leans on one contender. (Until 2026-12-07 the order was only rotated,
so B always came right after A', and C after B.) Each round gives one ratio per
figure (B/A, C/A); the figures are printed as the median over rounds with min and
max (bench/_common.py). `--control` adds A', a second stock contender alternated
like the rest: A'/A is what the bench reads between two runs of one server, the
spread the tracer's ratios are read against.

The verdict is a mean with a 95% bootstrap interval over the rounds (`mean_interval`),
of output tok/s and TPOT p50 against the round's stock runs (A and A' both, with the
control): met when the whole interval is on the goal's side, NOT met when it is all on the
other, not resolved otherwise; A'/A's own interval should hold 1. Goals: output tok/s at
least 0.99x traced and 0.98x streamed with a viewer, TPOT p50 at most 1.01x.

Three ways to hold the servers:

  --servers paused   (default) every server starts once and stays up, but every server
                     but the measured one is stopped (SIGSTOP to each of its processes, the
                     trace process included) during a run and continued (SIGCONT) for its
                     own: nothing idles beside a run, and a run costs its 30 s, not a 40 s
                     start and a warm-up more: with four contenders a round took 3.2 minutes,
                     a set's starts included, against 5.4 restarted (2026-12-07).
                     What it cannot average out is a difference that lasts a server's whole
                     life (where its memory landed, say); `--restart-every K` starts all
                     servers afresh every K rounds (by default every cycle of orders), and
                     A'/A (`--control`) says whether such a difference is there.
  --servers restart  each run starts its contender's server, warms it up, waits for it
                     to go quiet, runs, and stops it: only one server is ever up. About
                     40 s a start on an idle machine. The default until 2026-12-07.
  --servers kept     as paused, but the idle servers keep running beside a run; their
                     CPU time during it (their process groups, from /proc) is printed.

Why not `kept`: an idle server is not free. On the 2-core machine this was written on,
over 20 quiet seconds the stock server's processes took 0.16 CPU s (0.8% of a core;
mostly the CPU worker's polling) and the streamed one's 0.29 s (1.5%: the trace writer
wakes every 20 ms, the stream sends heartbeats). With `kept`, the idle servers beside
a run are therefore different for each contender (A runs beside two traced servers, B
and C beside the stock one): A gets more background, which flatters the tracer by a few
tenths of a percent of the machine, and a server goes on working for a moment after its
run ends (in the first `kept` smoke run, before the bench waited for quiet, the idle
servers took 0.15-0.43 CPU s each during 1.5-2.9 s runs). Against a 1% goal that is too
much. `paused` removes that background, and `restart` never had it; `kept` stays for a
quicker look. Two runs of one stock server differ as much under `paused` as under
`restart` (docs/performance.md): the spread is the host's, run to run, and `paused`
buys 1.7 times the rounds an hour, and no EngineCore killed at shutdown between them.

The model. A Llama of `--hidden-size` 512 and `--layers` 4 (random weights, tests/live_support.py)
with a 512 MiB KV cache, so all 64 concurrent requests run at once: its decode steps take tens of
milliseconds on 2 cores, as a GPU server's do. The smallest model the live tests use (64 x 2,
6-12 ms steps) makes the API server and the client, which work per token, as hungry as EngineCore:
three processes on two cores, and two runs of one stock server differed by up to 2.4x in
consecutive runs (docs/performance.md). With the engine the bottleneck the runs agree far better.
`--hidden-size 64 --layers 2 --kv-mib 64` is that small model, for comparison.

Keep-alive. Every server runs with VLLM_HTTP_TIMEOUT_KEEP_ALIVE=120: uvicorn's default of 5 s
closes a connection the client left idle that long, and a request the client sends on it as it
closes fails (a TCP reset), which cost a run a few dozen failed requests and a re-run.

Pinning. vLLM's CPU worker binds its OpenMP threads to all CPUs but one and leaves that one
"reserved" (its log: `core ids=[0]`, `reserved_cpus=[1]` on 2 CPUs) for EngineCore, the API
server and whatever else runs, but binds nothing else there: the API server, EngineCore, the
trace process and the client float over both CPUs and take turns on the worker's, slowing its
forward passes by whatever lands there. `--pin` (the default, `auto`) does what the reservation
means: this process and every process it starts (servers, client, viewer) run on the last CPU,
and VLLM_CPU_OMP_THREADS_BIND gives the worker the rest. On the 2-CPU machine, stock runs of
512 prompts read 2,328-2,386 tok/s pinned against 2,165-2,282 unpinned (two server starts, three
runs each), 2.5% apart where they were 5.4%; the spread between rounds did not narrow (the host's
speed drifts over an hour: docs/performance.md). The tracer's own work (the trace process, the
stream, the viewer) then competes with the API server and the client on the reserved CPU, not
with the forward pass. `--pin off` leaves placement to the kernel, as before.

`--engine-nice N` renices each server's EngineCore and CPU worker once it is up (as the live
tests do). The trace process is at nice 10 already.

Printed per run: output tok/s, TTFT and TPOT p50/p99, the server's CPU seconds
(all its processes) per 1,000 output tokens, and in `kept` mode the idle servers'
CPU. Then, per figure, the ratios B/A and C/A as median (min, max, n). The goal
is at most 1% throughput loss: output tok/s B/A and C/A >= 0.99. The last line
is the figure.

The footer's figures (EngineCore's time in the tracer, hooks and shipping per step) depend on
the requests per step, not on the model; their share of a run shrinks as the steps grow, so
they are printed beside the ratios, for the small model too. A server whose EngineCore vLLM's
process manager killed at shutdown (its log says so) is marked, and counted per contender: a
traced one's trace process goes with it, before the footer is written.

    .venv/bin/python bench/live_overhead.py                # 3 rounds x 3 contenders, 256 prompts
    .venv/bin/python bench/live_overhead.py --rounds 5 --prompts 512
    .venv/bin/python bench/live_overhead.py --rounds 4 --control   # with the A/A control
    .venv/bin/python bench/live_overhead.py --quick        # smoke: 1 round, 64 prompts
    .venv/bin/python bench/live_overhead.py --rounds 20 --prompts 512 --control \
        --workdir /dev/shm/live   # paused, afresh every 4 rounds; rounds.json there, after each round
    .venv/bin/python bench/live_overhead.py --pool bench/data/live_overhead/*.json
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(ROOT))

from _common import fmt_spread, machine, mean_interval, spread  # noqa: E402

from tests.live_support import (  # noqa: E402
    LiveServer,
    bench_serve,
    build_tiny_llama,
    free_port,
    renice_engine,
    start_server,
)
from tracer.doctor import METRIC_PREEMPTIONS as PREEMPTIONS  # noqa: E402

CONTENDERS = ("stock", "control", "traced", "streamed", "traced-thread", "streamed-thread")
LABEL = {
    "stock": "A stock",
    # --control: a second stock server, alternated like the others: A'/A is what the bench reads
    # between two runs of the same server, the spread any other ratio is read against.
    "control": "A' stock again (control)",
    "traced": "B traced",
    "streamed": "C streamed",
    # --writer-thread: B and C with SCHEDSCOPE_WRITER=thread, the records built on a writer
    # thread in EngineCore as before the trace process (before and after, in one run).
    "traced-thread": "D traced, writer thread",
    "streamed-thread": "E streamed, writer thread",
}
# (key in `vllm bench serve`'s saved result, printed name, higher is better)
FIGURES = (
    ("output_throughput", "output tok/s", True),
    ("median_ttft_ms", "TTFT p50 ms", False),
    ("p99_ttft_ms", "TTFT p99 ms", False),
    ("median_tpot_ms", "TPOT p50 ms", False),
    ("p99_tpot_ms", "TPOT p99 ms", False),
    ("cpu_s_per_1k_tokens", "server CPU s/1k tok", False),
)
WARMUP_SEED = 1_000_003
# Output tok/s against stock: at most 1% loss traced, 2% with a viewer attached (the stream).
GOAL = {"traced": 0.99, "streamed": 0.98, "traced-thread": 0.99, "streamed-thread": 0.98}
TPOT_GOAL = 1.01  # TPOT p50 against stock, every tracing contender
VERDICT_FIGURES = (("output_throughput", "output tok/s", True), ("median_tpot_ms", "TPOT p50", False))
CLK_TCK = os.sysconf("SC_CLK_TCK")


def group_cpu_seconds(pgid: int) -> float:
    """User + system CPU seconds of a server: every live process in its process group `pgid`
    (its API server, EngineCore and workers; start_server puts them in their own group), and
    their descendants in sessions of their own (the tracer's trace process and recording
    index follower, which leave the group so that a Ctrl-C lets them finish the trace)."""
    return sum(server_cpu_seconds(pgid))


def server_processes(pgid: int) -> tuple[dict[int, tuple[int, int, int]], set[int], set[int]]:
    """Every process (pid: (ppid, pgrp, utime + stime ticks)), the server's process group
    `pgid`, and its descendants outside it."""
    procs: dict[int, tuple[int, int, int]] = {}  # pid: (ppid, pgrp, utime + stime ticks)
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            text = stat.read_text()
        except OSError:
            continue  # exited meanwhile
        fields = text[text.rindex(")") + 2 :].split()  # state, ppid, pgrp, ...
        procs[int(stat.parent.name)] = (int(fields[1]), int(fields[2]), int(fields[11]) + int(fields[12]))
    group = {pid for pid, (_, pgrp, _) in procs.items() if pgrp == pgid}
    outside: set[int] = set()
    for pid, (ppid, pgrp, _) in procs.items():
        seen = 0
        while pgrp != pgid and ppid in procs and seen < 64:  # up the parents to the group
            if ppid in group:
                outside.add(pid)
                break
            ppid, seen = procs[ppid][0], seen + 1
    return procs, group, outside


def server_cpu_seconds(pgid: int) -> tuple[float, float]:
    """(CPU seconds of the server's process group, of its descendants outside it)."""
    procs, group, outside = server_processes(pgid)
    ticks = lambda pids: sum(procs[p][2] for p in pids)  # noqa: E731
    return ticks(group) / CLK_TCK, ticks(outside) / CLK_TCK


def signal_server(c: Contender, sig: signal.Signals) -> None:
    """`sig` to every process of `c`'s server, its group and the trace processes outside it
    (`--servers paused`: SIGSTOP while another runs, SIGCONT for its own run)."""
    assert c.server is not None
    _, group, outside = server_processes(c.server.proc.pid)
    for pid in group | outside:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, sig)


class Viewer(threading.Thread):
    """One stream viewer: a streaming GET of /trace, every line read (and counted, not
    parsed: parsing is the viewer's cost, not the server's). Reconnects with `since`
    if it is cut off, a bounded number of times."""

    def __init__(self, url: str, max_reconnects: int = 20, timeout: float | None = 10) -> None:
        super().__init__(name="schedscope-bench-viewer", daemon=True)
        self.url, self.max_reconnects, self.timeout = url, max_reconnects, timeout
        self.stop = threading.Event()
        self.lines = self.bytes = self.connects = self.gaps = 0
        self.last_step = 0
        self.error: str | None = None

    def run(self) -> None:
        while not self.stop.is_set() and self.connects <= self.max_reconnects:
            self.connects += 1
            try:
                url = f"{self.url}?since={self.last_step}" if self.last_step else self.url
                with urllib.request.urlopen(url, timeout=self.timeout) as resp:  # heartbeats every 2 s
                    for line in resp:
                        self.lines += 1
                        self.bytes += len(line)
                        if line.startswith(b'{"kind":"step"'):
                            head = line[:64]
                            i = head.find(b'"step":')
                            if i >= 0:
                                digits = head[i + 7 :].split(b",", 1)[0]
                                if digits.isdigit():
                                    self.last_step = int(digits)
                        elif line.startswith(b'{"kind":"gap"'):
                            self.gaps += 1
                        if self.stop.is_set():
                            return
            except (OSError, urllib.error.URLError) as exc:
                self.error = repr(exc)
            if not self.stop.is_set():
                time.sleep(0.5)


@dataclass
class Contender:
    name: str
    args: list[str]
    env: dict[str, str]
    trace: Path | None = None
    stream_port: int | None = None
    server: LiveServer | None = None
    viewer: Viewer | None = None
    runs: list[dict[str, Any]] = field(default_factory=list)
    killed_at_shutdown: bool = False  # the last stop: vLLM's process manager killed EngineCore


def pin(spec: str) -> str:
    """Apply `--pin` to this process (its children inherit it) and the environment the servers
    get; what was done, for the header line. `auto`: the worker on every allowed CPU but the
    last, everything else on the last."""
    if spec == "off":
        return "pinning off"
    if os.environ.get("VLLM_CPU_OMP_THREADS_BIND"):
        return "pinning off (VLLM_CPU_OMP_THREADS_BIND is set: the worker's CPUs are yours)"
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) < 2:
        return f"pinning off (one CPU allowed: {cpus})"
    worker, rest = cpus[:-1], cpus[-1]
    os.sched_setaffinity(0, {rest})
    os.environ["VLLM_CPU_OMP_THREADS_BIND"] = ",".join(map(str, worker))
    return f"CPU worker on CPUs {worker}, everything else on CPU {rest}"


def williams_orders(n: int) -> list[list[int]]:
    """The rounds' orders of `n` contenders, a Williams design: each runs in each place once
    and right after each other one once (n rows for an even n; for an odd n the n rows and
    their mirrors, 2n). Row 0 is 0, 1, n-1, 2, n-2, ...; row i adds i to each, mod n."""
    first, lo, hi = [0], 1, n - 1
    while len(first) < n:
        first.append(lo)
        lo += 1
        if len(first) < n:
            first.append(hi)
            hi -= 1
    rows = [[(x + i) % n for x in first] for i in range(n)]
    return rows if n % 2 == 0 else rows + [row[::-1] for row in rows]


def short(c: Contender) -> str:
    """A contender's letter: "A", "A'", "B", ..."""
    return LABEL[c.name].split()[0]


def contenders(
    workdir: Path, max_num_seqs: int, metrics: bool, writer_thread: bool = False, control: bool = False
) -> list[Contender]:
    common = [
        "--async-scheduling", "--enable-prefix-caching", "--max-num-seqs", str(max_num_seqs),
        "--shutdown-timeout", "10",
    ]  # fmt: skip
    # POST /reset_prefix_cache (dev mode, loopback only); a keep-alive longer than the client
    # leaves a connection idle, so no request goes out on a connection as the server closes it.
    base_env = {"VLLM_SERVER_DEV_MODE": "1", "VLLM_HTTP_TIMEOUT_KEEP_ALIVE": "120"}
    traced_args = [*common, "--scheduler-cls", "tracer.scheduler.TracingAsyncScheduler"]
    stream_port = free_port()
    streamed_env = {**base_env, "SCHEDSCOPE_TRACE": str(workdir / "streamed.jsonl")}
    streamed_env["SCHEDSCOPE_STREAM"] = f"127.0.0.1:{stream_port}"
    if not metrics:
        streamed_env["SCHEDSCOPE_METRICS"] = "off"
    cs = [
        Contender("stock", common, dict(base_env)),
        Contender(
            "traced",
            traced_args,
            {**base_env, "SCHEDSCOPE_TRACE": str(workdir / "traced.jsonl")},
            workdir / "traced.jsonl",
        ),
        Contender("streamed", traced_args, streamed_env, workdir / "streamed.jsonl", stream_port),
    ]
    if control:
        cs.insert(1, Contender("control", common, dict(base_env)))
    if writer_thread:
        thread = {"SCHEDSCOPE_WRITER": "thread"}
        traced_env = {**base_env, **thread, "SCHEDSCOPE_TRACE": str(workdir / "traced-thread.jsonl")}
        port = free_port()
        streamed_trace = workdir / "streamed-thread.jsonl"
        streamed_thread = {**streamed_env, **thread, "SCHEDSCOPE_TRACE": str(streamed_trace)}
        streamed_thread["SCHEDSCOPE_STREAM"] = f"127.0.0.1:{port}"
        cs.append(Contender("traced-thread", traced_args, traced_env, workdir / "traced-thread.jsonl"))
        cs.append(Contender("streamed-thread", traced_args, streamed_thread, streamed_trace, port))
    return cs


@contextlib.contextmanager
def serving(
    c: Contender, model: Path, workdir: Path, kv_mib: int, engine_nice: int = 0, paused: bool = False
) -> Iterator[LiveServer]:
    """`c`'s server (and, when it streams, its viewer) for the block, with a KV cache of
    `kv_mib`; always stopped. With `engine_nice`, its EngineCore and CPU worker threads reniced
    to it once it is up. `paused`: the server will be stopped between its runs, so its viewer
    waits for the next line however long it takes (no timeout to reconnect on)."""
    for key in ("SCHEDSCOPE_TRACE", "SCHEDSCOPE_STREAM", "SCHEDSCOPE_METRICS"):
        if key not in c.env and os.environ.get(key):
            raise SystemExit(
                f"{key} is set in this environment: unset it (contender {c.name} must not trace)"
            )
    if c.trace is not None:
        c.trace.unlink(missing_ok=True)
    port = free_port()
    if c.stream_port is not None:
        # Both ports fresh for each start, and apart: a stream port kept from an earlier start
        # was once handed out again as the API server's (free again after that server stopped).
        while (stream := free_port()) == port:
            pass
        c.stream_port = stream
        c.env["SCHEDSCOPE_STREAM"] = f"127.0.0.1:{stream}"
    log = workdir / f"{c.name}.log"
    logged = log.stat().st_size if log.exists() else 0  # the log is appended to at each start
    kv = kv_mib << 20
    with start_server(
        model, port=port, extra_args=c.args, env=c.env, log_path=log, timeout=300, kv_cache_bytes=kv
    ) as s:
        c.server = s
        if engine_nice:
            renice_engine(s, engine_nice)
        if c.stream_port is not None:
            c.viewer = Viewer(f"http://127.0.0.1:{c.stream_port}/trace", timeout=None if paused else 10)
            c.viewer.start()
        try:
            yield s
        finally:
            if c.viewer is not None:
                c.viewer.stop.set()
            c.server = None
    if c.viewer is not None:
        c.viewer.join(15)
    with open(log, "rb") as f:
        f.seek(logged)
        c.killed_at_shutdown = KILLED_AT_SHUTDOWN in f.read()


def workload(args: argparse.Namespace, seed: int, prompts: int) -> list[str]:
    return [
        "--dataset-name", "random", "--random-input-len", str(args.input_len),
        "--random-output-len", str(args.output_len), "--random-prefix-len", str(args.prefix_len),
        "--random-range-ratio", "0", "--ignore-eos", "--num-prompts", str(prompts),
        "--max-concurrency", str(args.concurrency), "--request-rate", "inf", "--seed", str(seed),
        "--percentile-metrics", "ttft,tpot,itl", "--metric-percentiles", "50,99", "--disable-tqdm",
    ]  # fmt: skip


def reset_prefix_cache(server: LiveServer) -> None:
    req = urllib.request.Request(server.base_url + "/reset_prefix_cache", data=b"", method="POST")
    with urllib.request.urlopen(req, timeout=30) as resp:
        if resp.status != 200:
            raise RuntimeError(f"reset_prefix_cache: HTTP {resp.status}")


def warm_up(c: Contender, args: argparse.Namespace, workdir: Path) -> None:
    out = workdir / f"warmup-{c.name}"
    out.mkdir(exist_ok=True)
    bench_serve(
        c.server, out, *workload(args, WARMUP_SEED, min(args.prompts, 2 * args.concurrency)), timeout=900
    )


def settle(cs: list[Contender], quiet: float = 0.05, window: float = 1.0, limit: float = 30.0) -> float:
    """Wait until every server that is up has gone quiet (under `quiet` CPU seconds over
    `window` seconds, all of them together): a server goes on working for a moment after its
    client's last response. Bounded by `limit`; returns the seconds waited."""
    t0 = time.monotonic()
    pgids = [c.server.proc.pid for c in cs if c.server is not None]
    before = sum(group_cpu_seconds(g) for g in pgids)
    while time.monotonic() - t0 < limit:
        time.sleep(window)
        now = sum(group_cpu_seconds(g) for g in pgids)
        if now - before < quiet:
            break
        before = now
    return time.monotonic() - t0


class FailedRun(RuntimeError):
    """A run in which some requests failed: its figures are not comparable, so it is run again."""


# Requests failing client-side (no error in the server's log) were seen on stock vLLM as well
# as traced, at 1,024 prompts: a failed run is retried on a fresh server, and counted.
RETRIES = 2
# vLLM's process manager logs this when a process outlived the shutdown's wait and is killed with
# its children: on CPU, the worker sometimes exits first and EngineCore is killed, and a traced
# server's trace process with it, before it writes the footer. It happens after the measured run.
KILLED_AT_SHUTDOWN = b"force killing remaining process"


def measured_run(
    c: Contender, idle: list[Contender], args: argparse.Namespace, workdir: Path, tag: str
) -> dict:
    assert c.server is not None
    out = workdir / f"{tag}-{c.name}"
    out.mkdir(exist_ok=True)
    reset_prefix_cache(c.server)
    settle([c, *idle])
    idle_before = {o.name: group_cpu_seconds(o.server.proc.pid) for o in idle if o.server is not None}
    preempted0 = c.server.metric(PREEMPTIONS)
    (group0, own0), load0 = server_cpu_seconds(c.server.proc.pid), os.getloadavg()[0]
    result = bench_serve(c.server, out, *workload(args, args.seed, args.prompts), timeout=1800)
    group1, own1 = server_cpu_seconds(c.server.proc.pid)
    preemptions = int(c.server.metric(PREEMPTIONS) - preempted0)
    cpu, tracer_processes = group1 + own1 - group0 - own0, own1 - own0
    idle_cpu = {
        o.name: group_cpu_seconds(o.server.proc.pid) - idle_before[o.name]
        for o in idle
        if o.server is not None and o.name in idle_before
    }
    if result.get("completed") != args.prompts or result.get("failed"):
        raise FailedRun(f"{c.name}: {result.get('completed')} completed, {result.get('failed')} failed")
    run = {key: float(result[key]) for key, _, _ in FIGURES if key in result}
    run.update(
        duration=float(result["duration"]),
        output_tokens=int(result["total_output_tokens"]),
        server_cpu_s=cpu,
        tracer_processes_cpu_s=tracer_processes,
        cpu_s_per_1k_tokens=1000 * cpu / max(1, int(result["total_output_tokens"])),
        idle_cpu_s=idle_cpu,
        load=load0,
        preemptions=preemptions,
    )
    c.runs.append(run)
    return run


def restarted_run(
    c: Contender, model: Path, args: argparse.Namespace, workdir: Path, tag: str, failures: list[str]
) -> dict:
    """`--servers restart`: one measured run on a fresh server of `c`'s, stopped after it; a
    run with failed requests is run again on another, up to RETRIES times (each in `failures`)."""
    for attempt in range(RETRIES + 1):
        try:
            with serving(c, model, workdir, args.kv_mib, args.engine_nice):
                warm_up(c, args, workdir)
                run = measured_run(c, [], args, workdir, tag)
            run["killed_at_shutdown"] = c.killed_at_shutdown
            engine_cost(c, [run])  # the server stopped: its footer is written
            return run
        except FailedRun as e:
            failures.append(str(e))
            print(f"    {LABEL[c.name]}: {e}; run again on a fresh server", flush=True)
            if attempt == RETRIES:
                raise
    raise AssertionError("unreachable")


def engine_cost(c: Contender, runs: list[dict]) -> None:
    """What the tracer took of EngineCore over its server's life, from its trace's footer
    (`hooks_s`, the scheduler thread's time in the hooks; `writer_thread_s`, the shipping
    thread's CPU), the warm-up included: per step, and as a share of the wall time of `runs`,
    the server's measured runs (an upper bound on the GIL time the tracer took from the engine
    loop while they ran); set on each of them."""
    f = footer(c.trace) if c.trace is not None else None
    if not f or f.get("hooks_s") is None or not f.get("steps_written") or not runs:
        return
    engine_s = float(f["hooks_s"]) + float(f["writer_thread_s"])
    for run in runs:
        run.update(
            hooks_us_per_step=1e6 * float(f["hooks_s"]) / f["steps_written"],
            writer_us_per_step=1e6 * float(f["writer_thread_s"]) / f["steps_written"],
            engine_share=engine_s / sum(r["duration"] for r in runs),
        )


def fmt_run(c: Contender, run: dict) -> str:
    idle = ", ".join(f"{k} {v:.2f}" for k, v in run["idle_cpu_s"].items())
    own = run["tracer_processes_cpu_s"]
    cost = (
        f", EngineCore's tracer time: hooks {run['hooks_us_per_step']:.0f} + writer thread "
        f"{run['writer_us_per_step']:.0f} µs/step, {run['engine_share']:.2%} of the run"
        if "engine_share" in run
        else ""
    )
    return (
        f"    {LABEL[c.name]:10s} {run['output_throughput']:8.1f} tok/s  "
        f"TTFT p50 {run['median_ttft_ms']:8.1f} p99 {run['p99_ttft_ms']:8.1f} ms  "
        f"TPOT p50 {run['median_tpot_ms']:6.2f} p99 {run['p99_tpot_ms']:6.2f} ms  "
        f"{run['duration']:6.1f} s, server CPU {run['server_cpu_s']:6.1f} s "
        f"({run['cpu_s_per_1k_tokens']:.3f} s/1k tok), {run['output_tokens']:,} tokens, "
        f"{run.get('preemptions', 0):,} preemptions"
        + (f", idle servers' CPU: {idle} s" if idle else "")
        + (f" (its trace processes {own:.1f} s)" if own else "")
        + cost
        + (", vLLM killed EngineCore at shutdown" if run.get("killed_at_shutdown") else "")
        + f", load {run['load']:.1f}"
    )


def footer(path: Path) -> dict[str, Any] | None:
    """The trace's footer record (written at shutdown), read from the file's tail."""
    if not path.exists():
        return None
    with path.open("rb") as f:
        f.seek(max(0, path.stat().st_size - 65536))
        for line in reversed(f.read().splitlines()):
            if line.startswith(b'{"kind":"footer"'):
                return json.loads(line)
    return None


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=3, help="rounds; each runs every contender once")
    ap.add_argument("--prompts", type=int, default=256, help="requests per measured run")
    ap.add_argument("--concurrency", type=int, default=64, help="bench serve --max-concurrency")
    ap.add_argument("--input-len", type=int, default=128, help="random tokens after the shared prefix")
    ap.add_argument("--prefix-len", type=int, default=64, help="shared prefix (prefix caching hits)")
    ap.add_argument("--output-len", type=int, default=128, help="output tokens per request (--ignore-eos)")
    ap.add_argument("--seed", type=int, default=0, help="bench serve --seed, the same for every run")
    ap.add_argument("--hidden-size", type=int, default=512, help="the model's hidden size (see above)")
    ap.add_argument("--layers", type=int, default=4, help="the model's layers")
    ap.add_argument(
        "--kv-mib",
        type=int,
        default=512,
        help="the server's KV cache, MiB (all requests fit; 128 puts the default workload under KV pressure)",
    )
    ap.add_argument("--servers", choices=("restart", "kept", "paused"), default="paused", help="see above")
    ap.add_argument(
        "--restart-every",
        type=int,
        metavar="K",
        help="kept or paused: start every server afresh every K rounds (default: every cycle of "
        "orders, 4 rounds with --control, 6 without; 0: never)",
    )
    ap.add_argument("--no-metrics", action="store_true", help="C with SCHEDSCOPE_METRICS=off")
    ap.add_argument(
        "--writer-thread",
        action="store_true",
        help="also D and E: B and C with SCHEDSCOPE_WRITER=thread (the writer thread in EngineCore)",
    )
    ap.add_argument(
        "--control",
        action="store_true",
        help="also A': a second stock contender, so A'/A states the bench's own spread",
    )
    ap.add_argument(
        "--engine-nice",
        type=int,
        default=0,
        metavar="N",
        help="renice each server's EngineCore and CPU worker to N once it is up (see above)",
    )
    ap.add_argument(
        "--pin",
        choices=("auto", "off"),
        default="auto",
        help="auto: the CPU worker alone on all CPUs but the last, the rest on it (see above)",
    )
    ap.add_argument("--quick", action="store_true", help="smoke: 1 round, 64 prompts")
    ap.add_argument(
        "--workdir",
        type=Path,
        help="keep logs, traces and results here (the rounds in rounds.json, saved after each round)",
    )
    ap.add_argument(
        "--pool",
        type=Path,
        nargs="+",
        metavar="ROUNDS_JSON",
        help="measure nothing: the summary and verdict of the rounds of earlier runs (their "
        "rounds.json, e.g. bench/data/live_overhead/), pooled; every run's rounds are paired in "
        "themselves, so runs of one workload and contenders pool",
    )
    return ap


def main(argv: list[str] | None = None) -> int:
    ap = parser()
    args = ap.parse_args(argv)
    if args.pool:
        return pool(args)
    # A SIGTERM unwinds like Ctrl-C, so every server (stopped or not) is continued and shut down.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    if args.quick:
        args.rounds, args.prompts = 1, 64
    if args.rounds < 1 or args.prompts < 1 or args.concurrency < 1:
        ap.error("--rounds, --prompts and --concurrency must be positive")
    if args.restart_every is not None and (args.restart_every < 0 or args.servers == "restart"):
        ap.error("--restart-every K takes K >= 0, with --servers kept or paused")

    tmp = None
    if args.workdir is None:
        tmp = tempfile.mkdtemp(prefix="schedscope-live-overhead-")
        workdir = Path(tmp)
    else:
        workdir = args.workdir
        workdir.mkdir(parents=True, exist_ok=True)
    try:
        return measure(args, workdir)
    finally:
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)


def measure(args: argparse.Namespace, workdir: Path) -> int:
    shape = f"{args.hidden_size}x{args.layers}"
    model = build_tiny_llama(
        Path(tempfile.gettempdir()) / f"schedscope-bench-llama-{shape}",
        hidden_size=args.hidden_size,
        num_layers=args.layers,
    )
    cs = contenders(
        workdir, max(256, 2 * args.concurrency), not args.no_metrics, args.writer_thread, args.control
    )
    kept, paused = args.servers != "restart", args.servers == "paused"
    orders = williams_orders(len(cs))
    every = args.restart_every
    if every is None:  # one cycle of orders per set of servers
        every = len(orders) if kept else 0
    placement = pin(args.pin)
    host = machine()
    print(f"Live server overhead: {host}; {placement}")
    header = (
        f"vllm bench serve: random {args.prefix_len}+{args.input_len} -> {args.output_len} tokens "
        f"(--ignore-eos), {args.prompts} prompts, "
        f"--max-concurrency {args.concurrency}, --seed {args.seed}; "
        f"server: Llama {shape} on CPU, {args.kv_mib} MiB KV cache, --async-scheduling, prefix caching, "
        f"--max-num-seqs {max(256, 2 * args.concurrency)}; "
        f"{args.rounds} rounds, Williams orders, servers {args.servers}"
        f"{f' (afresh every {every} rounds)' if every else ''}; "
        f"C: stream + one viewer, /metrics counting {'off' if args.no_metrics else 'on (default)'}"
        + (f"; EngineCore and its worker at nice {args.engine_nice}" if args.engine_nice else "")
    )
    print(header, flush=True)
    block = every or args.rounds
    failures: list[str] = []
    for first in range(0, args.rounds, block):
        with contextlib.ExitStack() as stack:
            if kept:
                if first:
                    print(f"  all servers started afresh (--restart-every {block})", flush=True)
                for c in cs:  # one at a time: three start-ups at once on 2 cores crawl
                    t0 = time.monotonic()
                    stack.enter_context(serving(c, model, workdir, args.kv_mib, args.engine_nice, paused))
                    warm_up(c, args, workdir)
                    if paused:  # a stopped server cannot shut down: continued before it stops
                        stack.callback(signal_server, c, signal.SIGCONT)
                        settle([c])
                        signal_server(c, signal.SIGSTOP)
                    print(f"  {LABEL[c.name]} up and warmed in {time.monotonic() - t0:.0f} s", flush=True)
            for r in range(first, min(first + block, args.rounds)):
                order = [cs[i] for i in orders[r % len(orders)]]
                print(f"  round {r + 1}/{args.rounds} ({', '.join(c.name for c in order)}):", flush=True)
                for c in order:
                    if paused:
                        signal_server(c, signal.SIGCONT)
                        try:
                            run = measured_run(c, [], args, workdir, f"r{r}")
                        finally:
                            signal_server(c, signal.SIGSTOP)
                    elif kept:
                        run = measured_run(c, [o for o in cs if o is not c], args, workdir, f"r{r}")
                    else:
                        run = restarted_run(c, model, args, workdir, f"r{r}", failures)
                    print(fmt_run(c, run), flush=True)
                save_rounds(workdir, host, header, cs)
        if kept:  # the block's servers stopped: their footers are written
            for c in cs:
                engine_cost(c, c.runs[first:])
            save_rounds(workdir, host, header, cs)
    # Every server is stopped here (footers written).
    report(cs, args, failures)
    if args.workdir is not None:
        print(f"The runs: {workdir / 'rounds.json'} (pool runs with --pool)")
    return 0


def save_rounds(workdir: Path, host: str, header: str, cs: list[Contender]) -> None:
    """Every whole round so far, in the workdir's rounds.json: written after each round (a run
    stopped or lost mid-way keeps what it measured) and replaced whole (a temporary file, then
    a rename), so the file is always one that `--pool` reads."""
    saved = workdir / "rounds.json"
    tmp = saved.with_suffix(".json.tmp")
    runs = {c.name: c.runs for c in cs}
    tmp.write_text(json.dumps({"host": host, "header": header, "runs": runs}, indent=1))
    tmp.replace(saved)


def workload_of(header: str) -> str:
    """A saved run's workload and server, from its header (the rounds and servers' handling
    may differ between runs that pool; these may not)."""
    return "; ".join(header.split("; ")[:2])


def pool(args: argparse.Namespace) -> int:
    """`--pool`: the rounds of earlier runs (their rounds.json), one after another, summarized as
    one run (traces and viewers are not read again: their lines are the runs' own)."""
    runs: dict[str, list[dict]] = {}
    first: str | None = None
    for path in args.pool:
        try:
            saved = json.loads(path.read_text())
            names = list(saved["runs"])
            if runs and names != list(runs):
                raise SystemExit(f"{path}: contenders {names}, not {list(runs)} as the files before it")
            load = workload_of(saved["header"])
            if first is not None and load != first:
                raise SystemExit(f"{path}: workload {load!r}, not {first!r} as the files before it")
            first = load
            host = saved.get("host", "host not recorded")
            print(f"  {path}: {len(saved['runs'][names[0]])} rounds; {host}; {saved['header']}")
            for name in names:
                runs.setdefault(name, []).extend(saved["runs"][name])
        except (OSError, ValueError, KeyError, IndexError) as exc:
            raise SystemExit(f"{path}: not a rounds.json of this bench ({exc!r})") from exc
    cs = [Contender(name, [], {}, runs=rs) for name, rs in runs.items()]
    args.rounds = len(cs[0].runs)
    report(cs, args, [])
    return 0


def report(cs: list[Contender], args: argparse.Namespace, failures: list[str]) -> None:
    """The summary: failures, the traces' and viewers' health, the ratios per figure, the
    tracer's share of EngineCore, and the verdict line."""
    tokens = {run["output_tokens"] for c in cs for run in c.runs}
    if len(tokens) != 1:
        raise RuntimeError(f"the contenders made different numbers of output tokens: {sorted(tokens)}")
    print(f"  runs with failed requests, each run again: {len(failures)}")
    for f in failures:
        print(f"    {f}")
    if args.servers == "restart" and not args.pool:
        killed = ", ".join(
            f"{c.name} {sum(r['killed_at_shutdown'] for r in c.runs)}/{len(c.runs)}" for c in cs
        )
        print(f"  EngineCores vLLM killed at shutdown (a traced one loses its footer): {killed}")
    for c in cs[1:]:
        if c.trace is None:
            continue  # the control: a stock server
        f = footer(c.trace)
        if f is None:
            print(f"  {LABEL[c.name]}: no trace footer in {c.trace}")
        else:
            print(
                f"  {LABEL[c.name]} trace (its last server's, warm-up included): "
                f"{f.get('steps_written')} steps, "
                f"{f.get('records_dropped')} records dropped, {f.get('errors')} tracer errors"
            )
        if c.viewer is not None:
            v = c.viewer
            print(
                f"  {LABEL[c.name]} viewer: {v.lines} lines, {v.bytes / 1e6:.1f} MB read, "
                f"last step {v.last_step}, {v.connects} connection(s), {v.gaps} gap(s)"
                + (f", last error {v.error}" if v.error and v.connects > 1 else "")
            )
    stock = cs[0].runs
    ratios: dict[str, dict[str, list[float]]] = {}
    print("  ratios per round, median (min, max, n):")
    for c in cs[1:]:
        ratios[c.name] = {}
        for key, name, _ in FIGURES:
            values = [run[key] / base[key] for run, base in zip(c.runs, stock, strict=True) if base[key] > 0]
            ratios[c.name][key] = values
            print(f"    {short(c)}/A {name:20s} {fmt_spread(values)}")
    control = next((c for c in cs if c.name == "control"), None)
    # The verdict's figures: each tracing contender's output tok/s and TPOT p50 against the
    # round's stock runs (both, with the control: the reference's variance halved), as a mean
    # with a 95% bootstrap interval over the rounds. The control's own, against A, should hold 1.
    verdicts = []
    for key, figure, higher_better in VERDICT_FIGURES:
        for c in cs[1:]:
            if c is control:
                values, name = ratios[c.name][key], "A'/A"
            elif control is not None:
                values = [
                    run[key] / ((a[key] + a2[key]) / 2)
                    for run, a, a2 in zip(c.runs, stock, control.runs, strict=True)
                ]
                name = f"{short(c)}/(A+A')/2"
                print(f"    {name} {figure:14s} {fmt_spread(values)}")
            else:
                values, name = ratios[c.name][key], f"{short(c)}/A"
            lo, mean, hi = mean_interval(values)
            if c is control:
                verdict = "holds 1" if lo <= 1 <= hi else "does NOT hold 1: the bench leans"
            else:
                goal = GOAL[c.name] if higher_better else TPOT_GOAL
                ok, bad = (lo >= goal, hi < goal) if higher_better else (hi <= goal, lo > goal)
                verdict = "met" if ok else "NOT met" if bad else "not resolved"
                verdict = f"goal {'>=' if higher_better else '<='} {goal:.2f}x {verdict}"
            verdicts.append(f"{name} {figure} mean {mean:.3f}x (95% {lo:.3f}-{hi:.3f}): {verdict}")
            print(f"    {verdicts[-1]}")
    for c in cs[1:]:
        shares = [run["engine_share"] for run in c.runs if "engine_share" in run]
        if shares:
            lo, med, hi = spread(shares)
            hooks = spread([run["hooks_us_per_step"] for run in c.runs if "engine_share" in run])[1]
            writer = spread([run["writer_us_per_step"] for run in c.runs if "engine_share" in run])[1]
            print(
                f"    {short(c)} EngineCore's time in the tracer (footer): {med:.2%} of a run "
                f"(min {lo:.2%}, max {hi:.2%}); hooks {hooks:.0f} + writer thread {writer:.0f} µs/step"
            )
    parts = []
    for c in cs[1:]:
        lo, med, hi = spread(ratios[c.name]["output_throughput"])
        ttft = spread(ratios[c.name]["p99_ttft_ms"])[1]
        tpot50 = spread(ratios[c.name]["median_tpot_ms"])[1]
        tpot = spread(ratios[c.name]["p99_tpot_ms"])[1]
        parts.append(
            f"{short(c)}/A {med:.3f}x (min {lo:.3f}, max {hi:.3f}; "
            f"TTFT p99 {ttft:.3f}x, TPOT p50 {tpot50:.3f}x, p99 {tpot:.3f}x)"
        )
    print(
        f"Live overhead figure: output tok/s at {args.concurrency} concurrent, {args.rounds} rounds, "
        f"median per round: " + "; ".join(parts) + ". Verdict: " + "; ".join(verdicts)
    )


if __name__ == "__main__":
    code = main()
    sys.stdout.flush()
    os._exit(code)
