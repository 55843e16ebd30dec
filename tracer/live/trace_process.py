"""The trace process: encodes, writes, streams and counts what a server's EngineCore ships.

    python -m tracer.live.trace_process TRACE|- [--queue N] [--stream HOST:PORT]
                                               [--metrics SPEC] [--engine N]
                                               [--otlp URL] [--otlp-timeout S] [--nice N]

Started by tracer.record.shipper.TraceShipper; reads its frames (length, then a pickle of
(items, the server's footer facts, end)) from stdin. Everything the writer thread would do
in EngineCore happens here, under this process's own GIL: the encoder (tracer.record.encoder),
the file and its kept footer, the recording index's follower, the live stream and /metrics, and
each request's OpenTelemetry spans (tracer.live.spans, SCHEDSCOPE_OTLP). The
stream and metrics tokens come from the environment (SCHEDSCOPE_STREAM_TOKEN,
SCHEDSCOPE_METRICS_TOKEN), as in EngineCore.

At the end frame it writes the footer. At the end of its input without one (EngineCore was
killed) it writes every record it got and leaves the footer's facts in `<trace>.end`, where
the reader finds them.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import pickle
import sys
from pathlib import Path
from typing import IO, Any

from tracer.live import taps as live_taps
from tracer.record.encoder import StepEncoder, TracerCost, footer
from tracer.record.indexer import IndexProcess
from tracer.record.shipper import FRAME
from tracer.record.writer import Record, TraceWriter, open_sink
from tracer.trace import schema

logger = logging.getLogger("schedscope.writer")

STREAM_FLUSH_S = 1.0  # at the end, how long connected viewers get to receive the footer
SPANS_FLUSH_S = 5.0  # at the end (the footer written), how long the collector gets for the last spans
SHUTDOWN_S = 10.0
# The process yields the CPU to the server it traces: where cores are short (a 2-core host, a
# busy node), the kernel runs EngineCore first and this process catches up between steps; its
# queue and EngineCore's bound what it may fall behind by, and drops are counted.
NICE = 10


class ShippedTrace:
    """One trace, as shipped: the encoder made from its header, the footer from both sides."""

    def __init__(self) -> None:
        self.encoder: StepEncoder | None = None
        self.server_facts: dict[str, Any] = {}  # the server's part of the footer, last shipped
        self.writer: TraceWriter | None = None

    def encode(self, item: Any) -> Record:
        if self.encoder is None:
            if not (isinstance(item, dict) and item.get("kind") == schema.HEADER):
                raise ValueError("the first record shipped is not the header")
            self.encoder = StepEncoder(item.get("config") or {})
        return self.encoder.encode(item)

    def facts(self) -> dict[str, Any]:
        """The footer: the steps written here; drops and errors of both sides."""
        server, writer = self.server_facts, self.writer
        assert writer is not None
        return footer(
            steps=self.encoder.steps_built if self.encoder is not None else 0,
            dropped=int(server.get("records_dropped") or 0) + writer.dropped,
            errors=int(server.get("errors") or 0) + writer.errors,
            failure=writer.failed or server.get("writer_failure"),
            # EngineCore's part of the tracer's time, as its recorder measured it
            cost=TracerCost(server["hooks_s"], server["writer_thread_s"]) if "hooks_s" in server else None,
        )


def read_frames(stream: IO[bytes]) -> Any:
    """The frames on `stream`, until its end (a torn last frame is the end too)."""
    while True:
        head = stream.read(FRAME.size)
        if len(head) < FRAME.size:
            return
        (size,) = FRAME.unpack(head)
        body = stream.read(size)
        if len(body) < size:
            return
        yield pickle.loads(body)


def run(
    path: Path | None,
    *,
    queue: int,
    stream_at: str,
    metrics_at: str,
    engine: str,
    otlp: str = "",
    otlp_timeout: float = 5.0,
) -> int:
    live = live_taps.start(
        stream_at=stream_at,
        stream_token=os.environ.get("SCHEDSCOPE_STREAM_TOKEN") or None,
        metrics_at=metrics_at,
        metrics_token=os.environ.get("SCHEDSCOPE_METRICS_TOKEN") or None,
        engine=engine,
        otlp=otlp,
        otlp_timeout=otlp_timeout,
        path=str(path) if path is not None else None,
    )
    trace = ShippedTrace()
    if path is None:
        sink: Any = open(os.devnull, "ab")  # noqa: SIM115 - owned and closed by the writer
    else:
        sink = open_sink(path)  # made empty by the shipper: this run's file
    writer = TraceWriter(sink, trace.encode, max_queue=queue, taps=live.taps, index=IndexProcess.start(path))
    trace.writer = writer
    live.count_drops(lambda: int(trace.server_facts.get("records_dropped") or 0) + writer.dropped)
    if path is not None:
        writer.keep_footer(path.with_name(path.name + schema.KEPT_FOOTER_SUFFIX), trace.facts)
    ended = False
    for items, facts, end in read_frames(sys.stdin.buffer):
        if facts:
            trace.server_facts = facts
        writer.write_now(items)
        if end:
            ended = True
            break
    # With the end: the footer. Without (EngineCore gone): the kept facts stay beside the trace.
    writer.shutdown(SHUTDOWN_S, last=trace.facts if ended else None)
    live.flush_stream(STREAM_FLUSH_S)
    # Last: the trace and its footer are whole whatever the collector does.
    live.close_spans(SPANS_FLUSH_S)
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m tracer.live.trace_process", description=__doc__.split("\n\n")[0]
    )
    ap.add_argument("trace", help="the trace file to write, or - for none (a stream or /metrics only)")
    ap.add_argument("--queue", type=int, default=65536, help="the writer's queue, in records")
    ap.add_argument("--stream", default="", help="serve the live stream at HOST:PORT")
    ap.add_argument(
        "--metrics", default="", help="HOST:PORT for /metrics, 'off', or '' (on the stream's port)"
    )
    ap.add_argument("--engine", default="0", help="the engine label of the metrics")
    ap.add_argument("--otlp", default="", help="send each request's spans to this OTLP/HTTP collector")
    ap.add_argument("--otlp-timeout", type=float, default=5.0, help="seconds a batch of spans gets")
    ap.add_argument(
        "--nice", type=int, default=NICE, help="added to this process's niceness (0: the server's priority)"
    )
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    if args.nice:
        with contextlib.suppress(OSError):  # raising niceness needs no privilege; never fail on it
            os.nice(args.nice)
    path = None if args.trace == "-" else Path(args.trace)
    return run(
        path,
        queue=args.queue,
        stream_at=args.stream,
        metrics_at=args.metrics,
        engine=args.engine,
        otlp=args.otlp,
        otlp_timeout=args.otlp_timeout,
    )


if __name__ == "__main__":
    sys.exit(main())
