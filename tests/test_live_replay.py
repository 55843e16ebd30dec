"""Identity replay of live servers: traces a real `vllm serve` on CPU writes while
vLLM's own `vllm bench serve` drives it, next to clients that hang up mid-stream,
with prefix caching on (vLLM's default) and a KV cache small enough to preempt.
The replay under the recorded policy must re-make every step.
"""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from tests.live_support import abandon_streams, bench_serve, build_tiny_llama, renice_engine, start_server
from tracer.cli import main
from tracer.render.fidelity import fidelity_lines
from tracer.trace import index_files, sidecar
from tracer.trace.reader import load, reopen
from tracer.trace.trace_type import Trace
from tracer.whatif.fidelity import check_fidelity

pytestmark = pytest.mark.live  # a CPU `vllm serve`: not on the CUDA 0.33 environment

# 16 blocks of 32 tokens: eight 100-token requests do not fit at once.
TIGHT_KV = ["--num-gpu-blocks-override", "16", "--max-model-len", "448", "--block-size", "32"]
BENCH = [
    "--dataset-name", "random", "--random-input-len", "64", "--random-output-len", "40",
    "--random-prefix-len", "32", "--num-prompts", "40", "--max-concurrency", "12",
]  # fmt: skip


def _record(tmp: Path, scheduler: str, extra: list[str], bench: list[str]) -> tuple[Trace, dict[str, Any]]:
    """The run, served and recorded; served once more (in a fresh directory) if no client's hang-up
    reached the scheduler as an abort: on a fast engine the abandoned streams can finish before
    vLLM sees the disconnect (1 run in 6 under async scheduling), and the run must be the hard case
    the tests assert it is."""
    trace, result = _serve(tmp / "1", scheduler, extra, bench)
    if not _inputs(trace, "x"):
        trace, result = _serve(tmp / "2", scheduler, extra, bench)
    return trace, result


def _serve(tmp: Path, scheduler: str, extra: list[str], bench: list[str]) -> tuple[Trace, dict[str, Any]]:
    tmp.mkdir(parents=True)
    model = build_tiny_llama(tmp / "model")
    trace_path = tmp / "live.jsonl"
    args = [
        "--scheduler-cls", scheduler,
        "--max-num-batched-tokens", "256", "--max-num-seqs", "8", "--shutdown-timeout", "10",
        *TIGHT_KV, *extra,
    ]  # fmt: skip
    # The server's recording index too, though the run is short of the 16 MiB it waits for.
    env = {"SCHEDSCOPE_TRACE": str(trace_path), sidecar.ENV_MIN_BYTES: "0"}
    with start_server(model, extra_args=args, env=env, log_path=tmp / "server.log") as server:
        # The API server must keep up with its streams, or a client that hangs up after a few
        # chunks reads them only once its request has finished, and no abort reaches the
        # scheduler (seen once, async scheduling on an idle 2-core host).
        renice_engine(server)
        hangups = threading.Thread(
            target=abandon_streams, args=(server, "Hello world, hello scheduler " * 3, [3, 5, 8, 13])
        )
        hangups.start()
        result = bench_serve(server, tmp, *BENCH, *bench)
        hangups.join()
        result["preemptions"] = server.metric("vllm:num_preemptions_total")
    return load(trace_path), result


@pytest.fixture(scope="module")
def ngram_live(tmp_path_factory: pytest.TempPathFactory) -> tuple[Trace, dict[str, Any]]:
    """Served by the draft-budget policy, so its rewritten schedule() meets a live workload (ngram
    keeps the additive rule with no draft rows to budget); the tests below replay it exactly."""
    spec = {"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_max": 3, "prompt_lookup_min": 1}
    extra = ["--speculative-config", json.dumps(spec)]
    return _record(tmp_path_factory.mktemp("ngram"), "tracer.policies.DraftBudgetScheduler", extra, [])


@pytest.fixture(scope="module")
def async_live(tmp_path_factory: pytest.TempPathFactory) -> tuple[Trace, dict[str, Any]]:
    return _record(
        tmp_path_factory.mktemp("async"),
        "tracer.scheduler.TracingAsyncScheduler",
        ["--async-scheduling"],
        ["--ignore-eos"],
    )


