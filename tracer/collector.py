"""Sending spans to an OpenTelemetry collector over OTLP/HTTP (protobuf), for `schedscope export
--otlp`.

The OpenTelemetry SDK's own exporter sends each batch: it retries what OTLP says to retry (429,
502, 503, 504, a dropped connection) with backoff, all within `timeout` seconds a batch. The first
batch it gives up on ends the export: a collector that is down, refusing or too slow would refuse
the rest too, and waiting `timeout` for each of them would look like a hang. What was not sent is
counted as dropped. Why a batch failed is the collector's last HTTP answer, or else the
exporter's own log lines (caught, not printed): a refused connection, no answer in time.
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


def send(batches: Iterable[Sequence[Any]], total: int, endpoint: str, *, timeout: float) -> Delivery:
    """Send each batch of SDK spans to `endpoint` (an OTLP/HTTP traces URL) until one fails."""
    import requests
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.trace.export import SpanExportResult

    # The last HTTP answer, through requests' response hook on the session the exporter uses:
    # its log lines do not give the status of a retried answer.
    answers: list[str] = []
    session = requests.Session()
    session.hooks["response"].append(lambda r, *_, **__: answers.append(f"{r.status_code} {r.reason}"))
    exporter = OTLPSpanExporter(endpoint=endpoint, timeout=timeout, session=session)
    log = logging.getLogger(EXPORTER_LOGGER)
    caught, propagate = _Caught(), log.propagate
    log.addHandler(caught)
    log.propagate = False
    sent, failure = 0, None
    began = time.monotonic()
    try:
        for spans in batches:
            if exporter.export(spans) is not SpanExportResult.SUCCESS:
                failure = _reason(caught.messages, answers[-1:], timeout)
                break
            sent += len(spans)
    finally:
        exporter.shutdown()
        log.removeHandler(caught)
        log.propagate = propagate
    return Delivery(endpoint, total, sent, time.monotonic() - began, failure)


def _reason(messages: list[str], answers: list[str], timeout: float) -> str:
    """The failed batch's last HTTP answer, or the exporter's log lines about it, said shortly."""
    text = " ".join(messages)
    if answers and not answers[-1].startswith("2"):
        retried = " (retried until the timeout ran out)" if "timeout" in text else ""
        return f"it answered HTTP {answers[-1]}{retried}"
    if "Connection refused" in text:
        return "connection refused (is the collector running, and listening there?)"
    if "timeout" in text.lower():
        return f"no answer within {timeout:g} s"
    last = messages[-1] if messages else "no reason given"
    return last if len(last) <= 300 else last[:297] + "..."
