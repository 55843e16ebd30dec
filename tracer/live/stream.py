"""Live stream of trace records over plain HTTP NDJSON, served from the EngineCore.

    SCHEDSCOPE_STREAM=127.0.0.1:8799 [SCHEDSCOPE_STREAM_TOKEN=secret] vllm serve … --scheduler-cls …
    curl -N http://127.0.0.1:8799/trace?since=120

A viewer gets the header, then the backlog of recent records from a bounded
ring (those after `since`), then live records. While nothing is published for
a heartbeat interval (2 s) the viewer's own HTTP thread sends it a small
`heartbeat` record, so an idle engine is told apart from a dead connection;
heartbeats never enter the ring or a trace file. The hub is a writer tap: it runs
on the trace writer's thread and only appends to bounded per-viewer queues, so
neither the scheduler nor the writer ever waits for a viewer. A viewer that
falls a whole queue behind is cut off and counted; when it reconnects with
`since`, the records it missed that left the ring come back as an explicit
`gap` record, never as silently missing steps.

Security: loopback by default. Binding any other address requires a bearer
token (SCHEDSCOPE_STREAM_TOKEN) and logs a warning; without one the stream
refuses to start. stdlib http.server: no dependency, and the EngineCore
process must not grow one.
"""

from __future__ import annotations

import hmac
import logging
import threading
import time
from collections import deque
from http.server import BaseHTTPRequestHandler
from typing import Any
from urllib.parse import parse_qs, urlparse

import orjson

from tracer.live.net import OwnPortServer, is_loopback, parse_bind
from tracer.record.writer import Record
from tracer.trace import schema
from tracer.trace.schema import HEARTBEAT_INTERVAL

logger = logging.getLogger("schedscope.stream")

ENV_STREAM = "SCHEDSCOPE_STREAM"
ENV_TOKEN = "SCHEDSCOPE_STREAM_TOKEN"


class StreamConfigError(ValueError):
    pass


class _Viewer:
    """One connected viewer: a bounded queue the writer thread appends to."""

    def __init__(self, limit: int) -> None:
        self.lines: deque[bytes] = deque()
        self.limit = limit
        self.ready = threading.Condition()
        self.cut = False
        self.ended = False
        self.unsent = 0  # lines offered and not yet written to the socket
        self.done = False  # its HTTP thread has returned: all it will send is sent

    def offer(self, lines: list[bytes]) -> bool:
        with self.ready:
            if self.cut:
                return False
            if len(self.lines) + len(lines) > self.limit:
                self.cut = True  # too far behind: cut it off, never wait for it
                self.lines.clear()
            else:
                self.lines.extend(lines)
                self.unsent += len(lines)
            self.ready.notify()
        return not self.cut

    def sent(self, n: int) -> None:
        """Its HTTP thread wrote and flushed `n` lines that take() gave it."""
        with self.ready:
            self.unsent -= n
            if self.unsent <= 0:
                self.ready.notify_all()

    def finish(self) -> None:
        """Its HTTP thread has returned (sent all, or the viewer went away)."""
        with self.ready:
            self.done = True
            self.ready.notify_all()

    def wait_sent(self, timeout: float) -> bool:
        """Wait up to `timeout` s until every line offered is on the socket (or it never will be)."""
        with self.ready:
            return self.ready.wait_for(lambda: self.unsent <= 0 or self.cut or self.done, timeout)

    def end(self) -> None:
        """End this viewer's connection once what is queued is sent (its HTTP thread returns)."""
        with self.ready:
            self.ended = True
            self.ready.notify()

    def take(self, timeout: float) -> list[bytes] | None:
        """Lines queued so far; [] on timeout; None once cut off, or ended with nothing left."""
        with self.ready:
            if not self.lines and not self.cut and not self.ended:
                self.ready.wait(timeout)
            if self.cut or (self.ended and not self.lines):
                return None
            out = list(self.lines)
            self.lines.clear()
            return out


