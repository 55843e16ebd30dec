"""Where the EngineCore's servers listen: the bind address parsing and the loopback test
that the stream (tracer.live.stream) and the metrics server (tracer.live.metrics) share.

Its own module so neither server imports the other for them."""

from __future__ import annotations

import ipaddress

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
