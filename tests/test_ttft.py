"""TTFT from arrival, offline: where each trace's TTFT starts, the parts it splits into, the
frontend time a replay by arrival time keeps, and the labels diff and sweep print.
The live checks against vLLM's own figure and a real client are in tests/test_ttft_live.py."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import ROOT
from tracer.analysis import client_ttft, timing
from tracer.analysis.client_ttft import ClientMismatch, split
from tracer.analysis.clock import common_ttft_from, performance, ttft_from
from tracer.analysis.step_features import step_pass
from tracer.cli import main
from tracer.render.timing_report import client_mismatch_sentence
from tracer.trace.reader import load

SAMPLES = ROOT / "sample_traces"
LIVE = SAMPLES / "live_cpu_ngram.jsonl"
DFLASH = SAMPLES / "dflash_k7_additive.jsonl"


def test_each_trace_starts_ttft_where_it_can() -> None:
    """A live recording at its arrivals; an offline one (its arrival_time holds a step number) at
    the engine's step; the figures say so, and the arrival start is the larger."""
    live, offline = load(LIVE), load(DFLASH)
    assert ttft_from(live) == "arrival" and ttft_from(offline) == "engine"
    assert common_ttft_from(live, offline) == "engine"
    durations = timing.step_durations(live)
    times = step_pass(live).requests
    arrival = times.latency(live, durations, "arrival")
    engine = times.latency(live, durations, "engine")
    assert arrival.requests == engine.requests == 12
    # Every request arrived before the step that added it: from arrival is never shorter.
    assert (arrival.ttft_ms >= engine.ttft_ms).all()
    # The 11 requests that arrived during step 1 (the 1.3 s warm-up) waited behind it.
    assert (arrival.parts_ms["frontend"] > 1000).sum() == 11
    assert performance(live).ttft_from == "arrival"


def test_timing_says_where_ttft_starts(capsys: Any) -> None:
    assert main(["timing", str(LIVE)]) == 0
    out = capsys.readouterr().out
    assert "TTFT from each request's arrival" in out
    assert "before the scheduler had it" in out and "waiting in the scheduler" in out
    main(["timing", str(LIVE), "--json"])
    doc = json.loads(capsys.readouterr().out)["throughput"]
    assert doc["ttft_from"] == "arrival" and doc["ttft_lower_bound"] is False
    parts = doc["ttft_parts_mean_ms"]
    assert set(parts) == {"frontend", "waiting", "prefill", "first_step"}
    main(["timing", str(DFLASH)])
    assert "a lower bound" in capsys.readouterr().out


def test_a_client_split_needs_arrivals_and_the_clients_details(tmp_path: Path, capsys: Any) -> None:
    # Facts from analysis, words from render.
    with pytest.raises(ClientMismatch) as err:
        split(load(DFLASH), {"ttfts": [0.1], "start_times": [1.0]})
    assert err.value.why == client_ttft.NO_ARRIVALS and "no arrival times" in client_mismatch_sentence(
        err.value
    )
    with pytest.raises(ClientMismatch) as err:
        split(load(LIVE), {"median_ttft_ms": 3.0})
    assert "--save-detailed" in client_mismatch_sentence(err.value)
    # The live sample's requests are not a bench run's (no X-Request-Id): nothing matches.
    with pytest.raises(ClientMismatch) as err:
        split(load(LIVE), {"ttfts": [0.1], "start_times": [1.0]})
    assert client_mismatch_sentence(err.value) == f"{LIVE}: no request of the client's result is in the trace"
    result = tmp_path / "bench.json"
    result.write_text(json.dumps({"ttfts": [0.1], "start_times": [1.0]}))
    assert main(["timing", str(LIVE), "--client", str(result)]) == 2
    assert "--client" in capsys.readouterr().err