class StreamHub:
    """Keeps the header and a ring of recent records; fans new ones out to viewers."""

    def __init__(self, *, backlog: int = 8192, viewer_queue: int = 65_536) -> None:
        self.header: bytes | None = None
        self._ring: deque[tuple[int, bytes]] = deque(maxlen=backlog)
        self._viewers: set[_Viewer] = set()
        self._lock = threading.Lock()
        self._viewer_queue = viewer_queue
        self.viewers_cut = 0
        self.last_step = 0
        self.published_at: float | None = None  # wall time of the last publish (heartbeats' idle_since)

    # writer thread (a TraceWriter tap)
    def publish(self, records: list[Record]) -> None:
        fresh: list[bytes] = []
        ringed: list[tuple[int, bytes]] = []
        header = None
        for kind, step, line in records:
            if kind == schema.HEADER:
                header = line  # kept apart (every viewer opens with it), and sent on
            else:
                if step is not None:
                    self.last_step = max(self.last_step, step)
                # A record without a step (the footer) is ringed with the last step seen.
                ringed.append((step or self.last_step, line))
            fresh.append(line)
        # One lock orders publish and subscribe: a record is either in a new
        # viewer's opening lines or in its queue, never both nor neither.
        with self._lock:
            if header is not None:
                self.header = header
            self._ring.extend(ringed)
            viewers = list(self._viewers)
            self.published_at = time.time()
        for viewer in viewers:
            if not viewer.offer(fresh):
                self._drop(viewer)

    def _drop(self, viewer: _Viewer) -> None:
        with self._lock:
            if viewer in self._viewers:
                self._viewers.discard(viewer)
                self.viewers_cut += 1
                logger.warning(
                    "schedscope: cut off a stream viewer that fell behind (%d so far)", self.viewers_cut
                )

    # viewer threads
    def subscribe(self, since: int) -> tuple[_Viewer, list[bytes]]:
        """Register a viewer; return it with its opening lines (header, gap, backlog)."""
        viewer = _Viewer(self._viewer_queue)
        with self._lock:
            backlog = [line for step, line in self._ring if step > since]
            oldest = self._ring[0][0] if self._ring else self.last_step + 1
            self._viewers.add(viewer)
            opening = [self.header] if self.header else []
        if since and oldest > since + 1:
            gap = {"kind": "gap", "after": since, "before": oldest, "reason": "left the server's backlog"}
            opening.append(orjson.dumps(gap, option=orjson.OPT_APPEND_NEWLINE))
        return viewer, opening + backlog

    def heartbeat(self) -> bytes:
        """A keep-alive line for a viewer that has been sent nothing for a while (stream only)."""
        beat = {
            "kind": "heartbeat",
            "t": time.time(),
            "last_step": self.last_step,
            "idle_since": self.published_at,
        }
        return orjson.dumps(beat, option=orjson.OPT_APPEND_NEWLINE)

    def unsubscribe(self, viewer: _Viewer) -> None:
        with self._lock:
            self._viewers.discard(viewer)

    def disconnect_all(self) -> None:
        """End every viewer's connection (the server is closing); a viewer may reconnect with `since`."""
        with self._lock:
            viewers = list(self._viewers)
            self._viewers.clear()
        for viewer in viewers:
            viewer.end()

    def flush(self, timeout: float) -> bool:
        """Wait, at most `timeout` s in all, until every viewer has been sent what was published.

        The viewers' HTTP threads are daemons. At shutdown the footer is published just before
        EngineCore exits, which would take it down with them unsent. A viewer that is not
        reading costs this wait, never more; False if one was still behind at the deadline."""
        with self._lock:
            viewers = list(self._viewers)
        deadline = time.monotonic() + timeout
        return all([viewer.wait_sent(max(0.0, deadline - time.monotonic())) for viewer in viewers])

    @property
    def viewers(self) -> int:
        return len(self._viewers)


