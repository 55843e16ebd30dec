"""A tracer.trace.source.TraceSource's callbacks as Textual messages.

The source reads on its own thread and calls back there; this adapter builds
the TUI's TraceModel on that thread too (the flag detectors run off the UI
thread, and their cost slows the source's snapshots down, not the UI) and
posts messages. A message of a kind replaces an older one of the same kind
still queued, so a UI that falls behind skips to the newest snapshot.
"""

from __future__ import annotations

from textual.message import Message
from textual.message_pump import MessagePump

from tracer.trace.errors import TraceError
from tracer.trace.source import Phase, SourceState, TraceSource
from tracer.trace.trace_type import Trace
from tui.data import TraceModel


class SourceMessage(Message):
    def __init__(self, source: TraceSource) -> None:
        super().__init__()
        self.source = source

    def can_replace(self, message: Message) -> bool:
        # Textual drops this message when the next queued one may replace it.
        return type(message) is type(self) and message.source is self.source  # type: ignore[attr-defined]


class Snapshot(SourceMessage):
    """The trace as read so far, with its flags: ready to show. `done`: a complete file's last."""

    def __init__(self, source: TraceSource, model: TraceModel, version: int, *, done: bool) -> None:
        super().__init__(source)
        self.model = model
        self.version = version
        self.done = done


class Progress(SourceMessage):
    def __init__(self, source: TraceSource, read: int, total: int) -> None:
        super().__init__(source)
        self.read = read
        self.total = total


class StateChanged(SourceMessage):
    def __init__(self, source: TraceSource, state: SourceState) -> None:
        super().__init__(source)
        self.state = state


class Failed(SourceMessage):
    def __init__(self, source: TraceSource, error: TraceError) -> None:
        super().__init__(source)
        self.error = error

    def can_replace(self, message: Message) -> bool:
        return False


def connect(source: TraceSource, target: MessagePump) -> TraceSource:
    """Bind the source's callbacks to messages posted to `target`."""

    def update(trace: Trace, version: int) -> None:
        # A complete file's state turns COMPLETE just before its last snapshot.
        done = source.state.phase is Phase.COMPLETE
        target.post_message(Snapshot(source, TraceModel.build(trace), version, done=done))

    return source.bind(
        on_update=update,
        on_state=lambda state: target.post_message(StateChanged(source, state)),
        on_error=lambda error: target.post_message(Failed(source, error)),
        on_progress=lambda read, total: target.post_message(Progress(source, read, total)),
    )
