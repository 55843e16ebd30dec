"""The recorder on vLLM's real Scheduler, driven offline with deterministic outputs.

Ground truth for budgets is vLLM itself: probe_schedule reads the final
`token_budget` / `input_budget` locals of Scheduler.schedule as it returns.
"""

from __future__ import annotations

import gc
import logging
import os
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import probe_schedule
from tracer.trace.reader import load
from tracer.whatif.offline import build_scheduler, run_workload
from tracer.whatif.scenarios import SCENARIOS, mixed_accept

pytestmark = pytest.mark.vllm


def _run(name: str, cls: type | None = None, probe: bool = False) -> tuple[Any, list[Any], list[dict]]:
    spec, requests = SCENARIOS[name]
    sched = build_scheduler(spec, cls)
    budgets: list[dict[str, int]] = []

    def schedule(s: Any) -> Any:
        out, seen = probe_schedule(s)
        budgets.append(seen)
        return out

    steps = run_workload(sched, requests, accept=mixed_accept, schedule=schedule if probe else None)
    sched.shutdown()
    return sched, steps, budgets


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_recorded_budgets_equal_vllm(name: str, trace_env: Path) -> None:
    from tracer.scheduler import TracingScheduler

    _, steps, budgets = _run(name, TracingScheduler, probe=True)
    trace = load(trace_env)
    assert len(trace) == len(steps) == len(budgets)
    assert trace.footer is not None and trace.footer["records_dropped"] == 0
    assert trace.footer["steps_written"] == len(steps)
    col = trace.columns
    for i, ((out, _), vllm) in enumerate(zip(steps, budgets, strict=True)):
        assert col["target_used"][i] == out.total_num_scheduled_tokens
        assert col["target_left"][i] == vllm["token_budget"], f"step {i + 1}"
        assert col["input_left"][i] == vllm["input_budget"], f"step {i + 1}"
        record = trace.step(i)
        tokens = {e[0]: e[1] for e in record["new"] + record["resumed"] + record["running"]}
        assert tokens == dict(out.num_scheduled_tokens)
        spec_lens = {e[0]: e[2] for e in record["new"] + record["resumed"] + record["running"] if e[2]}
        assert spec_lens == {k: len(v) for k, v in out.scheduled_spec_decode_tokens.items() if v}
        assert sorted(record["preempted"]) == sorted(out.preempted_req_ids)
        assert sorted(record["finished"]) == sorted(out.finished_req_ids)


def _vllm_minor() -> tuple[int, int]:
    import vllm

    major, minor = vllm.__version__.split(".")[:2]
    return int(major), int(minor)


def test_dflash_long_prefill_budgets(trace_env: Path) -> None:
    """0.32 charges DFlash K=7 draft slots per request (additive: 8,185 target
    tokens a step); 0.33 charges none and caps admission instead (8,192)."""
    from tracer.scheduler import TracingScheduler

    slots, regime = (7, "additive") if _vllm_minor() < (0, 33) else (0, "cap")
    _run("dflash_k7", TracingScheduler)
    trace = load(trace_env)
    cfg = trace.config
    assert (cfg["spec_method"], cfg["num_speculative_tokens"], cfg["draft_slots"]) == ("dflash", 7, slots)
    assert cfg["query_rows_per_req"] == 8 and trace.header["regime"] == regime
    first = trace.step(0)
    used = 8192 - slots
    assert first["target"] == {"cap": 8192, "used": used, "left": slots}
    assert first["input"] == {"cap": 8192, "used": 8192, "reserved": slots, "left": 0}
    assert first["query"] == {"per_req": 8, "rows": 8, "cap": 8192}
    # Demand before clipping: the whole 32k prompt, then what is left of it.
    assert first["new"] == [["long", used, 0, 32768]]
    assert trace.step(1)["running"] == [["long", used, 0, 32768 - used]]
    assert list(trace.columns["target_used"][:4]) == [used] * 4


def test_held_back_requests_are_listed_with_their_demand(trace_env: Path) -> None:
    from tracer.scheduler import TracingScheduler

    _, steps, _ = _run("dspark_k4", TracingScheduler)
    trace = load(trace_env)
    waiting = [rec["waiting_demand"] for rec in trace.steps()]
    held = [w for w in waiting if w]
    assert held, "five one-token requests cannot all run at once"
    assert all(d == 1 for w in held for _, d in w)
    for rec, (out, _) in zip(trace.steps(), steps, strict=True):
        assert not {rid for rid, _ in rec["waiting_demand"]} & set(out.num_scheduled_tokens)