class StreamServer:
    """An HTTP server (net.OwnPortServer) serving GET /trace to any number of viewers."""

    def __init__(
        self,
        hub: StreamHub,
        host: str,
        port: int,
        token: str | None = None,
        *,
        heartbeat: float = HEARTBEAT_INTERVAL,
    ) -> None:
        if not is_loopback(host) and not token:
            raise StreamConfigError(
                f"refusing to stream on non-loopback address {host}: "
                f"set {ENV_TOKEN} (a bearer token) to allow it"
            )
        if not is_loopback(host):
            logger.warning("schedscope: streaming trace records on %s:%d (token required)", host, port)
        self.hub = hub
        self.token = token
        self.heartbeat = heartbeat
        # GET /metrics, when the tracer counts metrics (tracer.live.metrics.TraceMetrics).
        self.metrics: Any = None
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:  # quiet: vLLM owns the log
                logger.debug(format, *args)

            def do_GET(self) -> None:
                server._serve(self)

        self.httpd = OwnPortServer((host, port), Handler)
        self.address = self.httpd.server_address
        self._thread = threading.Thread(
            target=self.httpd.serve_forever, name="schedscope-stream", daemon=True
        )
        self._thread.start()

    @property
    def url(self) -> str:
        host, port = self.address[:2]
        return f"http://{host}:{port}/trace"

    def _authorized(self, handler: BaseHTTPRequestHandler) -> bool:
        if not self.token:
            return True
        given = handler.headers.get("Authorization", "")
        return hmac.compare_digest(given.encode(), f"Bearer {self.token}".encode())

    def _serve(self, h: BaseHTTPRequestHandler) -> None:
        url = urlparse(h.path)
        if url.path == "/metrics" and self.metrics is not None:
            from tracer.live.metrics import serve_metrics  # only where metrics are on

            serve_metrics(h, self.metrics, self.token)
            return
        if url.path != "/trace":
            h.send_error(404, "GET /trace[?since=STEP] or /metrics")
            return
        if not self._authorized(h):
            h.send_error(401, "bearer token required")
            return
        try:
            since = int(parse_qs(url.query).get("since", ["0"])[0])
        except ValueError:
            h.send_error(400, "since must be a step number")
            return
        viewer, opening = self.hub.subscribe(since)
        try:
            h.send_response(200)
            h.send_header("Content-Type", "application/x-ndjson")
            h.send_header("Cache-Control", "no-store")
            h.send_header("Connection", "close")
            h.end_headers()
            h.wfile.write(b"".join(opening))
            h.wfile.flush()
            sent_at = time.monotonic()
            while True:
                lines = viewer.take(max(0.0, sent_at + self.heartbeat - time.monotonic()))
                if lines is None:
                    return  # cut off or ended: the viewer reconnects with `since`
                if lines:
                    h.wfile.write(b"".join(lines))
                    h.wfile.flush()
                    viewer.sent(len(lines))
                    sent_at = time.monotonic()
                    continue
                if time.monotonic() - sent_at >= self.heartbeat:
                    # This viewer's own thread, never the scheduler's or the writer's.
                    h.wfile.write(self.hub.heartbeat())
                else:
                    continue  # woken early with nothing to send
                h.wfile.flush()
                sent_at = time.monotonic()
        except (BrokenPipeError, ConnectionResetError, OSError):
            return  # the viewer went away
        finally:
            self.hub.unsubscribe(viewer)
            viewer.finish()

    def close(self) -> None:
        """Stop serving. Connected viewers would otherwise be kept alive by heartbeats from a
        closed server. Idempotent."""
        if getattr(self, "_closed", False):
            return
        self._closed = True
        self.httpd.shutdown()
        self.hub.disconnect_all()
        self.httpd.server_close()


def start_from_env(value: str, token: str | None) -> tuple[StreamHub, StreamServer]:
    host, port = parse_bind(value)
    hub = StreamHub()
    return hub, StreamServer(hub, host, port, token or None)
