"""A real OTLP/HTTP traces receiver for the tests: http.server on 127.0.0.1 (an ephemeral port)
decoding each POSTed body with the official protobuf definitions (opentelemetry-proto's
ExportTraceServiceRequest), as a collector's otlp receiver does. No `otelcol` binary is
packaged by Debian or PyPI, so this stands in for one; it can also answer 503 or sleep past a
client's timeout, for the fault tests."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)


@dataclass
class Received:
    requests: list[ExportTraceServiceRequest] = field(default_factory=list)
    posts: int = 0
    paths: list[str] = field(default_factory=list)

    def spans(self) -> list[Any]:
        return [
            s for r in self.requests for rs in r.resource_spans for ss in rs.scope_spans for s in ss.spans
        ]


@contextmanager
def receiver(mode: str = "ok", *, sleep: float = 0.0) -> Iterator[tuple[str, Received]]:
    """Yields (base URL, what it received). mode: "ok" (200 with an ExportTraceServiceResponse),
    "unavailable" (503 to every request), "once" (200 to the first, then 503) or "slow"
    (sleeps `sleep` s, then answers 200)."""
    got = Received()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers["Content-Length"]))
            got.posts += 1
            got.paths.append(self.path)
            if mode == "unavailable" or (mode == "once" and got.posts > 1):
                self.send_response(503)
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            if mode == "slow":
                time.sleep(sleep)
            request = ExportTraceServiceRequest()
            request.ParseFromString(body)
            assert self.headers["Content-Type"] == "application/x-protobuf"
            got.requests.append(request)
            reply = ExportTraceServiceResponse().SerializeToString()
            try:
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", str(len(reply)))
                self.end_headers()
                self.wfile.write(reply)
            except OSError:
                pass  # the client gave up (the slow case)

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", got
    finally:
        server.shutdown()
        server.server_close()
