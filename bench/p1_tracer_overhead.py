#!/usr/bin/env python3
"""P1: tracer overhead on vLLM's real Scheduler, offline.

Three real schedulers get the same workload: vLLM's stock `Scheduler` (A), a
second stock scheduler (A', the control: what the harness reports when
nothing differs) and `tracer.scheduler.TracingScheduler` with SCHEDSCOPE_TRACE
set (B). N requests with short prompts and huge max_tokens stay running, so
after a few warm-up steps every step is a steady-state decode step with ngram
K=3 drafts and a deterministic mix of full, partial and no acceptance.

The three take each step back to back (the order rotates from step to step, so
all see the same machine noise). Each steps in EngineCore's order (`Loop`): the
previous step's update_from_output(), the drafts' update_draft_token_ids(), then
schedule(); update_from_output() and schedule() are timed, in the thread's CPU
time (wall time beside it: on a shared machine a co-tenant taking the core
mid-step lands in wall time only). The forward pass falls between schedule() and
the next update_from_output(); there the writer drains and the other contenders
take their steps, so each update_from_output() starts with a cold cache and the
schedule() after it finds the requests warm, as in a server. (Until 2026-12-07 the
forward pass came between update_from_output() and the next schedule(), so the
recorder's `before_schedule` met requests no server leaves cold.) A round is
`--block` steps; ratio per round = B/A (and A'/A); the figure is the median
over rounds.

Each contender is a class of its own (A' an empty subclass of `Scheduler`): vLLM's
code is shared by all of them, and CPython specializes its attribute reads on
`self` for one class at a time, so a step that follows another class's step
starts with misses. Were A and A' one class, every contender of another class
(B, the baseline) would pay that more often than A: an empty subclass of
`Scheduler` timed that way beside two stock ones read 1.013-1.014x (beside three,
1.009-1.011x). A server runs one class only; here every contender pays alike.

In the forward pass the trace writer drains, outside the timed calls, as it does in
a server while the engine waits for the model (the GIL is released then). So the
ratio is the scheduler thread's cost; the writer
thread's encoding is reported beside it, per step, from a separate timed pass, and so is
the CPU of the process that builds the trace's recording index beside the server
(tracer.trace.index_follower), which the scheduler thread never waits for.

`--baseline REF` loads the whole `tracer` package of git revision REF beside today's
and times its TracingScheduler in the same rounds: before and after in one run.
`--baseline hooks-off` times today's TracingScheduler with its recorder's hooks emptied
instead (the wrappers, clock reads, writer and trace process all as B's, nothing noted):
B against it is what the hooks cost, it against stock what the rest costs.

The order the contenders are built in matters too: a scheduler built later reads slower (its
requests' objects land elsewhere in the heap), by up to 1.7% between two slots running the
same code. So the run is split into processes, one per build order: rotation r builds the
contender in slot (r + i) mod m i-th, so each is built first once, second once, and so on
(a Latin square over m contenders). The figures pool every process's rounds, and each
rotation's median is printed beside them; the control A'/A then reads what the harness
reports when nothing differs, build order included.

    .venv/bin/python bench/p1_tracer_overhead.py            # 32, 256, 1024 running requests
    .venv/bin/python bench/p1_tracer_overhead.py --quick    # 256 only, fewer rounds
    .venv/bin/python bench/p1_tracer_overhead.py --requests 256 --baseline cd1c43d
    .venv/bin/python bench/p1_tracer_overhead.py --requests 256 --baseline hooks-off
    .venv/bin/python bench/p1_tracer_overhead.py --requests 256 --rotation 0   # one build order, in-process
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import resource
import sys
import tempfile
import time
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from _common import fmt_spread, machine, spread

PROMPT = 32
MAX_TOKENS = 60_000
K = 3
# Requests kept waiting behind max_num_seqs (--waiting): a busy server's queue, which the
# recorder lists (and, since format 1.3, reads the states of) every step.
WAITING = 0


def request_id(i: int) -> str:
    """Request ids shaped like a server's (cmpl-<16 hex>-0-<8 hex>), so trace sizes are real."""
    h = hashlib.blake2b(str(i).encode(), digest_size=12).hexdigest()
    return f"cmpl-{h[:16]}-0-{h[16:]}"


