"""Viewer side of the live stream: follow a server's /trace, reconnecting as needed.

On disconnect it reconnects with exponential backoff and resumes where it left
off (`?since=`). Anything that could not be resumed (it left the server's
backlog, or the viewer was cut off for falling behind) arrives as an explicit
`gap` record, so a gap is always shown, never silently skipped.

The server re-sends the header on every connection. The follower passes a
header on only when it begins a run (a new `start_time` or `pid`), as a `run`
event, so whoever saves the stream (RunSaver) writes one header per file and
starts a new file for a new run. Heartbeats, which the server sends while the
engine is idle, are liveness only: they are never saved, and a connection is
given up as stalled only when not even a heartbeat arrived within the read
timeout.
"""

from __future__ import annotations

import contextlib
import socket
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import IO, Any, Literal
from urllib.parse import urlencode, urlparse, urlunparse

import orjson

from tracer.trace.recording_index import INTERVAL_S, RecordingIndex, recording_index
from tracer.trace.schema import HEARTBEAT_INTERVAL

MAX_LINE = 16 << 20  # a record longer than this is garbage, not a trace record
# No bytes at all (heartbeats included) for this long: the connection is stalled.
READ_TIMEOUT = 4 * HEARTBEAT_INTERVAL

Phase = Literal["connecting", "live", "idle", "stalled", "reconnecting", "refused", "unauthorised", "gave up"]
EventKind = Literal["record", "run", "heartbeat", "status"]

# What a link met where no error text says it (tracer.render.stream words it): the server
# ended the response, or not even a heartbeat came within the read timeout.
CLOSED, STALLED = "closed", "stalled"
# The notes a follower hands on as `status` events, with their numbers in `facts`
# (tracer.render.stream.status_line words them).
GIVING_UP = "giving up"  # the reconnect limit was reached
RETRYING = "retrying"  # facts: delay (seconds before the next try)
CONNECTED = "connected"
DROPPED = "dropped"  # the connection ended (the link's cause or error text says how)
UNAUTHORISED = "unauthorised"
REFUSED = "refused"
STALL = "stall"
DISCONNECTED = "disconnected"  # facts: error (the exception, as text)
LONG_LINE = "long line"
NOT_JSON = "not json"  # facts: head (the line's first 40 bytes)
RESTARTED = "restarted"  # facts: pid, start (the new run's header's)
IDLE = "idle"


@dataclass(frozen=True)
class LinkState:
    """Where a follower's connection stands; tracer.render.stream.link_status words it as the
    one line shown."""

    url: str
    phase: Phase = "connecting"
    detail: str = ""  # the error met: the HTTP status, the socket's reason
    last_step: int = 0
    idle_since: float | None = None  # wall time of the server's last record, from its heartbeat
    run: int = 0  # runs seen on this stream: 2 once the server restarted
    reconnects: int = 0
    cause: str = ""  # CLOSED or STALLED where no error text says it
    timeout: float = 0.0  # the read timeout a STALLED link waited


@dataclass
class StreamEvent:
    """What the follower hands on.

    - `record`: a record to show and save (step, runner, footer, gap, any newer kind);
    - `run`: the header of a run that begins (`run` counts them: 2 after a restart);
    - `heartbeat`: the server is alive and idle; never saved;
    - `status`: a note about the connection (`note`, one of the names above, and its
      `facts`), with the state it left.
    """

    kind: EventKind
    record: dict[str, Any] | None = None
    line: bytes = b""
    note: str = ""
    state: LinkState | None = None
    run: int = 0
    facts: dict[str, Any] = field(default_factory=dict)


def _with_since(url: str, since: int) -> str:
    parts = urlparse(url)
    path = parts.path if parts.path not in ("", "/") else "/trace"
    return urlunparse(parts._replace(path=path, query=urlencode({"since": since})))


def _timed_out(exc: BaseException) -> bool:
    # urlopen wraps a connect timeout in URLError; a read timeout comes bare.
    return isinstance(exc, TimeoutError) or isinstance(getattr(exc, "reason", None), TimeoutError)


