"""Viewer side of the live stream: follow a server's /trace, reconnecting as needed.

On disconnect it reconnects with exponential backoff and resumes after the last
step seen (`?since=`). Anything that could not be resumed (it left the
server's backlog, or the viewer was cut off for falling behind) arrives as an
explicit `gap` record, so a gap is always shown, never silently skipped.
"""

from __future__ import annotations

import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlencode, urlparse, urlunparse

import orjson

MAX_LINE = 16 << 20  # a record longer than this is garbage, not a trace record


@dataclass
class StreamEvent:
    """A record from the stream (`record`), or a note about the connection (`status`)."""

    kind: str  # "record" | "status"
    record: dict[str, Any] | None = None
    line: bytes = b""
    message: str = ""


def _with_since(url: str, since: int) -> str:
    parts = urlparse(url)
    path = parts.path if parts.path not in ("", "/") else "/trace"
    return urlunparse(parts._replace(path=path, query=urlencode({"since": since})))


class StreamFollower:
    def __init__(
        self,
        url: str,
        *,
        token: str | None = None,
        backoff: tuple[float, float] = (0.2, 5.0),
        timeout: float = 10.0,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.url = url
        self.token = token
        self.backoff = backoff
        self.timeout = timeout
        self.sleep = sleep
        self.last_step = 0
        self.header: dict[str, Any] | None = None
        self.reconnects = 0
        self.garbage = 0

    def events(self, *, max_reconnects: int | None = None) -> Iterator[StreamEvent]:
        delay = self.backoff[0]
        first = True
        while True:
            if not first:
                if max_reconnects is not None and self.reconnects >= max_reconnects:
                    return
                self.reconnects += 1
                yield StreamEvent(
                    "status", message=f"reconnecting in {delay:.1f}s after step {self.last_step}"
                )
                self.sleep(delay)
                delay = min(delay * 2, self.backoff[1])
            first = False
            request = urllib.request.Request(_with_since(self.url, self.last_step))
            if self.token:
                request.add_header("Authorization", f"Bearer {self.token}")
            try:
                with urllib.request.urlopen(request, timeout=self.timeout) as response:
                    yield StreamEvent("status", message=f"connected to {self.url}")
                    delay = self.backoff[0]
                    yield from self._read(response)
                yield StreamEvent("status", message="the server closed the stream")
            except urllib.error.HTTPError as exc:
                if exc.code in (401, 403, 404):
                    yield StreamEvent("status", message=f"refused: HTTP {exc.code} {exc.reason}")
                    return
                yield StreamEvent("status", message=f"HTTP {exc.code} {exc.reason}")
            except (OSError, urllib.error.URLError) as exc:
                yield StreamEvent("status", message=f"disconnected: {exc}")

    def _read(self, response: Any) -> Iterator[StreamEvent]:
        while True:
            line = response.readline(MAX_LINE + 1)
            if not line:
                return
            if not line.endswith(b"\n"):
                if len(line) > MAX_LINE:
                    self.garbage += 1
                    yield StreamEvent("status", message="dropped a line longer than 16 MiB")
                    response.readline()  # skip its remainder (best effort)
                    continue
                return  # stopped mid-line: reconnect and resume after the last whole step
            try:
                record = orjson.loads(line)
            except orjson.JSONDecodeError:
                self.garbage += 1
                yield StreamEvent("status", message=f"skipped a line that is not JSON ({line[:40]!r}…)")
                continue
            if not isinstance(record, dict) or "kind" not in record:
                self.garbage += 1
                continue
            kind = record["kind"]
            if kind == "header":
                if self.header is not None and self.header.get("pid") != record.get("pid"):
                    yield StreamEvent("status", message="the server restarted: a new run begins")
                    self.last_step = 0
                self.header = record
            elif kind == "gap" and isinstance(record.get("before"), int):
                self.last_step = max(self.last_step, record["before"] - 1)  # already reported
            elif kind == "step" and isinstance(record.get("step"), int):
                if self.last_step and record["step"] > self.last_step + 1:
                    gap = {
                        "kind": "gap",
                        "after": self.last_step,
                        "before": record["step"],
                        "reason": "not received",
                    }
                    yield StreamEvent("record", gap, orjson.dumps(gap, option=orjson.OPT_APPEND_NEWLINE))
                self.last_step = max(self.last_step, record["step"])
            yield StreamEvent("record", record, line)


def step_line(record: dict[str, Any]) -> str:
    """One compact line per step for `schedscope attach`."""
    if record.get("kind") == "gap":
        return f"-- gap: steps {record['after'] + 1}..{record['before'] - 1} missing ({record.get('reason')})"
    t, i = record["target"], record["input"]
    n = len(record.get("new", ())), len(record.get("resumed", ())), len(record.get("running", ()))
    query = record.get("query") or {}
    q = f" query {query.get('rows')}/{query.get('cap')}" if query else ""
    return (
        f"step {record['step']:>7}  target {t['used']:>5}/{t['cap']:<5} "
        f"input {i['used']:>5}(+{i.get('reserved', 0)})"
        f"/{i['cap']:<5}{q}  new {n[0]} res {n[1]} run {n[2]}  pre {len(record.get('preempted', ()))} "
        f"fin {len(record.get('finished', ()))}  wait {record.get('num_waiting', 0)}"
    )


class StreamMirror:
    """Mirror a live stream into a local trace file, in a daemon thread.

    The TUI and the web app follow that file exactly as they follow a file a
    server writes (`--follow`), so attaching reuses their tailing, and the file
    is a normal trace afterwards (`gap` records included, which the reader
    keeps in `Trace.gaps`).
    """

    def __init__(self, url: str, path: str | Path, *, token: str | None = None) -> None:
        self.path = Path(path)
        self.path.write_bytes(b"")
        self.follower = StreamFollower(url, token=token)
        self.status = "connecting"
        self.gaps = 0
        self._thread = threading.Thread(target=self._run, name="schedscope-attach", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        with self.path.open("ab") as out:
            for event in self.follower.events():
                if event.kind == "status":
                    self.status = event.message
                    continue
                if (event.record or {}).get("kind") == "gap":
                    self.gaps += 1
                out.write(event.line)
                out.flush()
