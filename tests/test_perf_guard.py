"""Performance guards that time nothing (bench/ measures, docs/performance.md reports).

- The tracer's scheduler-thread hooks keep O(1) Python objects per step, however
  many requests run (no per-request tuples), counted with tracemalloc.
- The reader takes its fast path on records shaped as the recorder writes them,
  and the fast path's columns equal the general path's.
- The bench scripts run (tiny sizes) and print their figure last.
"""

from __future__ import annotations

import gc
import os
import subprocess
import sys
import tracemalloc
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import pytest

from tests.conftest import ROOT
from tracer.record import recorder as recorder_module
from tracer.trace.builder import TraceBuilder
from tracer.trace.reader import load

BENCH = ROOT / "bench"


# -- the recorder's hot path ----------------------------------------------------------------
STEPS = 8


# What a step keeps alive: Python containers (the recorder's snapshots are lists and tuples).
_KEPT = (list, tuple, dict, set)


def _containers(items: list[Any]) -> int:
    """Containers (and snapshots) reachable from what the recorder handed the writer
    (not through the Recorder itself): what a step keeps alive until it is encoded."""
    seen: set[int] = set()
    stack = list(items)
    while stack:
        obj = stack.pop()
        if id(obj) in seen or not isinstance(obj, _KEPT):
            continue
        seen.add(id(obj))
        stack.extend(o for o in gc.get_referents(obj) if not isinstance(o, recorder_module.Recorder))
    return len(seen)