@pytest.mark.vllm
def test_replay_by_arrival_time_keeps_each_requests_frontend_time(tmp_path: Path) -> None:
    """The frontend time is what the recording proves: a request not added before step r-1
    spent at least t[r-1] minus its arrival there. Kept, it makes the replay of the live trace by
    arrival time take every request in its recorded step, under the recorded policy."""
    pytest.importorskip("vllm")
    import vllm

    from tracer.analysis.clock import clock_for
    from tracer.whatif.fidelity import compare_runs
    from tracer.whatif.replay import replay
    from tracer.whatif.replay_clock import attach_frontend_delays, attach_idle_waits
    from tracer.whatif.workload import workload_from_trace

    trace = load(LIVE)
    if trace.header["vllm_version"].split(".")[:2] != vllm.__version__.split(".")[:2]:
        pytest.skip(f"recorded on vLLM {trace.header['vllm_version']}; its own scheduler replays it")
    workload, clock = workload_from_trace(trace), clock_for(trace)
    attach_idle_waits(workload, trace, clock)
    attach_frontend_delays(workload, trace)
    t = trace.columns["t"]
    late = [r for r in workload.requests if r.arrival_step == 2]
    assert len(late) == 11
    for spec in late:  # they arrived before step 1's schedule() but were added after it
        arrival = workload.arrival_clock(spec)
        assert arrival < t[0]
        assert workload.frontend_delays[spec.id] == pytest.approx(t[0] + 1e-6 - arrival, abs=1e-9)
        assert 0.005 < workload.frontend_delays[spec.id] < 0.05
    out = tmp_path / "time.jsonl"
    replay(workload, "stock", out, clock=clock, arrivals="time")
    replayed = load(out)
    f = compare_runs(trace, replayed, policy="stock", exact=True, notes=[])
    assert f.identical, f.first
    # The recording began with its server, whose first step (1.33 s) was the warm-up stall: the
    # replay's first step pays it too, so the 11 wait behind it as they did, and both TTFTs
    # from arrival agree within the clock's summed error.
    assert clock.warmup_ms == pytest.approx(1329.1, abs=1.0)
    rec, rep = performance(trace), performance(replayed)
    assert rep.ttft_from == rec.ttft_from == "arrival"
    for key in ("p50", "p99"):
        assert rep.ttft_ms[key] == pytest.approx(rec.ttft_ms[key], rel=clock.sum_error_pct / 100)


@pytest.mark.vllm
def test_diff_and_sweep_label_where_ttft_starts(tmp_path: Path, capsys: Any) -> None:
    pytest.importorskip("vllm")
    stepped = tmp_path / "step.jsonl"
    assert main(["replay", str(LIVE), "--timed", "--no-identity", "-o", str(stepped)]) == 0
    capsys.readouterr()
    assert ttft_from(load(stepped)) == "engine"  # by recorded step: its arrivals are not on its clock
    main(["diff", str(LIVE), str(stepped)])
    out = capsys.readouterr().out
    row = next(line for line in out.splitlines() if line.startswith("TTFT from"))
    assert row.split() == ["TTFT", "from", "engine", "engine"]
    assert "TTFT from the schedule() call the engine added each request before" in out
    argv = ["sweep", str(LIVE), "--policy", "stock", "--max-num-seqs", "4,8"]
    docs = {}
    for arrivals, start in (("time", "arrival"), ("step", "engine")):
        assert main([*argv, "--arrivals", arrivals, "--json"]) == 0
        docs[arrivals] = doc = json.loads(capsys.readouterr().out)
        assert {r["ttft_from"] for r in doc["results"]} == {start}
        assert all(r["ttft_basis"] == "predicted" for r in doc["results"])
    main([*argv, "--arrivals", "time"])
    assert "ttft       predicted TTFT from each request's arrival" in capsys.readouterr().out
    # Twelve requests at once: with 4 seats the last wait for two rounds, with 8 for one.
    p99 = {r["setting"]["max_num_seqs"]: r["ttft_p99_ms"] for r in docs["time"]["results"]}
    assert p99[4] > p99[8] > 0
