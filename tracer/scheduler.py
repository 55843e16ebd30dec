"""Tracing scheduler classes for `vllm serve --scheduler-cls`.

    vllm serve MODEL --scheduler-cls tracer.scheduler.TracingScheduler
    (or tracer.scheduler.TracingAsyncScheduler with async scheduling)

Recording is on when SCHEDSCOPE_TRACE names an output file; without it these
classes are a pass-through. Tracer errors are logged once and counted, never
raised into vLLM, and the scheduling decisions are vLLM's own, untouched.
"""

from __future__ import annotations

import atexit
import functools
import logging
import sys
import time
from typing import Any

from vllm.v1.core.sched.async_scheduler import AsyncScheduler
from vllm.v1.core.sched.scheduler import Scheduler

from tracer.live import taps as live_taps
from tracer.record import recorder as _recorder
from tracer.record import runner_hook, wiring
from tracer.record.config import current_config
from tracer.record.engine_config import engine_index
from tracer.record.shipper import TraceShipper

logger = logging.getLogger("schedscope.scheduler")

STREAM_FLUSH_S = 1.0  # at shutdown, how long connected viewers get to receive the footer


class TracingMixin:
    """Wraps schedule(), update_from_output() and shutdown() of a vLLM scheduler."""

    _schedscope: _recorder.Recorder | None = None
    # The stream and /metrics when they run here (a writer thread); None in the trace process.
    _schedscope_live: live_taps.LiveTaps | None = None
    # Where a step's `t` comes from; a timed replay (tracer.whatif.replay) sets its predicted clock.
    _schedscope_clock = staticmethod(time.monotonic)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        config = current_config()
        if not config.active:
            return
        path = config.trace
        engine = engine_index(self)
        metrics_token = config.metrics_token
        shipper = None
        if config.writer == "process":
            shipper = TraceShipper.start(
                path,
                max_queue=config.queue,
                stream_at=config.stream,
                stream_token=config.stream_token,
                metrics_at=config.metrics,
                metrics_token=metrics_token,
                engine=engine,
                otlp=config.otlp,
                otlp_timeout=config.otlp_timeout,
            )
        live = None
        if shipper is None:  # the stream and the counters run here, on the writer thread
            live = live_taps.start(
                stream_at=config.stream,
                stream_token=config.stream_token,
                metrics_at=config.metrics,
                metrics_token=metrics_token,
                engine=engine,
                otlp=config.otlp,
                in_engine_core=True,
            )
            self._schedscope_live = live
        try:
            # Policy layers (tracer.policies) name themselves; vLLM's own is "stock".
            policy = getattr(self, "SCHEDSCOPE_POLICY", "stock")
            # The config read above, passed on: the environment is parsed once per scheduler.
            rec = wiring.recorder_for(
                self,
                path,
                policy=policy,
                max_queue=config.queue,
                taps=live.taps if live is not None else (),
                header=config.header,
                shipper=shipper,
            )
        except Exception:
            logger.exception("schedscope: cannot record to %s; serving without a trace", path)
            return
        self._schedscope = rec
        if live is not None:
            writer = rec.writer
            live.count_drops(lambda: writer.dropped)
        atexit.register(rec.close)
        try:
            runner_hook.install()
            _close_trace_first_on_engine_shutdown()
        except Exception:
            rec.fail("hook install")
        where = f"the trace process (pid {shipper.pid})" if shipper is not None else "a writer thread"
        logger.info("schedscope: recording scheduler steps to %s, from %s", path, where)

    @property
    def _schedscope_stream(self) -> Any:
        """The stream server when it runs in this process (tests and benches look at it)."""
        live = self._schedscope_live
        return live.stream if live is not None else None

    def schedule(self, *args: Any, **kwargs: Any) -> Any:
        rec = self._schedscope
        if rec is None:
            return super().schedule(*args, **kwargs)  # type: ignore[misc]
        t_in = time.perf_counter_ns()
        try:
            pre = rec.before_schedule(self)
        except Exception:
            rec.fail("before schedule()")
            pre = None
        t_start = self._schedscope_clock()
        t0 = time.perf_counter_ns()
        out = super().schedule(*args, **kwargs)  # type: ignore[misc]
        t1 = time.perf_counter_ns()
        try:
            rec.after_schedule(self, out, pre, t_start, t1 - t0)
        except Exception:
            rec.fail("after schedule()")
        # The hooks' own time, schedule()'s left out: what the tracer took of this thread.
        rec.hooks_ns += time.perf_counter_ns() - t1 + t0 - t_in
        return out

    _schedscope_updating = False

    def update_from_output(self, scheduler_output: Any, model_runner_output: Any) -> Any:
        self._schedscope_updating = True
        try:
            result = super().update_from_output(scheduler_output, model_runner_output)  # type: ignore[misc]
        finally:
            self._schedscope_updating = False
        rec = self._schedscope
        if rec is not None:
            t_in = time.perf_counter_ns()
            try:
                # How requests ended is read off the outputs only in a step where some did.
                ended = getattr(self, "finished_req_ids", True)
                rec.after_update(scheduler_output, model_runner_output, result if ended else None)
            except Exception:
                rec.fail("update_from_output()")
            rec.hooks_ns += time.perf_counter_ns() - t_in
        return result

    def _preempt_request(self, request: Any, *args: Any, **kwargs: Any) -> Any:
        """Who was evicted, for whom, and what it lost: read as vLLM evicts it (rare, so the
        caller's frame is looked at only here: schedule()'s `request` is the one whose KV
        allocation failed)."""
        rec = self._schedscope
        if rec is None:
            return super()._preempt_request(request, *args, **kwargs)  # type: ignore[misc]
        try:
            caller = sys._getframe(1)
            trigger = caller.f_locals.get("request") if caller.f_code.co_name == "schedule" else None
            lost, free = int(request.num_computed_tokens), _recorder.free_blocks(self)
        except Exception:
            rec.fail("_preempt_request()")
            return super()._preempt_request(request, *args, **kwargs)  # type: ignore[misc]
        result = super()._preempt_request(request, *args, **kwargs)  # type: ignore[misc]
        try:
            rec.on_preempt(request, trigger, free, lost, self)
        except Exception:
            rec.fail("_preempt_request()")
        return result

    # The engine's other calls into the scheduler: a replay re-makes a run from them.
    def add_request(self, request: Any) -> None:
        super().add_request(request)  # type: ignore[misc]
        rec = self._schedscope
        if rec is not None:
            t_in = time.perf_counter_ns()
            try:
                rec.on_add(request)
            except Exception:
                rec.fail("add_request()")
            rec.hooks_ns += time.perf_counter_ns() - t_in

    def finish_requests(self, request_ids: Any, finished_status: Any) -> Any:
        rec = self._schedscope
        # Requests the scheduler fails itself inside update_from_output() (grammar or
        # KV-load errors) are not engine inputs: their ends are read off the outputs.
        if rec is not None and not self._schedscope_updating:
            try:
                rec.on_finish(request_ids, finished_status)
            except Exception:
                rec.fail("finish_requests()")
        return super().finish_requests(request_ids, finished_status)  # type: ignore[misc]

    def update_draft_token_ids(self, draft_token_ids: Any) -> None:
        rec = self._schedscope
        if rec is not None:
            t_in = time.perf_counter_ns()
            try:
                rec.on_drafts(draft_token_ids)
            except Exception:
                rec.fail("update_draft_token_ids()")
            rec.hooks_ns += time.perf_counter_ns() - t_in
        super().update_draft_token_ids(draft_token_ids)  # type: ignore[misc]

    def shutdown(self) -> None:
        try:
            super().shutdown()  # type: ignore[misc]
        finally:
            self.close_trace()

    def close_trace(self, timeout: float = 5.0) -> None:
        """Flush and finish the trace (footer included); safe to call twice."""
        rec = self._schedscope
        if rec is None or rec.closed:
            return
        try:
            rec.close(timeout)
        except Exception:
            logger.exception("schedscope: error while closing the trace")
        # The footer was just published; EngineCore may exit right after, and with it the
        # viewers' daemon threads. A viewer that is not reading costs this bound, no more.
        if self._schedscope_live is not None:
            self._schedscope_live.flush_stream(STREAM_FLUSH_S)


