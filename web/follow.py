"""A tracer.trace.source.TraceSource published into the web app's TraceStore.

The source reads on its own thread (a complete file progressively, a growing
file, or a live stream) and calls back there; this adapter builds the TraceView
(budget analysis, flags, series) on that thread too, so the cost slows the
source's snapshots down rather than the app, and keeps the source's newest
state for the live status line. The browser polls and receives only the new
steps as a Patch.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from tracer.render.source import source_line
from tracer.trace.errors import TraceError
from tracer.trace.source import Phase, SourceState, TraceSource
from tracer.trace.trace_type import Trace
from web.model import TraceView
from web.store import TraceStore


class StoreFeed:
    def __init__(self, source: TraceSource, store: TraceStore, key: str, prefix: str) -> None:
        self.source = source
        self.store = store
        self.key = key
        self.prefix = prefix  # the label's, before the trace's file name
        self.state: SourceState = source.state
        self.error: TraceError | None = None
        self.on_view: Callable[[TraceView], None] | None = None  # each new view, on the source's thread
        source.bind(on_update=self._update, on_state=self._state, on_error=self._error)

    @property
    def label(self) -> str:
        """The dropdown's label before anything is read."""
        return f"{self.prefix}{self.source.name}"

    @property
    def status(self) -> str:
        """The source's state in one line; nothing once a complete file is shown."""
        if self.state.phase is Phase.COMPLETE and not self.source.live:
            return ""
        return source_line(self.state)

    def start(self) -> StoreFeed:
        self.source.start()
        return self

    def stop(self) -> None:
        self.source.close()

    def _update(self, trace: Trace, version: int) -> None:
        view = self.store.add(self.key, f"{self.prefix}{Path(trace.path).name}", trace, version=version)
        if self.on_view is not None:
            self.on_view(view)

    def _state(self, state: SourceState) -> None:
        self.state = state

    def _error(self, error: TraceError) -> None:
        self.error = error