def _run_id(header: dict[str, Any]) -> tuple[Any, Any]:
    return header.get("start_time"), header.get("pid")


class StreamFollower:
    def __init__(
        self,
        url: str,
        *,
        token: str | None = None,
        backoff: tuple[float, float] = (0.2, 5.0),
        timeout: float = READ_TIMEOUT,
        sleep: Callable[[float], Any] = time.sleep,
    ) -> None:
        self.url = url
        self.token = token
        self.backoff = backoff
        self.timeout = timeout
        self.sleep = sleep
        self.last_step = 0  # the newest step record received in this run
        self.header: dict[str, Any] | None = None
        self.runs = 0
        self.reconnects = 0
        self.garbage = 0
        self.duplicates = 0  # records the server sent again after a reconnect, not passed on
        self.state = LinkState(url)
        # Resuming: the server resends everything after `since`. We ask from the step
        # before the newest (as the server numbers records: runner and footer lines
        # by their step), and skip the records of that step we already have, so a
        # disconnect between a step and its runner records loses neither.
        self._ring_step = 0  # the server's numbering of the newest record received
        self._at_ring_step = 0  # records received so far numbered _ring_step
        self._skip = 0  # records numbered _ring_step the server is about to resend
        self._from_start = False  # a run begun while attached: steps before its first are a gap
        self._idle_said: float | Literal[False] | None = False  # idle_since of the last idle note

    _response: Any = None  # the connection being read, for interrupt()

    def interrupt(self) -> None:
        """From another thread: end the connection being read now (its read returns at once),
        rather than at the next record or the read timeout."""
        response = self._response
        if response is None:
            return
        # A duplicate of the socket's fd: shutting it down ends the connection itself, and
        # closing the duplicate leaves the reader's own fd to the reader.
        with (
            contextlib.suppress(OSError, ValueError),
            socket.fromfd(response.fileno(), socket.AF_INET, socket.SOCK_STREAM) as dup,
        ):
            dup.shutdown(socket.SHUT_RDWR)

    def _set(self, **changes: Any) -> LinkState:
        self.state = replace(self.state, **changes)
        return self.state

    def _status(self, note: str, facts: dict[str, Any] | None = None, **changes: Any) -> StreamEvent:
        return StreamEvent("status", note=note, state=self._set(**changes), facts=facts or {})

    def events(self, *, max_reconnects: int | None = None) -> Iterator[StreamEvent]:
        delay = self.backoff[0]
        first, resync = True, False
        while True:
            if not first and not resync:
                if max_reconnects is not None and self.reconnects >= max_reconnects:
                    yield self._status(GIVING_UP, phase="gave up", detail="limit", cause="")
                    return
                self.reconnects += 1
                self._set(reconnects=self.reconnects)
                yield StreamEvent("status", note=RETRYING, state=self.state, facts={"delay": delay})
                self.sleep(delay)
                delay = min(delay * 2, self.backoff[1])
            first = resync = False
            resume = max(self.last_step, self._ring_step)
            since = max(0, resume - 1)
            self._skip = self._at_ring_step if resume and resume == self._ring_step else 0
            request = urllib.request.Request(_with_since(self.url, since))
            if self.token:
                request.add_header("Authorization", f"Bearer {self.token}")
            try:
                with urllib.request.urlopen(request, timeout=self.timeout) as response:
                    self._response = response
                    yield self._status(CONNECTED, phase="live", detail="", cause="")
                    delay = self.backoff[0]
                    try:
                        resync = yield from self._read(response, since)
                    finally:
                        self._response = None
                if not resync:
                    yield self._status(DROPPED, phase="reconnecting", detail="", cause=CLOSED)
            except urllib.error.HTTPError as exc:
                detail = f"HTTP {exc.code} {exc.reason}"
                if exc.code in (401, 403):  # a missing or wrong token: retrying cannot help
                    yield self._status(UNAUTHORISED, phase="unauthorised", detail=detail, cause="")
                    return
                if exc.code == 404:
                    yield self._status(REFUSED, phase="refused", detail=detail, cause="")
                    return
                yield self._status(DROPPED, phase="reconnecting", detail=detail, cause="")
            except (OSError, urllib.error.URLError) as exc:
                if _timed_out(exc):
                    yield self._status(STALL, phase="stalled", detail="", cause=STALLED, timeout=self.timeout)
                else:
                    reason = str(getattr(exc, "reason", exc))
                    facts = {"error": str(exc)}
                    yield self._status(DISCONNECTED, facts, phase="reconnecting", detail=reason, cause="")

    def _read(self, response: Any, since: int) -> Iterator[StreamEvent]:
        """Events from one connection; returns True when it must be reopened from step 0."""
        while True:
            line = response.readline(MAX_LINE + 1)
            if not line:
                return False
            if not line.endswith(b"\n"):
                if len(line) > MAX_LINE:
                    self.garbage += 1
                    yield StreamEvent("status", note=LONG_LINE, state=self.state)
                    response.readline()  # skip its remainder (best effort)
                    continue
                return False  # stopped mid-line: reconnect and resume after the last whole record
            try:
                record = orjson.loads(line)
            except orjson.JSONDecodeError:
                self.garbage += 1
                yield StreamEvent("status", note=NOT_JSON, state=self.state, facts={"head": line[:40]})
                continue
            if not isinstance(record, dict) or "kind" not in record:
                self.garbage += 1
                continue
            kind = record["kind"]
            if kind == "heartbeat":
                yield from self._heartbeat(record, line)
                continue
            if self.state.phase != "live":
                self._set(phase="live", detail="", cause="")
            if kind == "header":
                if self.header is not None and _run_id(record) == _run_id(self.header):
                    continue  # the same run's header, sent again on this connection
                restarted = self.header is not None
                self._begin_run(record)
                if restarted:
                    facts = {"pid": record.get("pid"), "start": record.get("start_time")}
                    yield self._status(RESTARTED, facts)
                yield StreamEvent("run", record, line, state=self.state, run=self.runs)
                if restarted and since:
                    return True  # what follows was chosen by the old run's `since`: ask again from 0
                continue
            if kind == "gap" and isinstance(record.get("before"), int):
                # The server's own gap (the resume point left its backlog), from `since`,
                # one step before what we hold: trim it to what is really missing.
                self._skip = 0
                after, before = max(int(record.get("after") or 0), self.last_step), record["before"]
                if before <= after + 1:
                    continue
                self.last_step = max(self.last_step, before - 1)  # reported here, not again
                self._set(last_step=self.last_step)
                self._advance(before - 1)
                gap = {**record, "after": after}
                yield StreamEvent("record", gap, orjson.dumps(gap, option=orjson.OPT_APPEND_NEWLINE))
                continue
            # As the server's hub rings it: by its step, a record without one by the last step.
            ring_step = record.get("step")
            if type(ring_step) is not int or ring_step <= 0:
                ring_step = self._ring_step
            if self._skip and ring_step == self._ring_step:
                self._skip -= 1
                self.duplicates += 1
                continue  # received before the reconnect
            self._skip = 0
            if kind == "step" and isinstance(record.get("step"), int):
                step = record["step"]
                if step <= self.last_step:
                    self.duplicates += 1
                    continue  # a step is recorded once; never save it twice
                if (self.last_step or self._from_start) and step > self.last_step + 1:
                    reason = "not received" if self.last_step else "before the viewer saw this run"
                    gap = {"kind": "gap", "after": self.last_step, "before": step, "reason": reason}
                    yield StreamEvent("record", gap, orjson.dumps(gap, option=orjson.OPT_APPEND_NEWLINE))
                self.last_step = step
                self._set(last_step=step)
            self._advance(ring_step)
            self._at_ring_step += 1
            yield StreamEvent("record", record, line, state=self.state)

    def _advance(self, ring_step: int) -> None:
        if ring_step > self._ring_step:
            self._ring_step, self._at_ring_step = ring_step, 0

    def _begin_run(self, header: dict[str, Any]) -> None:
        if self.header is not None:  # a restart: the new run counts its steps from 1
            self._from_start = True
            self.last_step = self._ring_step = self._at_ring_step = self._skip = 0
            self._idle_said = False
        self.header = header
        self.runs += 1
        self._set(run=self.runs, last_step=self.last_step, idle_since=None)

    def _heartbeat(self, record: dict[str, Any], line: bytes) -> Iterator[StreamEvent]:
        idle_since = record.get("idle_since")
        idle_since = float(idle_since) if isinstance(idle_since, (int, float)) else None
        last = record.get("last_step")
        last_step = last if isinstance(last, int) and last > self.last_step else self.last_step
        state = self._set(phase="idle", detail="", cause="", idle_since=idle_since, last_step=last_step)
        if idle_since != self._idle_said:  # once per idle period, not per heartbeat
            self._idle_said = idle_since
            yield StreamEvent("status", note=IDLE, state=state)
        yield StreamEvent("heartbeat", record, line, state=state)


