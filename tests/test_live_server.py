"""The tracer inside a real `vllm serve` on CPU: a tiny local Llama, ngram and
draft_model speculative decoding, concurrent completions over HTTP.

Each server starts once (~25 s), serves, and is stopped with SIGTERM; the
assertions read the trace it left behind.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.live_support import build_tiny_llama, free_port, start_server
from tests.test_metrics import assert_totals_equal, scrape
from tracer.attach import StreamFollower
from tracer.reader import Trace, load

pytestmark = pytest.mark.live

PROMPTS = [
    "Hello world, hello scheduler, hello tracer, hello",
    "The quick brown fox jumps over the lazy dog. The quick brown fox",
    "One two three four five six seven eight nine ten",
    "Each request gets a number of tokens from the token budget.",
    "hello hello hello hello hello hello hello hello",
    "The scheduler splits a budget between target tokens and drafts.",
]
MAX_TOKENS = 12


@dataclass
class Run:
    trace: Trace
    responses: list[dict[str, Any]]
    k: int
    streamed: bytes = b""  # what a `schedscope attach` viewer received over the live stream
    vllm_drafts: float = 0.0  # vLLM's own counter of draft tokens verified
    schedscope_scrape: dict[str, Any] | None = None  # SCHEDSCOPE_METRICS, scraped once the load was served
    stream_scrape: dict[str, Any] | None = None  # /metrics on the stream server, same moment


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("models")
    return {
        "target": build_tiny_llama(root / "target", seed=0),
        "draft": build_tiny_llama(root / "draft", seed=1),
    }


def _serve_and_trace(models: dict[str, Path], spec: dict[str, Any], tmp: Path, stream: bool = False) -> Run:
    trace_path = tmp / "live.jsonl"
    args = [
        "--speculative-config", json.dumps(spec),
        "--scheduler-cls", "tracer.scheduler.TracingScheduler",
        "--max-num-batched-tokens", "256",
        # Let EngineCore shut down (and the tracer write its footer) before the
        # API server's process manager force-kills it; 0 kills at once.
        "--shutdown-timeout", "10",
    ]  # fmt: skip
    env = {"SCHEDSCOPE_TRACE": str(trace_path)}
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
        if metrics_port:
            # Scraped while the server still runs, once the engine is idle (its steps all written).
            scraped = _scrape_when_settled(f"http://127.0.0.1:{metrics_port}/metrics")
            scraped["stream"] = scrape(f"http://127.0.0.1:{port}/metrics")
    if viewer is not None:
        viewer.join(15)
    stream_scrape = scraped.pop("stream", None)
    run = Run(load(trace_path), responses, spec["num_speculative_tokens"], b"".join(received), drafts)
    run.schedscope_scrape, run.stream_scrape = scraped or None, stream_scrape
    return run


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
    yield _serve_and_trace(models, spec, tmp_path_factory.mktemp("ngram"), stream=True)


@pytest.fixture(scope="module")
def draft_run(models: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> Iterator[Run]:
    spec = {"method": "draft_model", "model": str(models["draft"]), "num_speculative_tokens": 2}
    yield _serve_and_trace(models, spec, tmp_path_factory.mktemp("draft"))


def _per_request(trace: Trace) -> dict[str, dict[str, int]]:
    """Per request id: prompt demand at admission, target tokens, spec tokens,
    sampled tokens, and steps that sampled."""
    reqs: dict[str, dict[str, int]] = {}
    for rec in trace.steps():
        for rid, _, _, demand in rec["new"]:
            reqs[rid] = {"demand": demand, "tokens": 0, "spec": 0, "sampled": 0, "sampling_steps": 0}
        for rid, tokens, spec, _ in rec["new"] + rec["resumed"] + rec["running"]:
            reqs[rid]["tokens"] += tokens
            reqs[rid]["spec"] += spec
        for rid, n in (rec["sampled"] or {}).items():
            reqs[rid]["sampled"] += n
            reqs[rid]["sampling_steps"] += n > 0
    return reqs


@pytest.mark.parametrize("run_name", ["ngram_run", "draft_run"])
def test_live_trace_matches_the_served_requests(run_name: str, request: pytest.FixtureRequest) -> None:
    run: Run = request.getfixturevalue(run_name)
    trace = run.trace
    assert trace.header["vllm_version"].startswith("0.32")
    assert trace.footer is not None, "SIGTERM must flush the trace and write its footer"
    assert trace.footer["records_dropped"] == 0 and trace.footer["errors"] == 0
    assert trace.footer["steps_written"] == len(trace) > 0

    reqs = _per_request(trace)
    # Admitted requests are the requests sent: vLLM's internal id extends the response id.
    assert len(reqs) == len(PROMPTS)
    for resp in run.responses:
        matches = [rid for rid in reqs if rid.startswith(resp["id"])]
        assert len(matches) == 1, (resp["id"], sorted(reqs))
        r = reqs[matches[0]]
        usage = resp["usage"]
        assert usage["completion_tokens"] == MAX_TOKENS
        assert r["demand"] == usage["prompt_tokens"]
        # Every step but the prefill feeds back the last sampled token plus drafts.
        assert r["tokens"] - r["spec"] == usage["prompt_tokens"] + r["sampling_steps"] - 1
        # The last step may sample accepted drafts past max_tokens; vLLM trims them.
        assert MAX_TOKENS <= r["sampled"] <= MAX_TOKENS + run.k

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


def test_draft_model_reserves_a_slot_per_request_and_runs_a_draft_pass(draft_run: Run) -> None:
    trace = draft_run.trace
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
    assert copy.read_bytes() == Path(ngram_run.trace.path).read_bytes()


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
