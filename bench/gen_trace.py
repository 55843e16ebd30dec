#!/usr/bin/env python3
"""Write a synthetic trace in the real format, for the ingest and size benchmarks.

The records are not written by this script: a small simulated scheduler stands
in for vLLM's (same attribute names as `Scheduler`, `Request`,
`SchedulerOutput` and `ModelRunnerOutput`) and is fed through
`tracer.record.recorder.Recorder`'s own hooks and encoder and its writer thread
(tracer.record.writer.TraceWriter), so the file is exactly what the recorder writes:
header, step, runner and footer records, and for a plain file its recording index
(`<trace>.ssidx`, tracer.trace.recording_index; `--no-index` leaves it out).

The mix is what a busy server looks like: Poisson-ish arrivals with
log-normal prompt and output lengths, chunked prefills under the token
budget, decodes with K draft tokens and partial acceptance, a KV cache small
enough that requests get preempted (and resumed), a waiting queue, and
vLLM-style request ids. Deterministic for a given --seed.

    .venv/bin/python bench/gen_trace.py /tmp/trace.jsonl              # 1,000,000 steps
    .venv/bin/python bench/gen_trace.py /tmp/trace.jsonl.gz --steps 50000
"""

from __future__ import annotations

import argparse
import math
import random
import sys
import time
from collections import deque
from pathlib import Path
from types import SimpleNamespace
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tracer.record.indexer import IndexProcess
from tracer.record.recorder import Recorder
from tracer.record.snapshot import RUNNER_NOTES_ATTR, RunnerNote
from tracer.record.writer import TraceWriter, open_sink
from tracer.trace import schema

BLOCK = 16


class GenWriter(TraceWriter):
    """The recorder's own writer thread (and, for a plain file, its recording index's process), fed faster
    than a server would: nothing may be dropped, so the queue is unbounded and the generator
    waits for the writer every `FLUSH_EVERY` items (`pace`)."""

    FLUSH_EVERY = 2048

    def __init__(self, path: Path, *, index: bool, interval_s: float) -> None:
        if path.exists():
            path.unlink()
        sink = open_sink(path)  # created before its follower opens it
        follower = IndexProcess.start(path, interval_s=interval_s) if index else None
        super().__init__(sink, max_queue=1 << 62, index=follower)
        self.t0: float | None = None
        self._since = 0

    def emit(self, item: Any) -> bool:
        if isinstance(item, dict) and item.get("kind") == schema.HEADER:
            self.t0 = item["t0"]
        self._since += 1
        if self._since >= self.FLUSH_EVERY:
            self.force_flush(timeout=600.0)
            self._since = 0
        return super().emit(item)


class Req:
    """The attributes of vllm.v1.request.Request that the recorder reads."""

    __slots__ = ("blocks", "max_tokens", "num_computed_tokens", "num_tokens", "output", "request_id")
    __slots__ += ("num_output_placeholders", "spec_token_ids", "status")

    def __init__(self, rid: str, prompt: int, max_tokens: int) -> None:
        self.request_id = rid
        self.num_tokens = prompt
        self.max_tokens = max_tokens
        self.output = 0
        self.num_computed_tokens = 0
        self.num_output_placeholders = 0
        self.spec_token_ids: list[int] = []
        self.blocks = 0
        self.status = "WAITING"  # the waiting loop skips WAITING_FOR_* states; never here

    @property
    def num_tokens_with_spec(self) -> int:
        return self.num_tokens + len(self.spec_token_ids)


