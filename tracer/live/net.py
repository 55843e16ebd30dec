"""Where the EngineCore's servers listen: the bind address parsing, the loopback test and the
HTTP server class that the stream (tracer.live.stream) and the metrics server
(tracer.live.metrics) share.

Its own module so neither server imports the other for them."""

from __future__ import annotations

import errno
import ipaddress
import socket
from http.server import ThreadingHTTPServer
from pathlib import Path

DEFAULT_PORT = 8799  # the stream's; the metrics server passes its own


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def parse_bind(value: str, default_port: int = DEFAULT_PORT) -> tuple[str, int]:
    """ "HOST:PORT", ":PORT", "PORT" or "HOST" -> (host, port); loopback when omitted."""
    value = value.strip()
    if value.isdigit():
        return "127.0.0.1", int(value)
    host, sep, port = value.rpartition(":")
    if not sep:
        return value, default_port
    return (host.strip("[]") or "127.0.0.1"), int(port)


_LISTEN = "0A"  # a socket's state in /proc/net/tcp: listening


class OwnPortServer(ThreadingHTTPServer):
    """A ThreadingHTTPServer that never shares its port with a socket bound before it.

    With SO_REUSEADDR (http.server's default), Linux lets a listening socket take a port that
    another socket has bound and does not listen on yet, which is how `vllm serve` holds its
    --port while its engine starts: a stream or metrics port set to the server's own would take
    it, and vLLM's listen() would then fail, its /health answered by this server. So the port is
    bound without SO_REUSEADDR (taken: the caller logs it and goes on without this server), and
    again with it only when nothing listens on it and connections are all that hold it (a
    restart while the last one's viewers' connections wait out TIME_WAIT)."""

    allow_reuse_address = False
    daemon_threads = True

    def server_bind(self) -> None:
        try:
            super().server_bind()
        except OSError as exc:
            if exc.errno != errno.EADDRINUSE or not _held_by_connections_only(self.server_address[1]):
                raise
            self.socket.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            super().server_bind()
        # Bound: the flag now only marks this socket and the connections it accepts (they inherit
        # it) as ones a later server may bind beside, once they are all that holds the port.
        self.socket.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)


def _held_by_connections_only(port: int) -> bool:
    """Whether the kernel lists sockets on local `port` and none of them listens: closed
    connections waiting out their time. (A socket bound and not listening is not listed.)"""
    states = []
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            rows = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for row in rows:
            fields = row.split()
            if len(fields) > 3 and int(fields[1].rpartition(":")[2], 16) == port:
                states.append(fields[3])
    return bool(states) and _LISTEN not in states