@pytest.fixture(scope="module")
def priority_live(tmp_path_factory: pytest.TempPathFactory) -> tuple[Trace, dict[str, Any]]:
    """Priority scheduling, max_num_seqs=4 with the KV cache mostly free, and a 64-token budget
    under 200-token prompts: the admission cap and the token budget take turns binding."""
    tmp = tmp_path_factory.mktemp("priority")
    model = build_tiny_llama(tmp / "model")
    trace_path = tmp / "live.jsonl"
    args = [
        "--scheduler-cls", "tracer.scheduler.TracingScheduler", "--scheduling-policy", "priority",
        "--max-num-batched-tokens", "64", "--max-num-seqs", "4", "--shutdown-timeout", "10",
    ]  # fmt: skip
    bench = [
        "--dataset-name", "random", "--random-input-len", "200", "--random-output-len", "12",
        "--num-prompts", "16", "--max-concurrency", "8", "--ignore-eos",
    ]  # fmt: skip
    env = {"SCHEDSCOPE_TRACE": str(trace_path)}
    with start_server(model, extra_args=args, env=env, log_path=tmp / "server.log") as server:
        result = bench_serve(server, tmp, *bench)
    return load(trace_path), result


def _inputs(trace: Trace, kind: str) -> list[list[Any]]:
    return [e for s in trace.steps() for e in s["inputs"] if e[0] == kind]


@pytest.mark.parametrize("run", ["ngram_live", "async_live"])
def test_live_trace_replays_identically(run: str, request: pytest.FixtureRequest, tmp_path: Path) -> None:
    trace, bench = request.getfixturevalue(run)
    # The run is the hard case it is meant to be: all of these happened.
    arrivals = _inputs(trace, "a")
    assert bench["completed"] == 40 and len(arrivals) == 44  # 40 from the benchmark, 4 abandoned
    assert _inputs(trace, "x"), "no client abort reached the scheduler"
    assert any(e[6] for e in arrivals), "no prompt shared a cached prefix"
    if run == "async_live":
        assert trace.config["async_scheduling"] is True
        assert bench["preemptions"] > 0 and int(trace.columns["n_preempted"].sum()) == bench["preemptions"]
    else:
        assert trace.header["policy"] == "draft-budget"
        assert any(e[2] for s in trace.steps() for e in s["running"]), "no drafts were scheduled"
        assert any(n < 3 for e in _inputs(trace, "d") for n in e[2]), "the proposer always offered K"
    fidelity = check_fidelity(trace, out=tmp_path / "identity.jsonl")
    print("\n".join(fidelity_lines(fidelity)))
    assert fidelity.exact_workload
    assert fidelity.identical, "\n".join(fidelity_lines(fidelity))


