"""One trace source for every viewer: a complete file, a growing file, or a live stream.

As toolong's watcher does, a source owns its input on its own thread and reports
through callbacks; the viewer never blocks on I/O or parsing:

- `on_update(trace, version)`: a new snapshot (`TraceBuilder.build()`), version 1, 2, …;
- `on_state(state)`: a new `SourceState` (what to show in a status line);
- `on_error(error)`: a `TraceError` (a strict parse error, a missing file, a bad header);
- `on_progress(done, total)`: bytes of a complete file read so far.

Every callback runs on the source's thread (a view adapter posts it on to its UI),
one at a time. A snapshot copies the columns, and a viewer then analyses all of
it, so snapshots are rate-limited: at most one per `interval`, and never more
often than twice what the last one cost (its build plus `on_update`). A complete
file is read progressively (the first snapshot after its first MiB, then each
time the steps double), so a viewer shows a multi-GB trace within a second; the
state turns `complete` just before its last snapshot. A viewer can `hold()` a complete
file's reading for a moment (between chunks) and `release()` it.

Bytes go through one `tracer.trace.builder.TraceBuilder`, which holds back an
incomplete last line: a torn line at the end of a growing file is read once it
is whole. Files are plain, gzip or zstd, told apart by their magic bytes (tracer.trace.codec).
A stream is read with `tracer.trace.attach.StreamFollower`; with `save=FILE` it
is also written to FILE (`RunSaver`: one header per file, a new run to
FILE.1.jsonl), and its snapshots then name that file.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from enum import Enum
from pathlib import Path
from typing import IO, Any, NamedTuple

from tracer.trace.attach import READ_TIMEOUT, LinkState, RunSaver, StreamFollower
from tracer.trace.builder import TraceBuilder
from tracer.trace.codec import Decoder
from tracer.trace.errors import TraceError, TraceHeaderError
from tracer.trace.reader import open_builder, reopen
from tracer.trace.sidecar_restore import save_sidecar
from tracer.trace.trace_type import Torn, Trace

FIRST_CHUNK = 1 << 20  # small, so the first snapshot of a big file comes quickly
CHUNK = 8 << 20
MAX_INTERVAL = 5.0  # the slowest a source ever gets between snapshots
GAP_HOLD = 5.0  # seconds a stream's gap stays the shown state, so a viewer sees it


def _builder(path: str | Path, strict: bool, *, plain: bool = False) -> TraceBuilder:
    """The one place a source makes its builder: a plain file's steps are read back from
    the file (the builder holds only columns); decompressed or streamed bytes are kept."""
    return open_builder(path, strict=strict, kind="plain") if plain else TraceBuilder(path, strict=strict)


class Mode(str, Enum):
    FILE = "file"  # a complete file, read once
    FOLLOW = "follow"  # a file that grows (a server writes it)
    STREAM = "stream"  # a live server's /trace


class Phase(str, Enum):
    """Where a source stands: one set of names for the TUI and the web app."""

    # a live stream
    CONNECTING = "connecting"  # connecting, or reconnecting after a disconnect
    LIVE = "live"
    IDLE = "idle"  # connected; the engine has no work (the server sends heartbeats)
    STALLED = "stalled"  # not even a heartbeat within the read timeout: reconnecting
    GAP = "gap"  # steps were lost (they left the server's backlog); held for GAP_HOLD
    REFUSED = "refused"  # HTTP 404: not a stream endpoint
    UNAUTHORISED = "unauthorised"  # HTTP 401/403: a missing or wrong token
    ENDED = "ended"  # the run wrote its footer and the server went away, or the source gave up
    # a file
    WAITING = "waiting"  # a followed file that does not exist yet, or has no header yet
    LOADING = "loading"
    FOLLOWING = "following"
    COMPLETE = "complete"
    # either
    FAILED = "failed"  # on_error was called; `detail` says why


class Waiting(str, Enum):
    """What a WAITING source waits for (SourceState.waiting); tracer.render.source words it."""

    FILE = "file"  # a followed file that does not exist yet
    HEADER = "header"  # its header record


FILE, HEADER = Waiting.FILE, Waiting.HEADER


class Gap(NamedTuple):
    """A stream's missing steps, as its gap record gives them; tracer.render.source words them."""

    first: int  # the first and last step missing
    last: int
    reason: str | None  # the gap record's own reason (None: it gives none)


PROBLEMS = frozenset({Phase.STALLED, Phase.GAP, Phase.REFUSED, Phase.UNAUTHORISED, Phase.FAILED})


