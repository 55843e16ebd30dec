"""Read a trace into the UI from a thread: a big file progressively, a growing file forever.

As toolong's watcher does, the thread owns the file and posts messages; the UI
never blocks on I/O or parsing. Bytes go through tracer.trace.reader.TraceBuilder,
which holds back an incomplete last line, so a torn line at the end of a file
that a server is still writing is simply not parsed yet.

Backpressure: after posting a snapshot the thread waits for the UI's `ack()`
before posting another. If the UI is behind, the thread keeps reading but
posts less often (the interval doubles up to MAX_INTERVAL), and snapshot
messages replace one another in the queue.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path

from textual.message import Message
from textual.message_pump import MessagePump

from tracer.trace.reader import Torn, TraceBuilder, TraceError, load
from tui.data import TraceModel

FIRST_CHUNK = 1 << 20  # small, so the first frame with data comes quickly
CHUNK = 8 << 20
MAX_INTERVAL = 5.0


class FeedMessage(Message):
    def __init__(self, feed: TraceFeed) -> None:
        super().__init__()
        self.feed = feed

    def can_replace(self, message: Message) -> bool:
        # Textual drops this message when the next queued one may replace it.
        return type(message) is type(self) and message.feed is self.feed  # type: ignore[attr-defined]


class Snapshot(FeedMessage):
    """The trace as read so far, with its flags: ready to show."""

    def __init__(self, feed: TraceFeed, model: TraceModel, *, done: bool) -> None:
        super().__init__(feed)
        self.model = model
        self.done = done


class Progress(FeedMessage):
    def __init__(self, feed: TraceFeed, read: int, total: int) -> None:
        super().__init__(feed)
        self.read = read
        self.total = total


class Waiting(FeedMessage):
    """Following a file that has no header yet, or does not exist yet."""

    def __init__(self, feed: TraceFeed, text: str) -> None:
        super().__init__(feed)
        self.text = text


class Failed(FeedMessage):
    def __init__(self, feed: TraceFeed, error: str) -> None:
        super().__init__(feed)
        self.error = error

    def can_replace(self, message: Message) -> bool:
        return False


def _compressed(path: Path) -> bool:
    if path.suffix in (".gz", ".zst"):
        return True
    try:
        with path.open("rb") as f:
            return f.read(2) == b"\x1f\x8b"
    except OSError:
        return False  # the reader says why, in its own words


class TraceFeed(threading.Thread):
    def __init__(
        self,
        target: MessagePump,
        path: str | Path,
        *,
        follow: bool = False,
        strict: bool = True,
        poll: float = 0.2,
        current_path: Callable[[], Path] | None = None,
    ) -> None:
        super().__init__(name=f"schedscope-feed:{path}", daemon=True)
        self.target = target
        self.path = Path(path)
        # --attach: the mirror's file for the current run; a new run moves the feed to its file.
        self.current_path = current_path
        self.follow = follow
        self.strict = strict
        self.poll = poll
        self.base_interval = poll if follow else 1.0
        self.interval = self.base_interval
        self.posted_steps = 0
        self.snapshots = 0
        self._acked = threading.Event()
        self._acked.set()
        self._stop = threading.Event()
        self._last_post = 0.0

    # -- called from the UI thread --------------------------------------------------------
    def ack(self) -> None:
        """The UI has applied the last snapshot: the next one may be posted."""
        self._acked.set()

    def stop(self) -> None:
        self._stop.set()

    # -- the thread ----------------------------------------------------------------------
    def _post(self, message: Message) -> None:
        self.target.post_message(message)

    def run(self) -> None:
        try:
            if self.follow:
                self._tail()
            elif _compressed(self.path):
                self._load_whole()
            else:
                self._load_progressively()
        except TraceError as exc:
            self._post(Failed(self, str(exc)))
        except OSError as exc:
            self._post(Failed(self, f"{self.path}: cannot read: {exc.strerror or exc}"))

    def _load_whole(self) -> None:
        """Compressed files: tracer.trace.reader decompresses and parses them in one go."""
        trace = load(self.path, strict=self.strict, progress=lambda d, t: self._post(Progress(self, d, t)))
        self._post(Snapshot(self, TraceModel.build(trace), done=True))

    def _snapshot(self, builder: TraceBuilder, *, done: bool, torn: Torn | None = None) -> None:
        self._acked.clear()
        model = TraceModel.build(builder.build(torn))
        self.posted_steps = len(model)
        self.snapshots += 1
        self._last_post = time.monotonic()
        self._post(Snapshot(self, model, done=done))

    def _due(self, steps: int) -> bool:
        """Whether a new snapshot is worth posting now; backs off while the UI is behind."""
        if self.snapshots and steps == self.posted_steps:
            return False
        if not self._acked.is_set():
            self.interval = min(MAX_INTERVAL, self.interval * 2)
            return False
        if self.snapshots == 0 or steps >= 2 * self.posted_steps:
            return True
        if not self.follow:
            # Loading: each snapshot re-runs the detectors over every step so far, so only
            # doublings are posted; all of them together cost about one more final build.
            return False
        if time.monotonic() - self._last_post >= self.interval:
            self.interval = max(self.base_interval, self.interval / 2)  # the UI keeps up again
            return True
        return False

    def _load_progressively(self) -> None:
        try:
            f = self.path.open("rb")
        except FileNotFoundError:
            raise TraceError(self.path, "no such file") from None
        except IsADirectoryError:
            raise TraceError(self.path, "is a directory, not a trace file") from None
        builder = TraceBuilder(self.path, strict=self.strict)
        with f:
            total = self.path.stat().st_size
            read = steps = 0
            size = FIRST_CHUNK
            while not self._stop.is_set():
                chunk = f.read(size)
                if not chunk:
                    break
                read += len(chunk)
                size = CHUNK
                steps += builder.feed(chunk)
                self._post(Progress(self, read, total))
                if builder.header is not None and read < total and self._due(steps):
                    self._snapshot(builder, done=False)
        torn = builder.finish()
        if builder.header is None:
            what = "empty file" if read == 0 else (torn.describe() if torn else "no records")
            raise TraceError(self.path, f"no complete header record ({what})")
        self._acked.wait(timeout=MAX_INTERVAL)  # let the UI catch up before the final, largest build
        self._snapshot(builder, done=True, torn=torn)

    def _tail(self) -> None:
        waiting_said = ""

        def wait(text: str) -> None:
            nonlocal waiting_said
            if text != waiting_said:
                waiting_said = text
                self._post(Waiting(self, text))
            self._stop.wait(self.poll)

        while not self._stop.is_set():
            if self.current_path is not None:
                self.path = self.current_path()
            if not self.path.exists():
                wait(f"waiting for {self.path} to appear")
                continue
            if _compressed(self.path):
                raise TraceError(
                    self.path, "--follow reads a plain .jsonl file as it grows; this one is compressed"
                )
            self._follow_file(wait)

    def _follow_file(self, wait: Callable[[str], None]) -> None:
        builder = TraceBuilder(self.path, strict=self.strict)
        self.posted_steps = self.snapshots = 0
        pos = steps = 0
        with self.path.open("rb") as f:
            while not self._stop.is_set():
                try:
                    size = self.path.stat().st_size
                except FileNotFoundError:
                    return
                if size < pos:  # truncated or replaced: a new run; read it from the start
                    return
                if self.current_path is not None and self.current_path() != self.path:
                    return  # the stream began a new run in a new file: follow that one
                chunk = f.read(CHUNK) if size > pos else b""
                pos += len(chunk)
                steps += builder.feed(chunk) if chunk else 0
                if builder.header is None:
                    wait(f"waiting for the header record of {self.path}")
                    continue
                if self._due(steps):
                    self._snapshot(builder, done=False)
                if not chunk:
                    self._stop.wait(self.poll)
