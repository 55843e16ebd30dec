"""Sending spans to an OpenTelemetry collector over OTLP/HTTP (protobuf), for `schedscope export
--otlp`.

The OpenTelemetry SDK's own exporter sends each batch: it retries what OTLP says to retry (429,
502, 503, 504, a dropped connection) with backoff, all within `timeout` seconds a batch. The first
batch it gives up on ends the export: a collector that is down, refusing or too slow would refuse
the rest too, and waiting `timeout` for each of them would look like a hang. What was not sent is
counted as dropped. Why a batch failed is its last attempt's outcome, noted on the requests
Session the exporter is given (an HTTP answer, a refused connection, no answer in time); the
exporter's own log lines are caught rather than printed.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

TRACES_PATH = "/v1/traces"
DEFAULT_TIMEOUT = 10.0  # seconds per batch, as the exporter's default
EXPORTER_LOGGER = "opentelemetry.exporter.otlp"


@dataclass(frozen=True)
class Delivery:
    endpoint: str
    total: int  # spans there were to send
    sent: int
    seconds: float
    failure: str | None = None  # why the batch that failed was not taken

    @property
    def dropped(self) -> int:
        return self.total - self.sent


def endpoint_url(endpoint: str) -> str:
    """The OTLP/HTTP traces URL of ENDPOINT: `http://host:4318` gets `/v1/traces`, a URL with
    a path is taken as it is. ValueError naming it when it is not an http(s) URL."""
    parts = urlsplit(endpoint)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(
            f"--otlp {endpoint!r}: not an OTLP/HTTP endpoint; give http://HOST:PORT "
            "(a collector's OTLP/HTTP receiver, 4318 by default) or its full /v1/traces URL"
        )
    try:
        parts.port  # noqa: B018 (raises on a port that is not a number)
    except ValueError as exc:
        raise ValueError(f"--otlp {endpoint!r}: {exc}") from None
    return endpoint if parts.path not in ("", "/") else endpoint.rstrip("/") + TRACES_PATH


class _Caught(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


def _session() -> tuple[Any, list[Any]]:
    """A requests Session for the exporter that notes each attempt's outcome (a response, or
    the exception that ended it): the exporter's own log lines do not say which it was."""
    import requests
    from requests.adapters import HTTPAdapter

    attempts: list[Any] = []

    class Noting(HTTPAdapter):
        def send(self, *args: Any, **kwargs: Any) -> Any:
            try:
                response = super().send(*args, **kwargs)
            except Exception as exc:
                attempts.append(exc)
                raise
            attempts.append(response)
            return response

    session = requests.Session()
    session.mount("http://", Noting())
    session.mount("https://", Noting())
    return session, attempts


def send(batches: Iterable[Sequence[Any]], total: int, endpoint: str, *, timeout: float) -> Delivery:
    """Send each batch of SDK spans to `endpoint` (an OTLP/HTTP traces URL) until one fails."""
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.trace.export import SpanExportResult

    session, attempts = _session()
    exporter = OTLPSpanExporter(endpoint=endpoint, timeout=timeout, session=session)
    log = logging.getLogger(EXPORTER_LOGGER)
    caught, propagate = _Caught(), log.propagate
    log.addHandler(caught)
    log.propagate = False  # its lines are the reason handed back, not printed
    sent, failure = 0, None
    began = time.monotonic()
    try:
        for spans in batches:
            attempts.clear()
            caught.messages.clear()
            if exporter.export(spans) is not SpanExportResult.SUCCESS:
                failure = _reason(attempts, caught.messages, timeout)
                break
            sent += len(spans)
    finally:
        exporter.shutdown()
        log.removeHandler(caught)
        log.propagate = propagate
    return Delivery(endpoint, total, sent, time.monotonic() - began, failure)


def _reason(attempts: list[Any], messages: list[str], timeout: float) -> str:
    """Why a batch failed, from its last attempt (else the exporter's last log line)."""
    import requests

    retried = f" ({len(attempts)} tries in {timeout:g} s)" if len(attempts) > 1 else ""
    last = attempts[-1] if attempts else None
    if isinstance(last, requests.Response):
        return f"it answered HTTP {last.status_code} {last.reason}{retried}"
    if isinstance(last, requests.exceptions.ConnectTimeout):
        return f"could not connect within {timeout:g} s"
    if isinstance(last, requests.exceptions.Timeout):
        return f"no answer within {timeout:g} s"
    if isinstance(last, requests.exceptions.ConnectionError):
        if "refused" in str(last):
            return "connection refused (is the collector running, and listening there?)"
        return f"cannot connect: {_short(str(last))}"
    return _short(messages[-1]) if messages else "no reason given"


def _short(text: str) -> str:
    return text if len(text) <= 300 else text[:297] + "..."