def test_diff_of_a_live_trace_against_its_separate_replay(
    ngram_live: tuple[Trace, dict[str, Any]], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    trace, _ = ngram_live
    out = tmp_path / "separate.jsonl"
    assert main(["replay", trace.path, "--policy", "separate", "-o", str(out)]) == 0
    capsys.readouterr()
    assert main(["diff", trace.path, str(out)]) == 0
    text = capsys.readouterr().out
    assert (
        f"replay identity error: none (the recorded policy's replay re-makes all {len(trace)} steps)" in text
    )


@pytest.mark.parametrize("run", ["ngram_live", "async_live"])
def test_what_a_big_live_trace_keeps_beside_it_reads_back_equal(
    run: str, request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On these live traces (bench serve's clients, hang-ups, prefix hits, preemptions, async
    scheduling): the vectorised latency equals the per-request loop, the step pass and the
    request index from entry columns equal the record-by-record reference, and the step pass, the
    request index and `diff` read back from the derived sidecars equal what was computed."""
    from tests.test_derived import assert_latency_equals_the_loop, assert_same_pass
    from tests.test_entry_features import assert_equals_reference
    from tracer.analysis import entry_features, requests, step_features

    trace, _ = request.getfixturevalue(run)
    assert_latency_equals_the_loop(trace)
    assert_equals_reference(trace)  # the NumPy pass and index against the record-by-record ones
    # Again a few steps a chunk: each request's run, reset and pending admission carried across
    # chunk boundaries through this server's preemptions, prefix hits and async steps.
    monkeypatch.setattr(entry_features, "CHUNK", 5)
    assert_equals_reference(load(trace.path, entries=True))
    monkeypatch.setattr(sidecar, "MIN_SOURCE_BYTES", 0)  # as a big trace: sidecars are kept
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    path = tmp_path / "live.jsonl"
    path.write_bytes(Path(trace.path).read_bytes())
    first = load(path)
    computed, index = step_features.step_pass(first), requests.request_index(first)
    assert first.columns["n_preempted"].sum() > 0 and len(index.events) >= 40
    monkeypatch.setattr(step_features, "_run", lambda t: pytest.fail("ran the step pass again"))
    monkeypatch.setattr(requests, "_build", lambda t: pytest.fail("built the request index again"))
    again = load(path)
    assert_same_pass(computed, step_features.step_pass(again))
    assert list(requests.request_index(again).events.items()) == list(index.events.items())


@pytest.mark.parametrize("run", ["ngram_live", "async_live"])
def test_the_servers_recording_index_holds_what_a_parse_of_its_trace_does(
    run: str, request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The index the follower wrote beside these servers (vllm bench serve's clients, hang-ups,
    prefix hits, preemptions under KV pressure, async scheduling) covers the trace to its
    footer and opens as a parse of it does, entry columns included."""
    from tests.test_live_server import assert_opens_as_parsed
    from tests.test_recording_index import _meta, _segments

    trace, _ = request.getfixturevalue(run)
    monkeypatch.setattr(sidecar, "MIN_SOURCE_BYTES", 0)  # as the server had it
    path = Path(trace.path)
    index = path.with_name(path.name + index_files.SUFFIX)
    last = _meta(index.read_bytes(), _segments(index)[-1])
    assert last["footer"] is not None and last["parsed_end"] == path.stat().st_size
    assert_opens_as_parsed(reopen(path), path)


# The reasons each live configuration must show proven (tracer.whatif.probe, on the identity replay).
LIVE_REASONS = {
    "ngram_live": ("kv_blocks", "preemption"),  # a KV cache of 16 blocks, prefix caching on
    "async_live": ("kv_blocks",),  # async scheduling
    "priority_live": ("max_num_seqs", "target_budget"),  # priority; the cap with KV free; long prompts
}


@pytest.mark.parametrize("run", sorted(LIVE_REASONS))
def test_live_reasons_are_proven_on_the_real_scheduler(run: str, request: pytest.FixtureRequest) -> None:
    """Replayed exactly, every sampled step of the live trace is probed: relaxing a reason's
    constraint admits the request it held first; relaxing any other single one admits none."""
    from tests.test_why_probes import check_reasons, sample_rows

    trace, _ = request.getfixturevalue(run)
    start = time.monotonic()
    report = check_reasons(trace, sample_rows(trace, per_code=20))
    took = time.monotonic() - start
    print(run, len(trace), "steps;", report.steps, f"probed in {took:.1f}s;", dict(report.proven))
    assert not report.failures, "\n".join(report.failures[:5])
    for code in LIVE_REASONS[run]:
        assert report.proven[code], f"{run}: no {code} reason was proven: {dict(report.proven)}"
    if run == "priority_live":  # the cap held requests back while the KV cache sat mostly free
        from tracer.analysis.reasons import CODE_INDEX
        from tracer.analysis.step_bindings import bindings

        capped = bindings(trace) == CODE_INDEX["max_num_seqs"]
        assert capped.any() and float(trace.columns["kv_usage"][capped].max()) < 0.5


@pytest.mark.parametrize("run", ["async_live", "priority_live"])
def test_exact_settles_a_live_trace_as_format_12_to_the_recorded_reasons(
    run: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    """`why --exact` on the live trace stripped to format 1.2 (no free-block counts, no
    prefix hits): its likely and derived reasons, settled on the real scheduler, are the
    ones the 1.3 trace gives exactly."""
    from tests.test_why_probes import _as_format_12
    from tracer.analysis.reasons import EXACT, LIKELY
    from tracer.analysis.why import steps_why
    from tracer.whatif.probe import _apply, probe_steps

    trace, _ = request.getfixturevalue(run)
    old = _as_format_12(Path(trace.path), tmp_path / "old.jsonl")
    truth = {w.step: w for w in steps_why(trace, range(len(trace)))}
    pending = [
        w for w in steps_why(old, range(len(old))) if any(r.cause.certainty == LIKELY for r in w.requests)
    ]
    pending = pending[:: max(1, len(pending) // 10)][:10]
    probes = probe_steps(old, [w.step for w in pending])
    settled_n = 0
    for w in pending:
        settled = _apply(w, probes[w.step])
        recorded = {r.id: r for r in truth[w.step].requests}
        for before, after in zip(w.requests, settled.requests, strict=True):
            exact = recorded.get(after.id)
            # (A 1.2 trace lacks the prefix hits: an admitted request may look clipped there.)
            if exact is not None and before.cause.certainty == LIKELY and exact.cause.certainty == EXACT:
                assert after.cause.certainty == EXACT, (w.step, before, after)
                assert after.cause.root == exact.cause.root, (w.step, after, exact)
                settled_n += 1
    print(run, len(pending), "steps settled;", settled_n, "likely reasons now exact")
    assert settled_n
