"""What analysis keeps beside a big trace: the full-record pass (tracer.analysis.step_features:
step-time features, request token rows) and the request index (tracer.analysis.requests).

- `RequestTimes.latency` (vectorised) must equal the per-request loop it replaced, to the bit.
- `<trace>.steppass.ssidx` and `<trace>.requests.ssidx` are used only for the file state the
  Trace was loaded from; a torn, stale or foreign one is computed again, never trusted.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from tests.conftest import ROOT
from tracer.analysis import clock, requests, step_features, timing
from tracer.analysis.throughput import LatencyTracker
from tracer.trace import index_files, sidecar
from tracer.trace.reader import load
from tracer.trace.trace_type import Trace

SAMPLES = sorted((ROOT / "sample_traces").glob("*.jsonl"))


def assert_latency_equals_the_loop(trace: Trace) -> None:
    """For every TTFT start the trace supports, the vectorised figures against a plain loop."""
    tracker = LatencyTracker()
    for i, rec in enumerate(trace.iter_steps()):
        tracker.add(i, rec)
    durations = timing.step_durations(trace)
    t, end = trace.columns["t"], durations.end
    h = trace.header
    times = tracker.times()
    best = times.basis(trace)
    bases = ("arrival", "engine", "seen")[("arrival", "engine", "seen").index(best) :]
    for basis in bases:
        ttft, tpot, parts = [], [], []
        for rid in tracker.order:
            f = tracker.first.get(rid)
            seen = tracker.seen.get(rid)
            row = seen if basis == "seen" else tracker.arrived.get(rid, seen)
            if f is None or row is None or not np.isfinite(end[f]):
                continue
            start = t[row]
            if basis == "arrival":
                if rid not in tracker.arrival:
                    continue
                start = tracker.arrival[rid] - h["start_time"] + h["t0"]
                s = tracker.scheduled[rid]
                parts.append([t[row] - start, t[s] - t[row], t[f] - t[s], end[f] - t[f]])
            ttft.append((end[f] - start) * 1e3)
            last, tokens = tracker.last[rid], tracker.tokens[rid]
            if tokens > 1 and np.isfinite(end[last]):
                tpot.append((end[last] - end[f]) * 1e3 / (tokens - 1))
        got = times.latency(trace, durations, basis)
        assert got.basis == basis
        assert (got.requests, got.unmeasured) == (len(ttft), len(tracker.order) - len(ttft))
        assert got.requests > 0, trace.path
        np.testing.assert_allclose(got.ttft_ms, np.array(ttft), rtol=1e-12)
        np.testing.assert_array_equal(got.tpot_ms, np.array(tpot))  # exact: the same float operations
        if basis == "arrival":
            split = np.array(parts) * 1e3
            for k, name in enumerate(("frontend", "waiting", "prefill", "first_step")):
                np.testing.assert_allclose(got.parts_ms[name], split[:, k], rtol=1e-9, atol=1e-9)
            # The parts add up to the TTFT.
            np.testing.assert_allclose(sum(got.parts_ms.values()), got.ttft_ms, rtol=1e-9)


@pytest.mark.parametrize("path", SAMPLES, ids=lambda p: p.name)
def test_vectorised_latency_equals_the_per_request_loop(path: Path) -> None:
    """`RequestTimes.latency` against the loop it replaced, to the bit, on the sample traces
    (recorded from vLLM's scheduler)."""
    assert_latency_equals_the_loop(load(path))


def test_vectorised_latency_on_a_busy_generated_server(tmp_path: Path) -> None:
    out = tmp_path / "busy.jsonl"
    args = ["--steps", "400", "--seed", "5", "--max-running", "256", "--arrival-rate", "3"]
    args += ["--kv-blocks", "3000"]
    subprocess.run([sys.executable, str(ROOT / "bench" / "gen_trace.py"), str(out), *args], check=True)
    trace = load(out)
    assert trace.columns["num_running"].max() >= 100 and trace.columns["n_preempted"].sum() > 0
    assert_latency_equals_the_loop(trace)


# -- the derived sidecar ----------------------------------------------------------------------


@pytest.fixture
def big(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A trace the reader keeps a sidecar for (the threshold lowered: the samples are small)."""
    monkeypatch.setattr(sidecar, "MIN_SOURCE_BYTES", 0)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    path = tmp_path / "t.jsonl"
    path.write_bytes((ROOT / "sample_traces" / "live_cpu_ngram.jsonl").read_bytes())
    return path


def _derived(path: Path) -> Path:
    return path.with_name(path.name + ".steppass.ssidx")


def _refuse_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(trace: Trace) -> None:
        raise AssertionError("ran the pass instead of reading it back")

    monkeypatch.setattr(step_features, "_run", refuse)


def assert_same_pass(a: step_features.StepPass, b: step_features.StepPass) -> None:
    for name in timing.FEATURES:
        np.testing.assert_array_equal(a.features.columns[name], b.features.columns[name], err_msg=name)
    assert a.features.context_recorded == b.features.context_recorded
    for name in ("seen", "first", "last", "tokens", "arrived", "scheduled", "arrival"):
        np.testing.assert_array_equal(getattr(a.requests, name), getattr(b.requests, name), err_msg=name)
    assert a.requests.ids == b.requests.ids


def test_a_big_trace_keeps_its_pass_and_a_reopen_reads_it_back(
    big: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    trace = load(big)
    first = step_features.step_pass(trace)
    assert _derived(big).exists() and trace.fingerprint is not None
    assert step_features.step_pass(trace) is first  # remembered with the Trace object
    performance = clock.performance(trace)
    with monkeypatch.context() as m:
        _refuse_runs(m)
        again = load(big)
        assert_same_pass(first, step_features.step_pass(again))
        assert clock.performance(again) == performance
    uncached = step_features._run(load(big, sidecar=False))
    assert_same_pass(first, uncached)


def test_the_kept_pass_is_not_used_once_the_file_changed(big: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    step_features.step_pass(load(big))
    lines = big.read_bytes().splitlines(keepends=True)
    big.write_bytes(b"".join(lines[:-3]))  # the same file, three records shorter
    shorter = load(big)
    assert len(shorter) < len(step_features.step_pass(load(big)).features.columns["step"]) + 3
    assert_same_pass(step_features.step_pass(shorter), step_features._run(shorter))
    stamp = big.stat().st_mtime_ns
    os.utime(big, ns=(stamp + 10**9, stamp + 10**9))  # touched: the reader's fingerprint differs
    touched = load(big)
    calls: list[Trace] = []
    real = step_features._run
    monkeypatch.setattr(step_features, "_run", lambda t: calls.append(t) or real(t))
    step_features.step_pass(touched)
    assert calls == [touched]


@pytest.mark.parametrize(
    "damage",
    ["torn", "other version", "other step count", "short arrays", "rows outside"],
)
def test_a_damaged_kept_pass_is_run_again(big: Path, monkeypatch: pytest.MonkeyPatch, damage: str) -> None:
    trace = load(big)
    good = step_features.step_pass(trace)
    where = _derived(big)
    if damage == "torn":
        where.write_bytes(where.read_bytes()[:-100])
    else:
        arrays = {f"f_{n}": good.features.columns[n] for n in timing.FEATURES}
        arrays |= {f"r_{n}": getattr(good.requests, n) for n in ("seen", "first", "last", "tokens")}
        version, steps = step_features.VERSION, len(trace)
        if damage == "other version":
            version += 1
        elif damage == "other step count":
            steps -= 1
        elif damage == "short arrays":
            arrays = {n: a[:-1] if n.startswith("f_") else a for n, a in arrays.items()}
        else:
            arrays["r_first"] = arrays["r_first"] + len(trace)
        assert trace.fingerprint is not None
        sidecar.write_derived(
            big, step_features.NAME, trace.fingerprint, arrays, version=version, steps=steps
        )
    calls: list[Trace] = []
    real = step_features._run
    monkeypatch.setattr(step_features, "_run", lambda t: calls.append(t) or real(t))
    again = load(big)
    assert_same_pass(good, step_features.step_pass(again))
    assert calls == [again]


def test_no_kept_pass_with_sidecars_off(big: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(index_files.ENV_SIDECAR, "off")
    step_features.step_pass(load(big))
    assert not _derived(big).exists() and not list((big.parent / "cache").glob("**/*.ssidx"))


def test_a_retimed_copy_shares_the_pass(big: Path) -> None:
    trace = load(big)
    model = timing.TimingModel({"step": 2.0})
    assert step_features.step_pass(clock.retimed(trace, model)) is step_features.step_pass(trace)


# -- the request index, kept the same way --------------------------------------------------


@pytest.fixture
def preempting(big: Path) -> Path:
    """A big trace with preemptions and resumptions (the index's lists), and finishes."""
    big.write_bytes((ROOT / "sample_traces" / "ngram_preempt.jsonl").read_bytes())
    return big


def _index_file(path: Path) -> Path:
    return path.with_name(path.name + ".requests.ssidx")


def _assert_same_index(a: requests.RequestIndex, b: requests.RequestIndex) -> None:
    assert list(a.events.items()) == list(b.events.items())  # the same events, in the same order
    assert list(a.since.items()) == list(b.since.items())


def test_a_big_trace_keeps_its_request_index(big: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    built = requests.request_index(load(big))
    assert _index_file(big).exists()
    assert any(ev.preempted for ev in built.events.values()) or any(
        ev.finished for ev in built.events.values()
    )
    with monkeypatch.context() as m:
        m.setattr(requests, "_build", lambda trace: pytest.fail("built the index instead of reading it back"))
        _assert_same_index(built, requests.request_index(load(big)))
    _assert_same_index(built, requests._build(load(big, sidecar=False)))


@pytest.mark.parametrize("damage", ["torn", "other version", "ids cut", "since outside", "file changed"])
def test_a_damaged_or_stale_request_index_is_built_again(
    preempting: Path, monkeypatch: pytest.MonkeyPatch, damage: str
) -> None:
    big = preempting
    trace = load(big)
    good = requests.request_index(trace)
    where = _index_file(big)
    if damage == "torn":
        where.write_bytes(where.read_bytes()[:-64])
    elif damage == "file changed":
        big.write_bytes(b"".join(big.read_bytes().splitlines(keepends=True)[:-2]))
    else:
        version, steps = requests.VERSION, len(trace)
        found = sidecar.read_derived(
            big, requests.NAME, trace.fingerprint, requests._ARRAYS, version=version, steps=steps
        )
        assert found is not None
        arrays = {k: np.array(v) for k, v in found[1].items()}
        if damage == "other version":
            version += 1
        elif damage == "ids cut":
            arrays["ids"] = arrays["ids"][:-5]
        else:
            arrays["since_of"] = arrays["since_of"] + len(good.events)
        sidecar.write_derived(big, requests.NAME, trace.fingerprint, arrays, version=version, steps=steps)
    built: list[Trace] = []
    real = requests._build
    monkeypatch.setattr(requests, "_build", lambda t: built.append(t) or real(t))
    again = load(big)
    index = requests.request_index(again)
    assert built == [again]
    _assert_same_index(real(load(big, sidecar=False)), index)