@dataclass(frozen=True)
class SourceState:
    """A source's state; tracer.render.source.source_line words it as the one line both viewers show."""

    mode: Mode
    phase: Phase
    target: str  # the file or URL
    detail: str = ""  # FAILED: the error
    waiting: Waiting | None = None  # WAITING: for the FILE to appear or for its HEADER record
    gap: Gap | None = None  # a stream's last gap
    steps: int = 0  # steps read so far (of the current run)
    done: int = 0  # LOADING: bytes read
    total: int = 0  # LOADING: bytes in the file
    link: LinkState | None = None  # a stream's connection, as its follower sees it
    saving: str | None = None  # a stream's --save file of the current run
    gaps: int = 0  # gap records received from the stream
    footer: bool = False  # a stream's current run wrote its footer (ENDED: how it ended)

    @property
    def problem(self) -> bool:
        return self.phase in PROBLEMS


Callback = Callable[..., Any] | None


class _Restart(Exception):
    """A followed file was truncated or replaced: read it again from the start."""


class TraceSource:
    """Reads one trace on its own thread and reports through callbacks (see the module)."""

    def __init__(
        self,
        mode: Mode,
        target: str | Path,
        *,
        strict: bool = True,
        token: str | None = None,
        save: str | Path | None = None,
        interval: float = 0.25,
        poll: float = 0.2,
        timeout: float = READ_TIMEOUT,
        backoff: tuple[float, float] = (0.2, 5.0),
    ) -> None:
        self.mode = mode
        self.target = str(target)
        self.strict = strict
        self.token = token
        self.save = Path(save) if save is not None else None
        self.interval = interval  # the shortest time between two snapshots
        self.poll = poll  # how often a followed file is looked at
        self.timeout = timeout
        self.backoff = backoff
        self.on_update: Callback = None
        self.on_state: Callback = None
        self.on_error: Callback = None
        self.on_progress: Callback = None
        self.version = 0
        self.trace: Trace | None = None  # the last snapshot
        self.follower: StreamFollower | None = None
        self.saver: RunSaver | None = None
        first = (
            Phase.CONNECTING if mode is Mode.STREAM else Phase.LOADING if mode is Mode.FILE else Phase.WAITING
        )
        self._state = SourceState(mode, first, self.target)
        self._said: SourceState | None = None
        self._stop = threading.Event()
        self._wake = threading.Event()  # the stream reader has news for the publisher
        self._lock = threading.Lock()  # the builder, between the stream reader and the publisher
        self._state_lock = threading.Lock()
        self._builder: TraceBuilder | None = None
        self._dirty = False  # the builder holds more than the last snapshot
        self._published_steps = 0
        self._last_post = 0.0
        self._wait = interval
        self._gap_at: float | None = None  # when the last gap record came
        self._footer = False  # the current run wrote its footer
        self._stream_error: TraceError | None = None  # from the stream reader, reported by the publisher
        self._held_until = 0.0  # a complete file's reading pauses until then (hold)
        self._unheld = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"schedscope-source:{target}", daemon=True)
        self._reader: threading.Thread | None = None  # a stream's reading thread
        self._loaded: Trace | None = None  # TraceSource.loaded's trace

    # -- making one ----------------------------------------------------------------------------
    @classmethod
    def file(cls, path: str | Path, *, strict: bool = True, **options: Any) -> TraceSource:
        """A complete trace file, read progressively."""
        return cls(Mode.FILE, path, strict=strict, **options)

    @classmethod
    def loaded(cls, trace: Trace, *, strict: bool = True, **options: Any) -> TraceSource:
        """A complete trace already read whole (an engine of a run a viewer opened): posted
        as it is, not read again, so what was worked out for it stays with it."""
        source = cls(Mode.FILE, trace.path, strict=strict, **options)
        source._loaded = trace
        return source

    @classmethod
    def follow(cls, path: str | Path, *, strict: bool = True, **options: Any) -> TraceSource:
        """A file a server is still writing: read as it grows, from the start again if rewritten."""
        return cls(Mode.FOLLOW, path, strict=strict, **options)

    @classmethod
    def stream(
        cls, url: str, *, token: str | None = None, save: str | Path | None = None, **options: Any
    ) -> TraceSource:
        """A live server's stream (SCHEDSCOPE_STREAM); `save`: also write it to this file."""
        return cls(Mode.STREAM, url, token=token, save=save, **options)

    @property
    def name(self) -> str:
        """A short name to show before anything is read."""
        return self.target if self.mode is Mode.STREAM else Path(self.target).name

    @property
    def state(self) -> SourceState:
        return self._state

    @property
    def live(self) -> bool:
        """Whether more can come after the first complete read (follow and stream)."""
        return self.mode is not Mode.FILE

    def bind(
        self,
        *,
        on_update: Callback = None,
        on_state: Callback = None,
        on_error: Callback = None,
        on_progress: Callback = None,
    ) -> TraceSource:
        """Set the callbacks (before start); the ones not given stay as they are."""
        for name, fn in (
            ("on_update", on_update),
            ("on_state", on_state),
            ("on_error", on_error),
            ("on_progress", on_progress),
        ):
            if fn is not None:
                setattr(self, name, fn)
        return self

    # -- control ---------------------------------------------------------------------------------
    def start(self) -> TraceSource:
        if self.mode is Mode.STREAM:
            self.follower = StreamFollower(
                self.target,
                token=self.token,
                timeout=self.timeout,
                backoff=self.backoff,
                sleep=self._stop.wait,
            )
            if self.save is not None:
                self.saver = RunSaver(
                    self.save
                )  # truncated at once: a stale copy is never taken for this one
                self._set(saving=str(self.saver.path))
        self._thread.start()
        return self

    def hold(self, seconds: float) -> None:
        """Pause reading a complete file for at most `seconds` from now (release() resumes it
        sooner): for a viewer that needs the CPU and the GIL for a moment, as the web app does
        while its page loads and draws a first figure. A followed file or a stream is not held:
        its viewer wants the newest steps."""
        if self.mode is Mode.FILE:
            self._held_until = max(self._held_until, time.monotonic() + seconds)

    def release(self) -> None:
        """End a hold now."""
        self._held_until = 0.0
        self._unheld.set()

    @property
    def held(self) -> bool:
        """Whether a hold is in force now."""
        return self._held_until > time.monotonic()

    def _wait_while_held(self) -> None:
        while (left := self._held_until - time.monotonic()) > 0 and not self._stop.is_set():
            self._unheld.wait(left)
            self._unheld.clear()

    def stop(self, timeout: float = 5.0) -> None:
        """Stop reading; a stream's connection is ended at once, silent or not."""
        self._stop.set()
        self._wake.set()
        self._unheld.set()
        if self.follower is not None:
            self.follower.interrupt()
        for thread in (self._thread, self._reader):
            if thread is not None and thread.is_alive() and threading.current_thread() is not thread:
                thread.join(timeout)

    def join(self, timeout: float | None = None) -> bool:
        """Wait for the thread to end by itself (a complete file read, a refused stream); True if it did."""
        self._thread.join(timeout)
        return not self._thread.is_alive()

    def close(self) -> None:
        """Stop, and let go of the --save file and the builder."""
        self.stop()
        with self._lock:
            if self.saver is not None:
                self.saver.close()
            self._builder = None

    @property
    def alive(self) -> bool:
        """Whether any of its threads (the publisher, a stream's reader) still runs."""
        return self._thread.is_alive() or (self._reader is not None and self._reader.is_alive())

    # -- reporting -------------------------------------------------------------------------------
    def _set(self, **changes: Any) -> SourceState:
        with self._state_lock:  # the stream reader and the publisher both change it
            self._state = replace(self._state, **changes)
            return self._state

    def _say_state(self, *, force: bool = False) -> None:
        """Report the state if it changed: a new phase at once, a new count with a snapshot."""
        state = self._state
        said = self._said
        if state == said:
            return
        if (
            not force
            and said is not None
            and (said.phase, said.detail, said.waiting, said.gap)
            == (state.phase, state.detail, state.waiting, state.gap)
        ):
            return  # only counts moved: they go out with the next snapshot
        self._said = state
        if self.on_state is not None:
            self.on_state(state)

    def _fail(self, error: TraceError) -> None:
        self._set(phase=Phase.FAILED, detail=str(error))
        self._say_state()
        if self.on_error is not None:
            self.on_error(error)

    def _due(self, steps: int) -> bool:
        """Whether a snapshot is worth making now (FILE: only when the steps doubled)."""
        if self.version and time.monotonic() - self._last_post < self._wait:
            return False
        if self.mode is Mode.FILE and self.version:
            # Each snapshot has the viewer re-analyse every step so far: doublings only,
            # which all together cost about one more final snapshot.
            return steps >= 2 * self._published_steps
        return True

    def _publish(self, torn: Torn | None = None) -> None:
        started = time.monotonic()
        with self._lock:
            builder = self._builder
            if builder is None or builder.header is None:
                return
            trace = builder.build(torn)
            self._dirty = False
        self._post(trace, started)

    def _post(self, trace: Trace, started: float | None = None) -> None:
        started = time.monotonic() if started is None else started
        self.version += 1
        self.trace = trace
        self._published_steps = len(trace)
        self._set(steps=len(trace))
        self._say_state(force=True)
        if self.on_update is not None:
            self.on_update(trace, self.version)
        cost = time.monotonic() - started
        self._last_post = time.monotonic()
        # Never spend more than about a third of the time on snapshots.
        self._wait = min(MAX_INTERVAL, max(self.interval, 2 * cost))

    # -- the thread ------------------------------------------------------------------------------
    def _run(self) -> None:
        try:
            if self.mode is Mode.FILE:
                self._read_file()
            elif self.mode is Mode.FOLLOW:
                self._follow()
            else:
                self._stream()
        except TraceError as exc:
            self._fail(exc)
        except OSError as exc:
            self._fail(TraceError(self.target, f"cannot read: {exc.strerror or exc}"))

    def _open(self, path: Path) -> IO[bytes]:
        try:
            return path.open("rb")
        except FileNotFoundError:
            raise TraceError(path, "no such file") from None
        except IsADirectoryError:
            raise TraceError(path, "is a directory, not a trace file") from None

    def _read_file(self) -> None:
        if self._loaded is not None:  # read already: nothing to open
            self._set(phase=Phase.COMPLETE)
            self._post(self._loaded)
            return
        path = Path(self.target)
        with self._open(path) as f:
            total = os.fstat(f.fileno()).st_size
            known = reopen(path, strict=self.strict)  # a valid sidecar: no parsing at all
            if known is not None:
                self._set(phase=Phase.COMPLETE, total=total, done=total)
                self._post(known)
                return
            head = f.read(FIRST_CHUNK)
            decoder = Decoder(path, head)
            self._builder = builder = _builder(path, self.strict, plain=decoder.kind == "plain")
            self._set(total=total)
            read, chunk = 0, head
            while chunk and not self._stop.is_set():
                read += len(chunk)
                steps = builder.feed(decoder.feed(chunk))
                self._dirty = self._dirty or bool(steps)
                self._set(done=read)
                if self.on_progress is not None:
                    self.on_progress(read, total)
                if builder.header is not None and read < total and self._due(builder.steps_parsed):
                    self._publish()
                self._wait_while_held()
                chunk = f.read(CHUNK)
        if self._stop.is_set():
            return
        torn = builder.finish()
        if builder.header is None:
            what = "empty file" if read == 0 else (torn.describe() if torn else "no records")
            raise TraceHeaderError(path, f"no complete header record ({what})")
        note = decoder.finish()
        if torn is None and note is not None:
            builder.problems.append(TraceError(path, note))
        self._set(phase=Phase.COMPLETE, done=total)
        self._publish(torn)  # says COMPLETE first, so on_update knows this is the last one
        save_sidecar(path, builder, torn)  # the next open maps it instead of parsing

    def _follow(self) -> None:
        path = Path(self.target)
        bad: tuple[int, int] | None = None  # (size, mtime) of a file that failed: wait for a change
        while not self._stop.is_set():
            try:
                st = path.stat()
            except FileNotFoundError:
                self._waiting(FILE)
                continue
            if bad == (st.st_size, st.st_mtime_ns):
                self._stop.wait(self.poll)
                continue
            try:
                self._follow_file(path)
            except _Restart:
                bad = None
            except TraceError as exc:
                self._fail(exc)  # shown; the file may yet be rewritten as a trace
                try:
                    st = path.stat()
                    bad = (st.st_size, st.st_mtime_ns)
                except FileNotFoundError:
                    bad = None

    def _waiting(self, what: Waiting) -> None:
        self._set(phase=Phase.WAITING, waiting=what)
        self._say_state()
        self._stop.wait(self.poll)

    @staticmethod
    def _unchanged(path: Path, inode: int, pos: int) -> int:
        """The file's size now; _Restart if it was replaced or truncated (a new run)."""
        try:
            st = path.stat()
        except FileNotFoundError:
            raise _Restart from None
        if st.st_ino != inode or st.st_size < pos:
            raise _Restart
        return st.st_size

    def _follow_file(self, path: Path) -> None:
        with self._open(path) as f:
            inode = os.fstat(f.fileno()).st_ino
            head = f.read(4)  # enough to tell plain from compressed
            while len(head) < 4 and head[:1] != b"{" and not self._stop.is_set():
                self._waiting(HEADER)
                self._unchanged(path, inode, len(head))
                head += f.read(4 - len(head))
            decoder = Decoder(path, head)
            with self._lock:
                self._builder = builder = _builder(path, self.strict, plain=decoder.kind == "plain")
                self._dirty = True  # a new file: its first snapshot comes even with no step in it
            self._published_steps, pos, chunk = 0, 0, head
            while not self._stop.is_set():
                if chunk:
                    pos += len(chunk)
                    self._dirty = bool(builder.feed(decoder.feed(chunk))) or self._dirty
                if builder.header is None:
                    self._waiting(HEADER)
                else:
                    self._set(phase=Phase.FOLLOWING, detail="", waiting=None)
                    if self._dirty and self._due(builder.steps_parsed):
                        self._publish()
                    self._say_state()
                size = self._unchanged(path, inode, pos)
                chunk = f.read(min(CHUNK, size - pos)) if size > pos else b""
                if not chunk:
                    pending = self._dirty and builder.header is not None
                    due_in = self._wait - (time.monotonic() - self._last_post)
                    self._stop.wait(min(self.poll, max(0.0, due_in)) if pending else self.poll)

    # -- a live stream ---------------------------------------------------------------------------
    def _stream(self) -> None:
        reader = self._reader = threading.Thread(
            target=self._read_stream, name="schedscope-source-stream", daemon=True
        )
        reader.start()
        # This thread publishes: snapshots at most every _wait, state changes at once.
        while True:
            self._wake.wait(self._wait)
            self._wake.clear()
            ending = not reader.is_alive()
            error = self._stream_error
            if self._dirty and (ending or time.monotonic() - self._last_post >= self._wait):
                self._publish()
            self._say_state()
            if error is not None:
                self._stream_error = None
                self._fail(error)
            if ending or self._stop.is_set():
                break
        with self._lock:
            if self.saver is not None:
                self.saver.close()

    def _read_stream(self) -> None:
        follower = self.follower
        assert follower is not None
        events = follower.events()
        try:
            for event in events:
                if self._stop.is_set():
                    return
                try:
                    self._on_event(event)
                except TraceError as exc:  # strict: a malformed record ends the stream
                    self._stream_error = exc
                    return
        except OSError as exc:  # the --save file could not be written
            self._stream_error = TraceError(self.save or self.target, f"cannot write: {exc.strerror or exc}")
        finally:
            events.close()
            self._wake.set()

    def _on_event(self, event: Any) -> None:
        kind, saver = event.kind, self.saver
        before = self._state
        with self._lock:  # close() closes the saver under it
            if self._stop.is_set():
                return
            if kind == "run":
                started = saver.handle(event) if saver is not None else None
                name = str(started) if started is not None else self.target
                if started is None and event.run > 1:
                    name = f"{self.target} (run {event.run})"
                self._builder = _builder(name, self.strict)
                self._builder.feed(event.line)
                self._dirty = True
                self._footer = False
                self._published_steps = 0
                if started is not None:
                    self._set(saving=str(started))
            elif kind == "record":
                if saver is not None:
                    saver.handle(event)
                record = event.record or {}
                if record.get("kind") == "gap":
                    self._gap_at = time.monotonic()
                    after, before_ = int(record.get("after") or 0), int(record.get("before") or 0)
                    reason = record.get("reason")
                    missing = Gap(after + 1, before_ - 1, str(reason) if reason else None)
                    self._set(gaps=self._state.gaps + 1, gap=missing)
                elif record.get("kind") == "footer":
                    self._footer = True
                if self._builder is not None:
                    self._builder.feed(event.line)
                    self._dirty = True
        link = self.follower.state if self.follower is not None else None
        phase = self._stream_phase(link)
        self._set(link=link, phase=phase, footer=self._footer)
        if (
            phase is not before.phase
            or kind == "run"
            or (link and before.link and link.run != before.link.run)
        ):
            self._wake.set()  # the publisher says it now, not at its next tick

    def _stream_phase(self, link: LinkState | None) -> Phase:
        if link is None:
            return Phase.CONNECTING
        phase = link.phase
        if phase in ("connecting", "reconnecting"):
            return Phase.ENDED if self._footer else Phase.CONNECTING
        if phase == "gave up":
            return Phase.ENDED
        if (
            phase in ("live", "idle")
            and self._gap_at is not None
            and time.monotonic() - self._gap_at < GAP_HOLD
        ):
            return Phase.GAP
        return Phase(phase)