def _close_trace_first_on_engine_shutdown() -> None:
    """Finish the trace as soon as EngineCore stops stepping, not at the end of teardown.

    On SIGTERM, EngineCore leaves its busy loop, resets SIGTERM to the default
    action, then stops the model executor (waiting for the worker) before it
    calls scheduler.shutdown(). A second SIGTERM (from the API server's process
    manager, or Ctrl-C reaching the whole group) or the API server's exit kills it
    in that window, and the footer would be lost. Every step is complete once the
    busy loop has returned, so the trace is closed right there.
    """
    try:
        from vllm.v1.engine import core
    except Exception:
        return
    for cls_name, method in (
        ("EngineCoreProc", "run_busy_loop"),
        ("DPEngineCoreProc", "run_busy_loop"),
        ("EngineCore", "shutdown"),
    ):
        cls = getattr(core, cls_name, None)
        if cls is None or method not in cls.__dict__ or cls.__dict__.get(f"_schedscope_{method}"):
            continue
        setattr(cls, method, _closing_trace_first(cls.__dict__[method]))
        setattr(cls, f"_schedscope_{method}", True)


def _closing_trace_first(orig: Any) -> Any:
    @functools.wraps(orig)
    def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
        if orig.__name__ == "shutdown":
            _close_engine_trace(self)
            return orig(self, *args, **kwargs)
        try:
            return orig(self, *args, **kwargs)
        finally:
            _close_engine_trace(self)

    return wrapper


def _close_engine_trace(engine: Any) -> None:
    close = getattr(getattr(engine, "scheduler", None), "close_trace", None)
    if callable(close):
        close()


class TracingScheduler(TracingMixin, Scheduler):
    """vLLM's synchronous Scheduler, traced."""


class TracingAsyncScheduler(TracingMixin, AsyncScheduler):
    """vLLM's AsyncScheduler, traced."""