class SimScheduler:
    """A compact model of vLLM's v1 scheduling loop (running first, then waiting,
    FCFS preemption from the tail when the KV cache is full)."""

    def __init__(self, args: argparse.Namespace, draft_slots: int) -> None:
        self.rng = random.Random(args.seed)
        self.budget = args.budget
        self.max_num_seqs = args.max_running
        self.k = args.k
        self.draft_slots = draft_slots
        self.accept_p = args.accept
        self.num_blocks = args.kv_blocks
        self.max_prompt = args.kv_blocks * BLOCK // 2
        self.free_blocks = args.kv_blocks
        self.arrival_rate = args.arrival_rate
        self.running: list[Req] = []
        self.waiting: deque[Req] = deque()
        self.preempted_before: set[str] = set()
        self.finished: set[str] = set()
        self.requests: dict[str, Req] = {}  # live requests by id, as vLLM's Scheduler.requests
        self.n_arrived = 0

    # -- what the recorder reads -----------------------------------------------------
    def get_request_counts(self) -> tuple[int, int]:
        return len(self.running), len(self.waiting)

    @property
    def kv_cache_manager(self) -> SimpleNamespace:
        return SimpleNamespace(usage=1.0 - self.free_blocks / self.num_blocks)

    # -- workload ----------------------------------------------------------------------
    def arrive(self) -> None:
        rng = self.rng
        for _ in range(_poisson(rng, self.arrival_rate)):
            # Capped so one request always fits the KV cache on its own, as vLLM
            # refuses longer ones: otherwise preemptions can livelock the simulation.
            prompt = int(min(self.max_prompt, max(8, rng.lognormvariate(5.5, 1.0))))
            out = int(min(self.max_prompt // 2, max(4, rng.lognormvariate(5.0, 0.9))))
            rid = f"cmpl-{rng.getrandbits(64):016x}-0-{rng.getrandbits(32):08x}"
            self.requests[rid] = req = Req(rid, prompt, out)
            self.waiting.append(req)
            self.n_arrived += 1

    def _grow(self, req: Req, tokens: int) -> bool:
        need = math.ceil((req.num_computed_tokens + tokens) / BLOCK) - req.blocks
        if need <= self.free_blocks:
            self.free_blocks -= max(0, need)
            req.blocks += max(0, need)
            return True
        return False

    def _release(self, req: Req) -> None:
        self.free_blocks += req.blocks
        req.blocks = 0

    # -- one schedule() call --------------------------------------------------------
    def schedule(self) -> SimpleNamespace:
        token_budget = input_budget = self.budget
        slots = self.draft_slots
        num_sched: dict[str, int] = {}
        spec: dict[str, list[int]] = {}
        new_reqs: list[SimpleNamespace] = []
        cached: list[str] = []
        resumed: set[str] = set()
        preempted: set[str] = set()
        i = 0
        while i < len(self.running) and token_budget > 0 and input_budget > slots:
            req = self.running[i]
            n = min(req.num_tokens_with_spec - req.num_computed_tokens, token_budget, input_budget - slots)
            if n <= 0:
                i += 1
                continue
            while not self._grow(req, n):
                victim = self.running.pop()  # FCFS: the last running request
                if victim.request_id in num_sched:  # already scheduled this step: give it back
                    back = num_sched.pop(victim.request_id)
                    token_budget += back
                    input_budget += back + slots
                    spec.pop(victim.request_id, None)
                    cached.remove(victim.request_id)
                self._preempt(victim, preempted)
                if victim is req:
                    break
            else:
                num_sched[req.request_id] = n
                cached.append(req.request_id)
                token_budget -= n
                input_budget -= n + slots
                n_spec = n + req.num_computed_tokens - req.num_tokens
                if n_spec > 0 and req.spec_token_ids:
                    spec[req.request_id] = req.spec_token_ids[:n_spec]
                req.spec_token_ids = []
                i += 1
        if not preempted:  # vLLM admits nobody in a step that preempted
            while (
                self.waiting
                and len(self.running) < self.max_num_seqs
                and token_budget > 0
                and input_budget > slots
            ):
                req = self.waiting[0]
                n = min(req.num_tokens - req.num_computed_tokens, token_budget, input_budget - slots)
                if n <= 0 or not self._grow(req, n):
                    break
                self.waiting.popleft()
                self.running.append(req)
                num_sched[req.request_id] = n
                token_budget -= n
                input_budget -= n + slots
                if req.request_id in self.preempted_before:
                    self.preempted_before.discard(req.request_id)
                    resumed.add(req.request_id)
                    cached.append(req.request_id)
                else:
                    new_reqs.append(SimpleNamespace(req_id=req.request_id))
        for rid, n in num_sched.items():
            self.requests[rid].num_computed_tokens += n
        finished, self.finished = self.finished, set()
        return SimpleNamespace(
            scheduled_new_reqs=new_reqs,
            scheduled_cached_reqs=SimpleNamespace(req_ids=cached, resumed_req_ids=resumed),
            num_scheduled_tokens=num_sched,
            total_num_scheduled_tokens=sum(num_sched.values()),
            scheduled_spec_decode_tokens=spec,
            preempted_req_ids=preempted,
            finished_req_ids=finished,
        )

    def _preempt(self, req: Req, preempted: set[str]) -> None:
        self._release(req)
        req.num_computed_tokens = 0
        req.spec_token_ids = []
        self.waiting.appendleft(req)
        self.preempted_before.add(req.request_id)
        preempted.add(req.request_id)

    # -- the model's step and update_from_output() --------------------------------------
    def model_output(self, out: SimpleNamespace) -> SimpleNamespace:
        rng, index = self.rng, self.requests
        req_ids = list(out.num_scheduled_tokens)
        sampled: list[list[int]] = []
        for rid in req_ids:
            req = index[rid]
            if req.num_computed_tokens < req.num_tokens:
                sampled.append([])  # mid-prefill: nothing sampled
                continue
            drafts = len(out.scheduled_spec_decode_tokens.get(rid, ()))
            accepted = 0
            while accepted < drafts and rng.random() < self.accept_p:
                accepted += 1
            sampled.append([7] * (accepted + 1))
        output = SimpleNamespace(req_ids=req_ids, sampled_token_ids=sampled)
        notes = [RunnerNote("target", out.total_num_scheduled_tokens, self.budget, len(req_ids))]
        setattr(output, RUNNER_NOTES_ATTR, notes)
        return output

    def update_from_output(self, out: SimpleNamespace, output: SimpleNamespace) -> None:
        index = self.requests
        for rid, toks in zip(output.req_ids, output.sampled_token_ids, strict=True):
            req = index[rid]
            if not toks:
                continue
            drafts = len(out.scheduled_spec_decode_tokens.get(rid, ()))
            req.num_computed_tokens -= drafts - (len(toks) - 1)  # rejected drafts
            req.num_tokens += len(toks)
            req.output += len(toks)
            if req.output >= req.max_tokens:
                self.running.remove(req)
                self._release(req)
                self.finished.add(rid)
                del self.requests[rid]
        for req in self.running:  # ngram drafts for the next step
            if req.num_computed_tokens >= req.num_tokens - 1 and self.k:
                req.spec_token_ids = [7] * self.k


def _poisson(rng: random.Random, lam: float) -> int:
    threshold, k, p = math.exp(-lam), 0, 1.0
    while True:
        p *= rng.random()
        if p <= threshold:
            return k
        k += 1


def engine_config(args: argparse.Namespace, draft_slots: int) -> dict[str, Any]:
    config = dict(schema.CONFIG_DEFAULTS)
    config.update(
        max_num_batched_tokens=args.budget,
        max_num_scheduled_tokens=args.budget,
        max_num_seqs=args.max_running,
        max_num_active_seqs=args.max_running,
        spec_method="ngram",
        num_speculative_tokens=args.k,
        draft_slots=draft_slots,
        buffer_capacity=args.budget,
        block_size=BLOCK,
        num_kv_blocks=args.kv_blocks,
        max_model_len=32768,
        model="synthetic (bench/gen_trace.py)",
    )
    return config


def generate(path: Path, args: argparse.Namespace) -> dict[str, Any]:
    """Write the trace; returns counts for the caller to print."""
    path.parent.mkdir(parents=True, exist_ok=True)
    writer = GenWriter(path, index=not args.no_index, interval_s=args.index_interval)  # closed by rec.close()
    draft_slots = 0  # ngram on vLLM 0.32
    sim = SimScheduler(args, draft_slots)
    rec = Recorder(
        writer,  # type: ignore[arg-type]  # duck-typed: emit/shutdown/dropped/errors/failed
        engine_config(args, draft_slots),
        policy="stock",
        scheduler_cls="bench.gen_trace.SimScheduler",
    )
    t0 = writer.t0 or 0.0
    rng = random.Random(args.seed + 1)
    counts = {"preempted": 0, "resumed": 0, "new": 0, "scheduled": 0}
    clock = 0.0
    steps = 0
    while steps < args.steps:
        sim.arrive()
        if not sim.requests:  # EngineCore calls schedule() only with requests to run
            clock += 0.01
            continue
        steps += 1
        pre = rec.before_schedule(sim)
        out = sim.schedule()
        total = out.total_num_scheduled_tokens
        sched_us = 40.0 + 6.0 * len(out.num_scheduled_tokens) + rng.random() * 20.0
        rec.after_schedule(sim, out, pre, t0 + clock, int(sched_us * 1000))
        output = sim.model_output(out)
        sim.update_from_output(out, output)
        rec.after_update(out, output)
        clock += 0.004 + total * 2e-6  # a forward pass grows with the tokens it runs
        counts["preempted"] += len(out.preempted_req_ids)
        counts["resumed"] += len(out.scheduled_cached_reqs.resumed_req_ids)
        counts["new"] += len(out.scheduled_new_reqs)
        counts["scheduled"] += len(out.num_scheduled_tokens)
    rec.close(timeout=600.0)
    if writer.dropped or writer.failed:
        raise SystemExit(f"the writer dropped {writer.dropped} records ({writer.failed})")
    counts["steps"] = args.steps
    counts["arrived"] = sim.n_arrived
    return counts


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out", type=Path, help="trace file to write (.gz: gzip)")
    ap.add_argument("--steps", type=int, default=1_000_000)
    ap.add_argument("--max-running", type=int, default=8, help="max_num_seqs")
    ap.add_argument("--budget", type=int, default=2048, help="max_num_batched_tokens")
    ap.add_argument("--k", type=int, default=3, help="draft tokens per decode (ngram K)")
    ap.add_argument("--accept", type=float, default=0.6, help="per-draft acceptance probability")
    ap.add_argument("--kv-blocks", type=int, default=500, help="KV cache blocks of 16 tokens")
    ap.add_argument("--arrival-rate", type=float, default=0.06, help="mean arrivals per step")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--quick", action="store_true", help="20,000 steps")
    ap.add_argument(
        "--no-index",
        action="store_true",
        help="write no recording index (<trace>.ssidx), as a recorder before it did: an older trace's "
        "first open",
    )
    ap.add_argument(
        "--index-interval", type=float, default=10.0, help="seconds between recording index segments"
    )
    return ap


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    if args.quick:
        args.steps = min(args.steps, 20_000)
    t = time.perf_counter()
    counts = generate(args.out, args)
    dt = time.perf_counter() - t
    size = args.out.stat().st_size
    steps = counts["steps"]
    print(
        f"wrote {args.out}: {steps:,} steps, {size / 1e6:.1f} MB ({size / steps:.0f} B/step), "
        f"{counts['arrived']:,} requests arrived, {counts['new']:,} admitted, "
        f"{counts['preempted']:,} preemptions, {counts['resumed']:,} resumptions, "
        f"{counts['scheduled'] / steps:.1f} scheduled per step; {dt:.1f} s"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