def mixed_accept(req_id: str, step: int, drafts: int) -> int:
    """Full, partial and no acceptance, varying by request and step (deterministic)."""
    return (step + zlib.crc32(req_id.encode())) % (drafts + 1)


def build(n: int, steps: int, cls: type | None = None, trace: Path | None = None) -> Any:
    """A real vLLM scheduler (`cls`, default the stock Scheduler) with `n` requests that
    stay running for `steps` steps; recording to `trace` when given."""
    from tracer.whatif.offline import EngineSpec, build_scheduler, make_request

    tokens_per_req = PROMPT + (K + 1) * (steps + 8)
    spec = EngineSpec(
        method="ngram",
        num_speculative_tokens=K,
        max_num_batched_tokens=max(8192, (K + 1) * n),
        max_num_seqs=n,
        max_model_len=65536,
        num_kv_blocks=n * (tokens_per_req // 16 + 2) + 64,
    )
    saved = os.environ.pop("SCHEDSCOPE_TRACE", None)
    try:
        if trace is not None:
            os.environ["SCHEDSCOPE_TRACE"] = str(trace)
        sched = build_scheduler(spec, cls)
    finally:
        os.environ.pop("SCHEDSCOPE_TRACE", None)
        if saved is not None:
            os.environ["SCHEDSCOPE_TRACE"] = saved
    for i in range(n + WAITING):
        sched.add_request(make_request(request_id(i), PROMPT, MAX_TOKENS))
    return sched


def build_contenders(n: int, steps: int, workdir: Path, baseline: type | None, rotation: int) -> list[Any]:
    """[stock Scheduler, the control (an empty subclass of it), TracingScheduler recording,
    and the baseline revision's TracingScheduler if any], built in rotation `rotation`'s order:
    slot (rotation + i) mod m i-th. Each is a class of its own, so each pays the same when the
    steps switch between them."""
    from vllm.v1.core.sched.scheduler import Scheduler

    from tracer.scheduler import TracingScheduler

    classes: list[type | None] = [None, type("StockControl", (Scheduler,), {}), TracingScheduler]
    traces: list[Path | None] = [None, None, workdir / f"p1_{n}.jsonl"]
    if baseline is not None:
        classes.append(baseline)
        traces.append(workdir / f"p1_{n}_before.jsonl")
    built: list[Any] = [None] * len(classes)
    for i in range(len(classes)):
        slot = (rotation + i) % len(classes)
        built[slot] = build(n, steps, classes[slot], traces[slot])
    for sched in built[2:]:
        assert sched._schedscope is not None, "recording must be on"
    return built


# `--baseline` names this instead of a git revision: today's tracer, its hooks emptied.
HOOKS_OFF = "hooks-off"
# The recorder's scheduler-thread hooks (tracer.record.recorder): those `hook_times` times per
# step, and all of them, which HOOKS_OFF empties.
STEP_HOOKS = ("before_schedule", "after_schedule", "after_update", "on_drafts")
RECORDER_HOOKS = (*STEP_HOOKS, "on_add", "on_finish", "on_preempt")


def _noted_nothing(*args: Any, **kwargs: Any) -> None:
    return None


def hooks_off_scheduler() -> type:
    """Today's TracingScheduler with every recorder hook a no-op: its wrappers, its clock
    reads, its writer and its trace process are B's, and it notes nothing (its trace holds
    the header only)."""
    from tracer.scheduler import TracingScheduler

    class HooksOff(TracingScheduler):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            for name in RECORDER_HOOKS:
                setattr(self._schedscope, name, _noted_nothing)

    return HooksOff


def baseline_scheduler(ref: str, workdir: Path) -> type:
    """The TracingScheduler of git revision `ref`, its whole `tracer` package loaded beside
    today's (as `tracer_before`), so one run times today's tracer against an earlier one:
    its hooks on the scheduler thread and its writer thread, whatever modules they live in.
    `HOOKS_OFF` instead: today's, its hooks emptied (`hooks_off_scheduler`)."""
    if ref == HOOKS_OFF:
        return hooks_off_scheduler()
    import io
    import re
    import subprocess
    import tarfile

    root = Path(__file__).resolve().parent.parent
    tree = workdir / "before"
    archive = subprocess.run(
        ["git", "-C", str(root), "archive", ref, "tracer"], check=True, capture_output=True
    )
    with tarfile.open(fileobj=io.BytesIO(archive.stdout)) as tar:
        tar.extractall(tree, filter="data")
    (tree / "tracer").rename(tree / "tracer_before")
    own = re.compile(r"\b(from|import) tracer\b|\"tracer\.")
    # A bare `import tracer` keeps its name: its module reads `tracer.__file__` (record/indexer).
    bare = re.compile(r"^import tracer$", re.MULTILINE)
    for module in (tree / "tracer_before").rglob("*.py"):
        text = bare.sub("import tracer_before as tracer", module.read_text())
        module.write_text(own.sub(lambda m: m.group(0).replace("tracer", "tracer_before"), text))
    sys.path.insert(0, str(tree))
    from tracer_before.scheduler import TracingScheduler  # type: ignore[import-not-found]

    return TracingScheduler


class Loop:
    """Steps one scheduler in EngineCore's order and times the scheduler thread's calls of a step.

    EngineCore (vllm/v1/engine/core.py: `step`, `post_step`, `step_with_batch_queue`) calls
    schedule(), waits for the forward pass, then update_from_output() and, with drafts,
    update_draft_token_ids(), and goes straight on to the next schedule(). So the forward pass
    (`gap`: the writer drains then, its GIL released, and here the other contenders run) sits
    between schedule() and update_from_output(), and a step runs the previous output's
    update_from_output(), the drafts' update_draft_token_ids(), then schedule(), back to back
    as in a server. P1 times update_from_output() and schedule(); the model's output and the
    drafts are made untimed, and update_draft_token_ids() runs untimed (its hook is timed
    apart, in `hook_times`).
    """

    def __init__(self, sched: Any, gap: Callable[[], Any] | None = None) -> None:
        from tracer.whatif.offline import Driver

        self.sched = sched
        self.driver = Driver(sched, mixed_accept)
        self.gap = gap
        self.pending: Any = None  # the SchedulerOutput whose forward pass is under way

    def apply(self) -> tuple[int, int]:
        """The pending output applied and the next drafts handed over: (CPU ns, wall ns) in
        update_from_output()."""
        from vllm.v1.outputs import DraftTokenIds

        if self.pending is None:
            return 0, 0
        sched, cpu, wall = self.sched, time.thread_time_ns, time.perf_counter_ns
        runner_output = self.driver.model_output(self.pending)  # the forward pass's result
        w0, c0 = wall(), cpu()
        sched.update_from_output(self.pending, runner_output)
        c1, w1 = cpu(), wall()
        self.pending = None
        ids = [r.request_id for r in sched.running]  # the proposer's drafts
        drafts = DraftTokenIds(req_ids=ids, draft_token_ids=[[7] * K for _ in ids])
        sched.update_draft_token_ids(drafts)
        return c1 - c0, w1 - w0

    def step(self) -> tuple[int, int, int]:
        """One engine step: (CPU ns and wall ns in update_from_output() + schedule(),
        tokens scheduled). CPU time is this thread's:
        a co-tenant taking the core mid-step does not count, which on a shared machine is
        most of the noise."""
        cpu_ns, wall_ns = self.apply()
        self.driver.step_index += 1
        w0, c0 = time.perf_counter_ns(), time.thread_time_ns()
        out = self.sched.schedule()
        c1, w1 = time.thread_time_ns(), time.perf_counter_ns()
        self.pending = out
        if self.gap is not None:
            self.gap()  # the model's forward pass: the writer drains here, untimed
        return cpu_ns + (c1 - c0), wall_ns + (w1 - w0), out.total_num_scheduled_tokens

    def run(self, k: int) -> int:
        return sum(self.step()[0] for _ in range(k))

    def finish(self) -> None:
        """The last output applied, so its step is recorded with its outcomes."""
        self.apply()


def measure(
    n: int,
    rounds: int,
    block: int,
    warmup: int,
    breakdown_steps: int,
    workdir: Path,
    baseline: type | None = None,
    rotation: int = 0,
) -> dict:
    import itertools

    from vllm.utils.gc_utils import freeze_gc_heap

    steps = warmup + rounds * block + breakdown_steps
    # With a baseline, today's tracer (B) against an earlier revision's (C), in the same rounds.
    stock, control, traced, *rest = build_contenders(n, steps, workdir, baseline, rotation)
    rec = traced._schedscope
    loops = [Loop(stock), Loop(control), Loop(traced, rec.writer.force_flush)]
    before = rest[0] if rest else None
    if before is not None:
        loops.append(Loop(before, before._schedscope.writer.force_flush))
    for loop in loops:
        loop.run(warmup)
    assert len(stock.running) == len(traced.running) == n, "all requests must be running"
    assert len(traced.waiting) == WAITING, "the queue must stay"
    freeze_gc_heap()  # as EngineCore does after start-up
    # Orders cycle through every permutation, so no scheduler always goes first.
    orders = list(itertools.permutations(range(len(loops))))
    rounds_ns: list[list[int]] = []
    rounds_wall: list[list[int]] = []
    for _ in range(rounds):
        ns, wall_ns = [0] * len(loops), [0] * len(loops)
        for i in range(block):
            tokens = [0] * len(loops)
            for j in orders[i % len(orders)]:
                dt, dw, tokens[j] = loops[j].step()
                ns[j] += dt
                wall_ns[j] += dw
            assert len(set(tokens)) == 1, "the schedulers diverged"
        rounds_ns.append(ns)
        rounds_wall.append(wall_ns)
    assert len(traced.running) == n
    parts = hook_times(rec, loops[2], breakdown_steps)
    parts_before = hook_times(before._schedscope, loops[3], breakdown_steps) if before is not None else None
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    traced.shutdown()  # the recording index's follower process ends with the writer and is reaped
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    for sched in (stock, control) + ((before,) if before is not None else ()):
        sched.shutdown()
    follower = after.ru_utime + after.ru_stime - children.ru_utime - children.ru_stime
    if follower > 0:  # today's tracer: the index is built by that process, not the writer thread
        parts["follower_total"] = follower * 1e6  # start-up and polling: the trace stays small
        parts["follower"] = follow_cpu(workdir / f"p1_{n}.jsonl", workdir / f"p1_{n}_again.jsonl") / steps
    return {
        "n": n,
        "rotation": rotation,
        "ratio": [r[2] / r[0] for r in rounds_ns],
        "control": [r[1] / r[0] for r in rounds_ns],
        "wall_ratio": [r[2] / r[0] for r in rounds_wall],
        "us_stock": [r[0] / block / 1000 for r in rounds_ns],
        "us_traced": [r[2] / block / 1000 for r in rounds_ns],
        # With a baseline: its ratio to stock, and today's step minus the baseline's, in % of stock.
        "ratio_before": [r[3] / r[0] for r in rounds_ns] if before is not None else None,
        "delta_pct": [100 * (r[2] - r[3]) / r[0] for r in rounds_ns] if before is not None else None,
        "parts_before": parts_before,
        "parts": parts,
        "dropped": rec.writer.dropped,
        "errors": rec.errors,
    }


def follow_cpu(trace: Path, copy: Path) -> float:
    """CPU µs the recording index's follower (tracer.trace.index_follower) takes over a copy of
    the finished `trace`, in this thread: its steady cost, without its start-up."""
    import shutil

    from tracer.trace import sidecar
    from tracer.trace.index_follower import follow

    shutil.copyfile(trace, copy)
    # P1's trace stays under the size below which no index is written (and nothing parsed):
    # priced here as the part of a long recording past it.
    sidecar.MIN_SOURCE_BYTES, small = 0, sidecar.MIN_SOURCE_BYTES
    r, w = os.pipe()
    os.close(w)  # the writer is done: the follower reads to the end once
    t0 = time.thread_time_ns()
    index = follow(str(copy), interval_s=0, stdin=r)
    spent = time.thread_time_ns() - t0
    sidecar.MIN_SOURCE_BYTES = small
    os.close(r)
    assert index.failed is None, index.failed
    return spent / 1000


def hook_times(rec: Any, loop: Loop, steps: int) -> dict[str, float]:
    """Median µs per step in each recorder hook (scheduler thread) and in encoding
    a step (writer thread). A separate pass: the timing wrappers cost a little.

    Also the hooks on the engine's other calls into the scheduler (format 1.1's
    inputs), which run on the scheduler thread outside schedule() and
    update_from_output(), so the ratio does not include them: `on_drafts` per step
    (update_draft_token_ids, every request of the batch), `on_add` per request
    (add_request) and `on_finish` per call (an abort)."""
    import statistics

    times: dict[str, list[int]] = {}

    def timed(name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        def wrapper(*args: Any, **kw: Any) -> Any:
            t0 = time.thread_time_ns()  # CPU time of the calling thread, as in the rounds
            try:
                return fn(*args, **kw)
            finally:
                times.setdefault(name, []).append(time.thread_time_ns() - t0)

        return wrapper

    hooks = STEP_HOOKS
    own = {name: vars(rec)[name] for name in hooks if name in vars(rec)}  # HOOKS_OFF's no-ops
    for name in hooks:
        setattr(rec, name, timed(name, getattr(rec, name)))
    # Bench-only peeks at EngineCore's writer thread: what it does per step. A writer thread
    # encodes (SCHEDSCOPE_WRITER=thread, and revisions before the trace process); the shipper
    # makes the step portable, pickles it and writes it to the trace process's pipe.
    if hasattr(rec.writer, "_encode"):
        rec.writer._encode = timed("encode", rec.writer._encode)
    else:
        rec.writer._ship = timed("ship", rec.writer._ship)
    # A revision whose writer thread feeds the recording index (tracer.trace.recording_index) per record.
    index = getattr(rec.writer, "_index", None)
    if not hasattr(index, "add"):
        index = None  # today's: a process beside the server builds it (follow_cpu)
    if index is not None:
        index.add = timed("recording_index", index.add)
    loop.run(steps)
    for name in hooks:
        if name in own:
            setattr(rec, name, own[name])
        else:
            delattr(rec, name)
    if "ship" in times:  # a frame a step (the loop flushes after each), empty ones aside
        times["ship"] = times["ship"][:steps]
    if index is not None:
        del index.add
    # add_request / an abort, on the running requests' objects; what they note is discarded.
    wrapped_add, wrapped_finish = timed("on_add", rec.on_add), timed("on_finish", rec.on_finish)
    for request in list(loop.sched.running):
        wrapped_add(request)
        wrapped_finish([request.request_id], "FINISHED_ABORTED")
    rec._inputs.clear()  # bench-only: the next step must not carry the fake inputs
    out = {name: statistics.median(v) / 1000 for name, v in times.items()}
    if "recording_index" in times:  # per step, all its records (the step and its runner records) together
        out["recording_index"] = sum(times["recording_index"]) / steps / 1000
    return out


def measure_sizes(args: argparse.Namespace, sizes: list[int], rotation: int) -> list[dict]:
    """Every size's rounds in this process, its contenders built in `rotation`'s order."""
    results = []
    with tempfile.TemporaryDirectory(prefix="schedscope-p1-") as tmp:
        baseline = baseline_scheduler(args.baseline, Path(tmp)) if args.baseline else None
        for n in sizes:
            results.append(
                measure(
                    n, args.rounds, args.block, args.warmup, 3 * args.block, Path(tmp), baseline, rotation
                )
            )
    return results


def run_rotations(args: argparse.Namespace, rotations: int, rounds: int) -> list[list[dict]]:
    """Each build order in a process of its own (a fresh heap each), one after the other."""
    import subprocess

    own = ["--requests", args.requests, "--block", str(args.block), "--warmup", str(args.warmup)]
    own += ["--waiting", str(args.waiting)] + (["--baseline", args.baseline] if args.baseline else [])
    out = []
    with tempfile.TemporaryDirectory(prefix="schedscope-p1-rot-") as tmp:
        for r in range(rotations):
            print(f"  build order {r + 1}/{rotations} ({rounds} rounds) ...", flush=True)
            path = Path(tmp) / f"rotation{r}.json"
            cmd = [
                sys.executable,
                __file__,
                *own,
                "--rounds",
                str(rounds),
                "--rotation",
                str(r),
                "--json",
                str(path),
            ]
            subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
            out.append(json.loads(path.read_text()))
    return out


POOLED = ("ratio", "control", "wall_ratio", "us_stock", "us_traced", "ratio_before", "delta_pct")


def pool(per_rotation: list[list[dict]]) -> list[dict]:
    """Each size's rounds from every build order together; each order's medians kept beside."""
    import statistics

    pooled = []
    for by_size in zip(*per_rotation, strict=True):
        res = dict(by_size[0])
        for key in POOLED:
            if res[key] is not None:
                res[key] = [v for r in by_size for v in r[key]]
        for key in ("parts", "parts_before"):
            if res[key] is not None:
                names = dict.fromkeys(k for r in by_size for k in r[key])  # "follower": only if it ran
                res[key] = {k: statistics.median(r[key][k] for r in by_size if k in r[key]) for k in names}
        res["dropped"] = sum(r["dropped"] for r in by_size)
        res["errors"] = sum(r["errors"] for r in by_size)
        res["by_rotation"] = [
            {k: statistics.median(r[k]) for k in ("ratio", "control", "ratio_before") if r[k] is not None}
            for r in by_size
        ]
        pooled.append(res)
    return pooled


def report(res: dict, baseline_ref: str | None) -> None:
    """One size's figures: pooled over the build orders, each order's medians beside."""
    n = res["n"]
    stock_us, traced_us = spread(res["us_stock"])[1], spread(res["us_traced"])[1]
    parts = res["parts"]
    engine_side = ("on_drafts", "on_add", "on_finish")
    writer_side = ("encode", "ship", "recording_index", "follower", "follower_total")
    hooks = sum(v for k, v in parts.items() if k not in writer_side and k not in engine_side)
    print(
        f"  {n:5d} running: stock {stock_us:8.1f} us/step, traced {traced_us:8.1f} us/step\n"
        f"        traced/stock {fmt_spread(res['ratio'])}\n"
        f"        (wall clock) {fmt_spread(res['wall_ratio'])}\n"
        f"        control A'/A {fmt_spread(res['control'])}\n"
        f"        tracer hooks {hooks:.1f} us/step on the scheduler thread ("
        + ", ".join(f"{k} {v:.1f}" for k, v in parts.items() if k not in writer_side and k not in engine_side)
        + f"); outside the timed calls: on_drafts {parts.get('on_drafts', 0.0):.1f} us/step, "
        f"on_add {parts.get('on_add', 0.0):.2f} us/request, "
        f"on_finish {parts.get('on_finish', 0.0):.2f} us/call; "
        + (
            f"writer thread encodes a step in {parts['encode']:.1f} us "
            f"({parts['encode'] / stock_us:.1%} of a stock step)"
            if "encode" in parts
            else f"writer thread ships a step (trace process) in {parts.get('ship', 0.0):.1f} us "
            f"({parts.get('ship', 0.0) / stock_us:.1%} of a stock step)"
        )
        + (
            f", and its recording index takes {parts['recording_index']:.1f} us of a step's records "
            f"({parts['recording_index'] / stock_us:.2%})"
            if "recording_index" in parts
            else ""
        )
        + (
            f"; the recording index's follower process (another core, nice 10) takes "
            f"{parts['follower']:.1f} us of CPU a step past 16 MiB of trace; the processes "
            f"beside the server (the trace process, if any, and the follower) took "
            f"{parts['follower_total'] / 1000:.0f} ms of CPU in all"
            if "follower" in parts
            else ""
        )
        + "; "
        f"dropped {res['dropped']}, tracer errors {res['errors']}",
        flush=True,
    )
    if res["ratio_before"] is not None:
        pb = res["parts_before"]
        hooks_before = sum(v for k, v in pb.items() if k not in writer_side and k not in engine_side)
        writer_before = pb.get("encode", 0.0) + pb.get("ship", 0.0) + pb.get("recording_index", 0.0)
        writer_after = parts.get("encode", 0.0) + parts.get("ship", 0.0) + parts.get("recording_index", 0.0)
        print(
            f"        baseline {baseline_ref}: traced/stock {fmt_spread(res['ratio_before'])}\n"
            f"        today - baseline, % of a stock step: {fmt_spread(res['delta_pct'], '%', 2)}\n"
            f"        hooks {hooks_before:.1f} us/step before, {hooks:.1f} after; "
            f"EngineCore's writer thread per step (encode or ship, + recording index): "
            f"{writer_before:.1f} us before, {writer_after:.1f} after, "
            f"{(writer_after - writer_before) / stock_us:+.2%} "
            "of a stock step",
            flush=True,
        )
    for r, med in enumerate(res.get("by_rotation", ())):
        print(
            f"        build order {r + 1}: traced/stock {med['ratio']:.3f}x, control {med['control']:.3f}x"
            + (f", baseline {med['ratio_before']:.3f}x" if "ratio_before" in med else ""),
            flush=True,
        )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--requests", default="32,256,1024", help="running requests, comma-separated")
    ap.add_argument("--rounds", type=int, default=30, help="rounds per configuration")
    ap.add_argument("--block", type=int, default=20, help="steps per scheduler per round")
    ap.add_argument("--warmup", type=int, default=16, help="steps before timing (prefill done)")
    ap.add_argument("--quick", action="store_true", help="256 requests, 8 rounds of 10 steps")
    ap.add_argument(
        "--baseline",
        metavar="REF",
        help="also time the tracer of git revision REF in the same rounds (before/after in one run); "
        f"'{HOOKS_OFF}': today's tracer with its recorder hooks emptied (what the hooks cost)",
    )
    ap.add_argument("--waiting", type=int, default=0, help="requests kept waiting behind max_num_seqs")
    ap.add_argument(
        "--rotations",
        type=int,
        help="build orders to run, one process each, the rounds shared out among them "
        "(default: one per contender, so each is built first once)",
    )
    ap.add_argument(
        "--rotation", type=int, help="run one build order in this process (what each of those processes runs)"
    )
    ap.add_argument("--json", metavar="FILE", help=argparse.SUPPRESS)  # a rotation's results, for the parent
    args = ap.parse_args(argv)
    global WAITING
    WAITING = args.waiting
    if args.quick:
        args.requests, args.rounds, args.block = "256", 8, 10
    sizes = [int(x) for x in args.requests.split(",")]

    import logging

    logging.disable(logging.WARNING)  # vLLM's config chatter
    print(f"P1 tracer overhead: {machine()}")
    contenders = 4 if args.baseline else 3
    orders = (
        "one build order"
        if args.rotation is not None
        else f"{min(args.rotations or contenders, contenders)} build orders, a process each"
    )
    print(
        f"ngram K={K}, prompts {PROMPT} tokens, {args.rounds} rounds x {args.block} steps in {orders}, "
        "stock (A) / stock subclass (A', control) / traced (B) rotated step by step"
    )
    if args.rotation is not None:
        results = measure_sizes(args, sizes, args.rotation)
        if args.json:
            Path(args.json).write_text(json.dumps(results))
            return 0
    else:
        rotations = min(args.rotations or contenders, contenders)
        results = pool(run_rotations(args, rotations, -(-args.rounds // rotations)))
    for res in results:
        report(res, args.baseline)
    headline = next((r for r in results if r["n"] == 256), results[0])
    lo, med, hi = spread(headline["ratio"])
    verdict = "met" if med <= 1.01 else "NOT met"
    print(
        f"P1 figure: traced/stock schedule()+update_from_output() at {headline['n']} running requests, "
        "in EngineCore's order: "
        f"{med:.3f}x (min {lo:.3f}, max {hi:.3f}; control {spread(headline['control'])[1]:.3f}x); "
        f"target <= 1.01x: {verdict}"
    )
    return 0


if __name__ == "__main__":
    code = main()
    sys.stdout.flush()
    # Skip interpreter teardown: triton's nanobind bindings (imported by vLLM)
    # print leak reports at exit, after the figure that must come last.
    os._exit(code)