def _kept_per_step(n: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[float, float]:
    """(containers, bytes allocated in tracer/record/recorder.py) kept per steady-state step,
    with everything the steps hand the writer held back (not encoded yet)."""
    from tracer.scheduler import TracingScheduler
    from tracer.whatif.offline import Driver, EngineSpec, build_scheduler, make_request
    from tracer.whatif.scenarios import mixed_accept

    monkeypatch.setenv("SCHEDSCOPE_TRACE", str(tmp_path / f"guard_{n}.jsonl"))
    spec = EngineSpec(method="ngram", num_speculative_tokens=3, max_num_seqs=n, num_kv_blocks=n * 8)
    sched = build_scheduler(spec, TracingScheduler)
    for i in range(n):
        sched.add_request(make_request(f"req-{i}", 16, 10_000))
    driver = Driver(sched, mixed_accept)
    for _ in range(6):  # prefill done: steady decode steps from here
        driver.step()
    assert len(sched.running) == n and sched._schedscope._fast_demand
    held: list[Any] = []
    sched._schedscope.writer.emit = held.append  # the queue, minus the draining thread
    only_recorder = [tracemalloc.Filter(True, recorder_module.__file__)]
    tracemalloc.start()
    try:
        driver.step()  # settle: the first traced step also allocates tracemalloc's own state
        held.clear()
        before = tracemalloc.take_snapshot().filter_traces(only_recorder)
        for _ in range(STEPS):
            driver.step()
        after = tracemalloc.take_snapshot().filter_traces(only_recorder)
    finally:
        tracemalloc.stop()
    assert len(held) == STEPS, "each step reached the writer once"
    size = sum(s.size_diff for s in after.compare_to(before, "filename"))
    containers = _containers(held)
    del sched._schedscope.writer.emit
    sched.shutdown()
    return containers / STEPS, size / STEPS


@pytest.mark.vllm
def test_recorder_hot_path_keeps_o1_objects_per_step(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """With the writer side behind (its backlog past LAZY_BACKLOG: here always), a queued step
    keeps a few flat lists and dict copies: as many containers at 32 as at 256 requests (a
    tuple per request would add 256), and bytes for pointers only."""
    monkeypatch.setattr(recorder_module, "LAZY_BACKLOG", 0)
    small, _ = _kept_per_step(32, tmp_path, monkeypatch)
    containers, size = _kept_per_step(256, tmp_path, monkeypatch)
    assert containers <= 24, f"{containers:.1f} containers kept per step at 256 requests"
    assert containers == small, f"{small:.1f} containers per step at 32 requests, {containers:.1f} at 256"
    assert size <= 48 * 1024, f"{size:.0f} bytes kept per step at 256 requests"


@pytest.mark.vllm
def test_a_step_the_writer_keeps_up_with_holds_only_vllms_token_lists(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """While the writer side keeps up, a step hands over the drafts' and samples' token lists
    uncounted (tracer.record.snapshot.Uncounted): vLLM's own lists, one per scheduled draft
    set (the proposer's, handed over before it) and one per sampled request, kept alive a
    little longer, never copied; the recorder's own allocations stay what they are when it
    counts them itself."""
    monkeypatch.setattr(recorder_module, "LAZY_BACKLOG", 10**9)
    n = 256
    lazy, lazy_size = _kept_per_step(n, tmp_path, monkeypatch)
    monkeypatch.setattr(recorder_module, "LAZY_BACKLOG", 0)
    counted, counted_size = _kept_per_step(n, tmp_path, monkeypatch)
    # Three more flat lists a step (the copies of the dict's values, of the sampled list and
    # of the drafts handed over), and at most one token list per request for each of the first
    # two: the drafts handed over are the lists the dict holds.
    assert counted < lazy <= counted + 3 + 2 * n, f"{counted:.1f} counted, {lazy:.1f} uncounted"
    assert lazy_size <= counted_size + 2 * (n * 8 + 64), f"{counted_size:.0f} B, {lazy_size:.0f} B"


# -- the reader's fast path -------------------------------------------------------------------
def _general_path(path: Path) -> Any:
    """The trace as the reader's general (validating, record by record) path builds it."""
    data = path.read_bytes()
    builder = TraceBuilder(path)
    builder._adopt(data)
    pos = 0
    for i, line in enumerate(data.split(b"\n")):
        builder._line = i + 1
        if line:
            builder._record(pos, pos + len(line))
        pos += len(line) + 1
    return builder.build()


def _traces(tmp_path: Path) -> list[Path]:
    generated = tmp_path / "generated.jsonl"
    # A small KV cache: preemptions and resumptions in 3,000 steps.
    args = [str(generated), "--steps", "3000", "--kv-blocks", "300"]
    subprocess.run(
        [sys.executable, str(BENCH / "gen_trace.py"), *args],
        check=True,
        capture_output=True,
    )
    return [generated, *sorted((ROOT / "sample_traces").glob("*.jsonl"))]


def test_reader_fast_path_is_taken_and_agrees(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    original = TraceBuilder._record
    for path in _traces(tmp_path):
        reference = _general_path(path)
        general_calls: list[int] = []

        def counting(self: TraceBuilder, start: int, end: int, calls: list[int] = general_calls) -> None:
            calls.append(start)
            original(self, start, end)

        with monkeypatch.context() as patch:
            patch.setattr(TraceBuilder, "_record", counting)
            trace = load(path)
        # Only the header, the footer and a live run's one `hooks` record go the general way.
        data = path.read_bytes()
        kinds = [orjson.loads(data[start : data.index(b"\n", start)])["kind"] for start in general_calls]
        assert set(kinds) <= {"header", "footer", "hooks"} and kinds.count("hooks") <= 1, (path.name, kinds)
        assert len(trace) == len(reference) > 0
        for name, column in reference.columns.items():
            np.testing.assert_array_equal(trace.columns[name], column, err_msg=f"{path.name}: {name}")
        for name, column in reference.runner.items():
            np.testing.assert_array_equal(trace.runner[name], column, err_msg=f"{path.name}: runner {name}")
        np.testing.assert_array_equal(trace._spans, reference._spans)
        assert trace.step(len(trace) - 1) == reference.step(len(reference) - 1)


# -- the bench scripts --------------------------------------------------------------------------
def _run_bench(args: list[str], timeout: float, whole: bool = False) -> str:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("SCHEDSCOPE_TRACE", None)
    out = subprocess.run(
        [sys.executable, *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout
    )
    assert out.returncode == 0, out.stderr[-2000:]
    return out.stdout.strip() if whole else out.stdout.strip().splitlines()[-1]


def test_run_all_runs_the_short_versions() -> None:
    assert os.access(BENCH / "run_all", os.X_OK)
    for name in ("p1_tracer_overhead.py", "p2_ingest.py", "trace_size.py"):
        assert "--quick" in (BENCH / name).read_text(), f"{name} must take --quick (bench/run_all)"


def test_ingest_bench_runs(tmp_path: Path) -> None:
    args = ["--steps", "2000", "--pandas-steps", "1000", "--reps", "1", "--dir", str(tmp_path)]
    last = _run_bench([str(BENCH / "p2_ingest.py"), *args], timeout=120)
    assert last.startswith("P2 figure: 2,000-step trace"), last


@pytest.mark.vllm
def test_scheduler_benches_run() -> None:
    # Two build orders, a process each, pooled by the parent: the path a real run takes.
    tiny = ["--requests", "32", "--rounds", "2", "--block", "3", "--warmup", "4", "--rotations", "2"]
    out = _run_bench([str(BENCH / "p1_tracer_overhead.py"), *tiny], timeout=300, whole=True)
    last = out.splitlines()[-1]
    assert last.startswith("P1 figure: traced/stock"), last
    # One round from each order, pooled; each order's own medians listed.
    assert "control A'/A" in out and "n=2)" in out, out
    assert "build order 1: traced/stock" in out and "build order 2: traced/stock" in out, out
    last = _run_bench(
        [str(BENCH / "trace_size.py"), "--requests", "32", "--steps", "4", "--warmup", "4"], timeout=180
    )
    assert last.startswith("Trace size figure:"), last


@pytest.mark.vllm
def test_hooks_off_contender_notes_nothing_and_still_ships(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # P1's `--baseline hooks-off`: B's scheduler, wrappers and trace process, the hooks emptied.
    monkeypatch.syspath_prepend(str(BENCH))
    import p1_tracer_overhead as p1

    trace = tmp_path / "off.jsonl"
    sched = p1.build(8, 40, p1.baseline_scheduler(p1.HOOKS_OFF, tmp_path), trace)
    rec = sched._schedscope
    loop = p1.Loop(sched, rec.writer.force_flush)
    assert loop.run(6) > 0
    parts = p1.hook_times(rec, loop, 4)
    assert rec.step == 0 and not rec._inputs and not rec._pending  # nothing noted
    assert parts["before_schedule"] < 5  # timed, as B's are
    assert all(vars(rec)[name] is p1._noted_nothing for name in p1.RECORDER_HOOKS)  # kept emptied
    sched.shutdown()
    kinds = [orjson.loads(line)["kind"] for line in trace.read_text().splitlines()]
    assert kinds[0] == "header" and "step" not in kinds, kinds
