"""What a tracing scheduler records and serves: one `RecorderConfig`.

A server reads it from its SCHEDSCOPE_* environment variables (`RecorderConfig.from_env`); the
offline harness passes its own around building a scheduler (`configured`) and leaves the
environment be. A model-runner worker reads the same `from_env` to know whether to hook.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

# The recorder's logger: a bad value's warning reads as it always did.
logger = logging.getLogger("schedscope.recorder")

ENV_TRACE = "SCHEDSCOPE_TRACE"
ENV_QUEUE = "SCHEDSCOPE_QUEUE"
ENV_WRITER = "SCHEDSCOPE_WRITER"
DEFAULT_QUEUE = 65536
ENV_OTLP = "SCHEDSCOPE_OTLP"
ENV_OTLP_TIMEOUT = "SCHEDSCOPE_OTLP_TIMEOUT"
DEFAULT_OTLP_TIMEOUT = 5.0  # tracer.live.spans.TIMEOUT: EngineCore does not import the spans


@dataclass(frozen=True)
class RecorderConfig:
    """What a tracing scheduler records and serves. A server reads it from the environment
    (`from_env`); the offline harness passes one (`configured`) and leaves the environment be."""

    trace: Path | None = None  # the trace file; None: no file
    stream: str = ""  # SCHEDSCOPE_STREAM: HOST:PORT of the live stream, "" for none
    stream_token: str | None = None
    metrics: str = ""  # SCHEDSCOPE_METRICS: HOST:PORT, "off", or "" (on the stream server only)
    queue: int = DEFAULT_QUEUE  # the writer's bounded queue, in records
    metrics_token: str | None = None  # SCHEDSCOPE_METRICS_TOKEN, else the stream's token
    header: Mapping[str, Any] = field(default_factory=dict)  # extra header fields (a replay's source)
    # Where records are built and written: "process" (a server's default: the trace process,
    # off EngineCore's GIL) or "thread" (a writer thread beside the scheduler; the offline harness).
    writer: str = "thread"
    # SCHEDSCOPE_OTLP: an OTLP/HTTP collector for each request's spans (tracer.live.spans, in the
    # trace process only); SCHEDSCOPE_OTLP_TIMEOUT: seconds a batch of them gets.
    otlp: str = ""
    otlp_timeout: float = DEFAULT_OTLP_TIMEOUT

    @property
    def active(self) -> bool:
        return (
            self.trace is not None
            or bool(self.stream)
            or bool(self.otlp)
            or self.metrics.lower() not in ("", "off")
        )

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> RecorderConfig:
        """The server's configuration. A bad value is logged and falls back to its default:
        it never turns the trace off silently, nor stops the server."""
        env = os.environ if env is None else env
        raw = env.get(ENV_TRACE, "").strip()
        queue = DEFAULT_QUEUE
        text = env.get(ENV_QUEUE, "").strip()
        if text:
            try:
                queue = int(text)
                if queue <= 0:
                    raise ValueError("not positive")
            except ValueError:
                queue = DEFAULT_QUEUE
                logger.warning(
                    "schedscope: %s=%r is not a positive integer; using %d", ENV_QUEUE, text, queue
                )
        writer = env.get(ENV_WRITER, "").strip().lower() or "process"
        if writer not in ("process", "thread"):
            logger.warning(
                "schedscope: %s=%r is neither 'process' nor 'thread'; using process", ENV_WRITER, writer
            )
            writer = "process"
        otlp_timeout = DEFAULT_OTLP_TIMEOUT
        text = env.get(ENV_OTLP_TIMEOUT, "").strip()
        if text:
            try:
                otlp_timeout = float(text)
                if not 0 < otlp_timeout < float("inf"):
                    raise ValueError("not a positive number")
            except ValueError:
                otlp_timeout = DEFAULT_OTLP_TIMEOUT
                logger.warning(
                    "schedscope: %s=%r is not a positive number of seconds; using %g",
                    ENV_OTLP_TIMEOUT,
                    text,
                    otlp_timeout,
                )
        return cls(
            writer=writer,
            otlp=env.get(ENV_OTLP, "").strip(),
            otlp_timeout=otlp_timeout,
            trace=Path(raw.replace("{pid}", str(os.getpid()))) if raw else None,
            stream=env.get("SCHEDSCOPE_STREAM", "").strip(),
            stream_token=env.get("SCHEDSCOPE_STREAM_TOKEN") or None,
            metrics=env.get("SCHEDSCOPE_METRICS", "").strip(),
            queue=queue,
            metrics_token=env.get("SCHEDSCOPE_METRICS_TOKEN") or env.get("SCHEDSCOPE_STREAM_TOKEN") or None,
        )


# Set by the offline harness around building a scheduler (tracer.whatif.replay.recording_to);
# never in a server, where the environment decides.
_configured: ContextVar[RecorderConfig | None] = ContextVar("schedscope_recorder_config", default=None)


def current_config() -> RecorderConfig:
    return _configured.get() or RecorderConfig.from_env()


@contextmanager
def configured(config: RecorderConfig) -> Iterator[None]:
    """Tracing schedulers built inside this block record as `config` says."""
    token = _configured.set(config)
    try:
        yield
    finally:
        _configured.reset(token)


def trace_path_from_env() -> Path | None:
    """The trace path a scheduler built here would record to; `{pid}` is replaced (one file per engine)."""
    return current_config().trace
