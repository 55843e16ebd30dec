"""Follow a growing trace file (`schedscope web --follow FILE`).

A daemon thread tails the file and feeds new bytes to tracer's TraceBuilder (the
reader's own parser), then publishes a fresh TraceView with a bumped version.
The browser polls and receives only the new steps as a Patch. Each snapshot
replaces the previous one (the newest wins, as toolong's messages do), and the
thread backs off when building a snapshot gets expensive, so a huge or fast file
never stalls the app. A file that shrinks was rewritten: it is read again from
the start. Only plain (uncompressed) files can be followed.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path

from tracer.trace.reader import Trace, TraceBuilder, TraceError

CHUNK = 8 << 20


class FileFollower:
    def __init__(
        self,
        path: str | Path,
        publish: Callable[[Trace, int], None],
        *,
        interval: float = 0.25,
        current_path: Callable[[], Path] | None = None,
    ) -> None:
        self.path = Path(path)
        self.publish = publish
        self.interval = interval
        # --attach: the mirror's file for the current run; a new run moves the follower to its file.
        self.current_path = current_path
        self.version = 0
        self.status = f"waiting for {self.path}"
        self._builder = TraceBuilder(self.path, strict=False)
        self._offset = 0
        self._bad: tuple[int, int] | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="schedscope-follow", daemon=True)

    def start(self) -> FileFollower:
        if self.path.suffix in (".gz", ".zst"):
            raise ValueError(f"{self.path}: only a plain .jsonl file can be followed while it grows")
        self._thread.start()
        return self

    def stop(self, timeout: float = 2.0) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout)

    def poll(self) -> bool:
        """Read what was appended since the last poll; publish a snapshot if anything changed."""
        if self.current_path is not None and self.current_path() != self.path:
            self.path = self.current_path()  # a new run, in its own file: read it from the start
            self._builder = TraceBuilder(self.path, strict=False)
            self._offset = 0
            self._bad = None
        try:
            st = self.path.stat()
        except FileNotFoundError:
            self.status = f"waiting for {self.path}"
            return False
        size = st.st_size
        if self._bad == (size, st.st_mtime_ns):
            return False  # still the file we could not read
        if size < self._offset:  # truncated or replaced: start over
            self._builder = TraceBuilder(self.path, strict=False)
            self._offset = 0
        if size == self._offset:
            return False
        had_header = self._builder.header is not None
        added = 0
        with self.path.open("rb") as f:
            f.seek(self._offset)
            while self._offset < size:  # catch up in chunks, then publish once
                chunk = f.read(min(CHUNK, size - self._offset))
                if not chunk:
                    break
                self._offset += len(chunk)
                try:
                    added += self._builder.feed(chunk)
                except TraceError as exc:  # a bad header: nothing to read until the file changes
                    self.status = f"cannot follow: {exc}"
                    self._builder = TraceBuilder(self.path, strict=False)
                    self._offset = 0
                    self._bad = (size, st.st_mtime_ns)
                    return False
        if self._builder.header is None or (not added and had_header):
            return False
        trace = self._builder.build()
        self.version += 1
        self.publish(trace, self.version)
        self.status = f"following {self.path.name}: {len(trace)} steps"
        return True

    def _run(self) -> None:
        delay = self.interval
        while not self._stop.is_set():
            started = time.monotonic()
            self.poll()
            cost = time.monotonic() - started
            # Back off when a snapshot gets expensive: never spend more than a third of the time building.
            delay = max(self.interval, 2 * cost)
            self._stop.wait(delay)