def run_path(base: Path, run: int) -> Path:
    """Where run `run` (0-based) of a stream saved as `base` goes: copy.jsonl, copy.1.jsonl, …"""
    if run == 0:
        return base
    name = base.name
    stem, suffix = (name[:-6], ".jsonl") if name.endswith(".jsonl") else (base.stem, base.suffix)
    return base.with_name(f"{stem}.{run}{suffix}")


class RunSaver:
    """Writes a followed stream as trace files, one run per file, one header per run.

    The first file is truncated at once, so a stale copy from an earlier session is
    never mistaken for this one. Records that come before any header (none from
    schedscope's server) cannot start a trace and are only counted.

    Each file gets its recording index as it is written (tracer.trace.recording_index), as the recorder's
    own file does, so the copy's first open maps it instead of parsing it; a copy with a
    gap is parsed from the gap on. `index_interval`: seconds between the index's segments
    (None: no index).
    """

    def __init__(self, path: str | Path, *, index_interval: float | None = INTERVAL_S) -> None:
        self.base = Path(path)
        self.paths: list[Path] = []  # one per run begun
        self.unsaved = 0
        self.index_interval = index_interval
        self._out: IO[bytes] | None = self.base.open("wb")
        self._index: RecordingIndex | None = None
        self._written = 0  # bytes of the current file

    @property
    def path(self) -> Path:
        """The file being written (the first one until a run begins)."""
        return self.paths[-1] if self.paths else self.base

    def start_run(self, header_line: bytes, header: dict[str, Any] | None = None) -> Path:
        """Begin a run: its header opens a new file (the first run uses the file opened already)."""
        path = run_path(self.base, len(self.paths))
        if self.paths or self._out is None:
            self.close()
            self._out = path.open("wb")
        self.paths.append(path)
        self._written = 0
        if self.index_interval is not None:
            self._index = recording_index(path, interval_s=self.index_interval)
        self._write(header_line, header)
        return path

    def write(self, line: bytes, record: dict[str, Any] | None = None) -> None:
        if not self.paths:
            self.unsaved += 1
            return
        self._write(line, record)

    def _write(self, line: bytes, record: dict[str, Any] | None) -> None:
        assert self._out is not None
        self._out.write(line)
        self._out.flush()  # whole records on disk as they come: the copy can be read while it grows
        index, offset = self._index, self._written
        self._written += len(line)
        if index is None or index.failed is not None:
            return
        try:  # an accelerator: never the copy's failure
            if record is None:
                record = orjson.loads(line)
            index.add(str(record.get("kind")), record, line, offset)
            if index.due():
                index.checkpoint()
        except Exception as exc:
            index.stop(f"{type(exc).__name__}: {exc}")

    def close(self) -> None:
        if self._out is not None:
            self._out.close()
            self._out = None
        if self._index is not None:
            index, self._index = self._index, None
            try:
                index.close()  # the last segment, the file closed
            except Exception as exc:
                index.stop(f"{type(exc).__name__}: {exc}")

    def handle(self, event: StreamEvent) -> Path | None:
        """Save what an event carries; returns the new file when a run begins."""
        if event.kind == "run":
            return self.start_run(event.line, event.record)
        if event.kind == "record":
            self.write(event.line, event.record)
        return None