def test_preemption_and_resumption_are_recorded(trace_env: Path) -> None:
    from tracer.scheduler import TracingScheduler

    _, steps, _ = _run("ngram_preempt", TracingScheduler)
    trace = load(trace_env)
    preempted = [rid for out, _ in steps for rid in out.preempted_req_ids]
    assert preempted, "the scenario must preempt"
    assert int(trace.columns["n_preempted"].sum()) == len(preempted)
    resumed = [e[0] for rec in trace.steps() for e in rec["resumed"]]
    assert sorted(resumed) == sorted(preempted)
    # Sampled tokens per request add up to max_tokens (30) for every request.
    sampled: dict[str, int] = {}
    for rec in trace.steps():
        for rid, n in (rec["sampled"] or {}).items():
            sampled[rid] = sampled.get(rid, 0) + n
    assert sampled == {f"r{i}": 30 for i in range(6)}


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_tracing_changes_nothing(name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from vllm.v1.core.sched.scheduler import Scheduler

    from tracer.scheduler import TracingScheduler

    monkeypatch.delenv("SCHEDSCOPE_TRACE", raising=False)
    _, stock, _ = _run(name, Scheduler)
    monkeypatch.setenv("SCHEDSCOPE_TRACE", str(tmp_path / "t.jsonl"))
    _, traced, _ = _run(name, TracingScheduler)
    assert len(stock) == len(traced)
    for i, ((a, _), (b, _)) in enumerate(zip(stock, traced, strict=True)):
        assert a == b, f"SchedulerOutput differs at step {i + 1}"
    assert len(load(tmp_path / "t.jsonl")) == len(traced)


def test_pass_through_without_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from tracer.scheduler import TracingScheduler

    monkeypatch.delenv("SCHEDSCOPE_TRACE", raising=False)
    monkeypatch.chdir(tmp_path)
    sched, steps, _ = _run("draft_model", TracingScheduler)
    assert sched._schedscope is None
    assert steps and not list(tmp_path.iterdir())


def test_tracer_error_never_reaches_vllm(
    trace_env: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    from vllm.v1.core.sched.scheduler import Scheduler

    from tracer.record.recorder import Recorder
    from tracer.scheduler import TracingScheduler

    def boom(self: Recorder, *args: Any) -> None:
        raise RuntimeError("injected tracer fault")

    monkeypatch.setattr(Recorder, "before_schedule", boom)
    monkeypatch.setattr(Recorder, "after_update", boom)
    with caplog.at_level(logging.ERROR, logger="schedscope"):
        _, traced, _ = _run("ngram_preempt", TracingScheduler)
    monkeypatch.delenv("SCHEDSCOPE_TRACE")
    _, stock, _ = _run("ngram_preempt", Scheduler)
    assert [a for a, _ in traced] == [b for b, _ in stock]
    faults = [r for r in caplog.records if "tracer error" in r.getMessage()]
    assert len(faults) == 1, "logged once, not per step"
    trace = load(trace_env)
    assert trace.footer["errors"] == 2 * len(traced)
    assert len(trace) == len(traced)  # steps still recorded, without demand or outcomes
    assert trace.step(0)["sampled"] is None and trace.step(0)["new"][0][3] == -1


def test_async_scheduler_class_records(trace_env: Path) -> None:
    from tracer.scheduler import TracingAsyncScheduler

    _, steps, _ = _run("draft_model", TracingAsyncScheduler)
    trace = load(trace_env)
    assert trace.header["scheduler_cls"].endswith("TracingAsyncScheduler")
    assert len(trace) == len(steps)
    assert list(trace.columns["target_used"]) == [o.total_num_scheduled_tokens for o, _ in steps]


def test_recorder_config_from_env_falls_back_on_bad_values(caplog: pytest.LogCaptureFixture) -> None:
    """A bad SCHEDSCOPE_QUEUE is logged and replaced by the default; it never disables the trace."""
    import logging

    from tracer.record.config import DEFAULT_QUEUE, RecorderConfig

    with caplog.at_level(logging.WARNING, logger="schedscope"):
        config = RecorderConfig.from_env(
            {"SCHEDSCOPE_TRACE": "/tmp/t-{pid}.jsonl", "SCHEDSCOPE_QUEUE": "lots"}
        )
    assert config.active and config.queue == DEFAULT_QUEUE
    assert str(config.trace).endswith(f"t-{os.getpid()}.jsonl")
    assert any("SCHEDSCOPE_QUEUE='lots' is not a positive integer" in r.getMessage() for r in caplog.records)
    assert not RecorderConfig.from_env({}).active
    assert RecorderConfig.from_env({"SCHEDSCOPE_QUEUE": "8", "SCHEDSCOPE_STREAM": ":0"}).queue == 8


def test_replay_records_without_touching_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The offline harness passes its configuration; a server's environment (a stream port,
    another trace path) does not leak into a replay, and os.environ is left as it was."""
    from tracer.scheduler import TracingScheduler
    from tracer.whatif.offline import EngineSpec, RequestSpec, build_scheduler, run_workload
    from tracer.whatif.replay import recording_to

    monkeypatch.setenv("SCHEDSCOPE_TRACE", str(tmp_path / "server.jsonl"))
    monkeypatch.setenv("SCHEDSCOPE_STREAM", "127.0.0.1:1")  # would fail to bind if used
    before = dict(os.environ)
    with recording_to(tmp_path / "replay.jsonl", {"replay": {"source": "x"}}):
        sched = build_scheduler(EngineSpec(), TracingScheduler)
        assert dict(os.environ) == before
    run_workload(sched, [RequestSpec("r", 8, 2)])
    sched.shutdown()
    assert sched._schedscope_stream is None and not (tmp_path / "server.jsonl").exists()
    trace = load(tmp_path / "replay.jsonl")
    assert trace.header["replay"] == {"source": "x"} and len(trace) > 0


def test_taps_get_each_record_with_kind_and_step(trace_env: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """What the stream hub and the metrics rely on instead of reading the bytes: each
    Record a tap gets is a line of the file, in order, with that line's kind and step (taps
    run beside the writer thread; the trace process's own are the stream's and metrics')."""
    import orjson

    monkeypatch.setenv("SCHEDSCOPE_WRITER", "thread")

    from tracer.record import wiring
    from tracer.record.recorder import Recorder
    from tracer.scheduler import TracingScheduler

    got: list[Any] = []
    recorder_for = wiring.recorder_for

    def with_tap(sched: Any, path: Any, **kw: Any) -> Recorder:
        return recorder_for(sched, path, **{**kw, "taps": [*kw.get("taps", ()), got.extend]})

    monkeypatch.setattr(wiring, "recorder_for", with_tap)
    spec, requests = SCENARIOS["ngram_preempt"]
    sched = build_scheduler(spec, TracingScheduler)
    run_workload(sched, requests, accept=mixed_accept)
    sched.shutdown()
    assert b"".join(r.line for r in got) == trace_env.read_bytes()
    parsed = [orjson.loads(r.line) for r in got]
    assert [(r.kind, r.step) for r in got] == [(p["kind"], p.get("step")) for p in parsed]
    assert [r.kind for r in got[:2]] == ["header", "step"] and got[-1].kind == "footer"
    assert got[-1].step is None and got[0].step is None


@pytest.mark.parametrize("writer", ["thread", "process"])
def test_the_footer_says_what_the_tracer_took_of_enginecore(
    writer: str, trace_env: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The footer's `hooks_s` is the scheduler thread's time in the tracer's hooks, vLLM's
    schedule() left out: with 1 ms added to a hook and 4 ms to vLLM's schedule() a step, it
    holds the hook's millisecond and not vLLM's four. `writer_thread_s` is the CPU of the
    thread that wrote or shipped the records. `doctor` words both."""
    import time

    from vllm.v1.core.sched.scheduler import Scheduler

    from tracer import doctor
    from tracer.record.recorder import Recorder
    from tracer.scheduler import TracingScheduler

    def slowed(fn: Any, seconds: float) -> Any:
        def slow(*args: Any, **kwargs: Any) -> Any:
            time.sleep(seconds)
            return fn(*args, **kwargs)

        return slow

    monkeypatch.setenv("SCHEDSCOPE_WRITER", writer)
    monkeypatch.setattr(Recorder, "before_schedule", slowed(Recorder.before_schedule, 0.001))
    monkeypatch.setattr(Scheduler, "schedule", slowed(Scheduler.schedule, 0.004))
    spec, requests = SCENARIOS["ngram_preempt"]
    sched = build_scheduler(spec, TracingScheduler)
    steps = len(run_workload(sched, requests, accept=mixed_accept))
    hooks_ns = sched._schedscope.hooks_ns
    sched.shutdown()
    trace = load(trace_env)
    foot = trace.footer
    assert foot is not None and len(trace) == steps > 10
    assert foot["hooks_s"] == round(hooks_ns / 1e9, 6)  # through the trace process too
    assert 0.001 * steps <= foot["hooks_s"] < 0.004 * steps
    assert foot["writer_thread_s"] > 0
    _, lines = doctor.run([trace_env])
    cost = [ln for ln in lines if "tracer cost" in ln]
    assert len(cost) == 1 and "µs a step in the tracer's hooks" in cost[0], lines


def test_a_step_whose_output_was_dropped_is_still_written(trace_env: Path) -> None:
    """A step waits for its update_from_output() under its SchedulerOutput's id. When an output
    is dropped without one (vLLM's own tests call schedule() and discard the output), the next
    output can be built at the same address, so under the same id: the dropped step must then
    be written at once, without outcomes, not overwritten."""
    from tracer.scheduler import TracingScheduler
    from tracer.whatif.offline import make_request

    spec, requests = SCENARIOS["ngram_preempt"]
    sched = build_scheduler(spec, TracingScheduler)
    for r in requests[:4]:
        sched.add_request(make_request(r.id, r.prompt_len, r.max_tokens))
    for _ in range(30):
        out = sched.schedule()  # dropped: no update_from_output
        del out
        gc.collect()  # a SchedulerOutput is freed here, and its address can be the next one's
    # The same, made certain: the next step's output under a pending step's id.
    out = sched.schedule()
    sched._schedscope.after_schedule(sched, out, None, 0.0, 0)
    sched.shutdown()
    trace = load(trace_env)
    assert list(trace.columns["step"]) == list(range(1, 33))
    assert trace.footer["errors"] == 0 and trace.footer["records_dropped"] == 0
