"""The main screen: one trace (opened, loading, or followed as it grows)."""

from __future__ import annotations

import gc
from typing import TYPE_CHECKING, ClassVar

from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.markup import escape
from textual.widgets import Footer, ProgressBar, Static, TabbedContent, TabPane

from tracer.analysis.requests import RequestLife
from tracer.render import empty, keys, labels, moves
from tracer.render.source import source_line
from tui.bins import Window
from tui.data import TraceModel
from tui.feed import Failed, Progress, Snapshot, StateChanged, connect
from tui.markup import bold
from tui.screens.base import Command, StepScreen
from tui.widgets.inspector import Inspector, LifetimePanel, engine_line, run_line
from tui.widgets.tables import FlagList, StepTable
from tui.widgets.timeline import Timeline
from tui.widgets.vlist import VirtualList

if TYPE_CHECKING:
    from tracer.trace.source import SourceState, TraceSource


class MainScreen(StepScreen):
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("n", "next_flag", keys.NEXT_FLAG),
        Binding("N", "prev_flag", keys.PREVIOUS_FLAG, show=False),
        Binding("k", "filter_kind", keys.FILTER_KIND, show=False),
        Binding("slash", "search", keys.REQUEST, key_display="/"),
        Binding("t", "tail", keys.TAIL, show=False),
        Binding("i", "tab('inspector-tab')", keys.INSPECTOR_TAB, show=False),
        Binding("f", "tab('flags-tab')", keys.FLAGS_TAB, show=False),
        Binding("r", "tab('request-tab')", keys.REQUEST_TAB, show=False),
        Binding("w", "requests", keys.REQUESTS, tooltip=keys.REQUESTS_TIP),
    ]
    DEFAULT_CSS = """
    MainScreen #top { height: auto; background: $panel; padding: 0 1; }
    MainScreen #engine { color: $text-muted; }
    MainScreen #progress { height: 1; }
    MainScreen #progress.done { display: none; }
    MainScreen #waiting { color: $warning; padding: 0 1; display: none; }
    MainScreen #waiting.shown { display: block; }
    MainScreen Timeline { border: round $primary 40%; border-title-color: $text-muted; }
    MainScreen #lower { height: 1fr; }
    MainScreen StepTable { width: 1fr; min-width: 40; }
    MainScreen #side { width: 1fr; }
    MainScreen #side TabPane { padding: 0; }
    MainScreen #flag-filter { height: 1; color: $text-muted; padding: 0 1; }
    """

    def __init__(self, source: TraceSource) -> None:
        super().__init__()
        self.source = source
        self.follow = source.live  # a growing file or a live stream: more steps may come
        self.strict = source.strict
        self.state: SourceState = source.state
        self.model: TraceModel | None = None
        self.kind: str | None = None
        self.tail = False
        self.loaded = False
        self._new_since = 0

    # -- layout -------------------------------------------------------------------------
    def compose(self) -> ComposeResult:
        with Vertical(id="top"):
            yield Static(f"[b]{escape(self.source.name)}[/b] · {labels.OPENING}", id="run")
            yield Static("", id="engine")
            # A followed file has no end to measure progress against.
            yield ProgressBar(id="progress", show_eta=False, classes="done" if self.follow else "")
        yield Static("", id="waiting")
        timeline = Timeline(id="timeline")
        timeline.border_title = labels.TIMELINE
        timeline.border_subtitle = labels.TIMELINE_KEYS
        yield timeline
        with Horizontal(id="lower"):
            yield StepTable(id="steps")
            with TabbedContent(id="side", initial="inspector-tab"):
                with TabPane(labels.INSPECTOR_TAB, id="inspector-tab"):
                    yield Inspector(id="inspector")
                with TabPane(labels.FLAGS_TAB, id="flags-tab"):
                    yield Static("", id="flag-filter")
                    yield FlagList(id="flags")
                with TabPane(labels.REQUEST_TAB, id="request-tab"), VerticalScroll():
                    yield LifetimePanel(labels.LIFE_HINT, id="life")
        yield Footer()

    def on_mount(self) -> None:
        self.query_one(StepTable).focus()
        self.call_after_refresh(self.app.mark, "first_frame")  # type: ignore[attr-defined]
        connect(self.source, self).start()
        self.update_status()

    def on_unmount(self) -> None:
        self.source.close()

    @property
    def total(self) -> int:
        return len(self.model) if self.model is not None else 0

    # -- source messages ------------------------------------------------------------------
    @on(Progress)
    def _source_progress(self, message: Progress) -> None:
        bar = self.query_one(ProgressBar)
        bar.update(total=max(1, message.total), progress=message.read)

    @on(StateChanged)
    def _source_state(self, message: StateChanged) -> None:
        self.state = message.state
        self._show_waiting()
        self.update_status()

    def _show_waiting(self) -> None:
        """Say what the source waits for (no data yet) or what went wrong (a stall, a gap, a 401)."""
        state, waiting = self.state, self.query_one("#waiting", Static)
        if state.problem or (self.model is None and self.follow):
            waiting.update(escape(source_line(state)))
            waiting.add_class("shown")
        else:
            waiting.remove_class("shown")

    @on(Failed)
    def _source_failed(self, message: Failed) -> None:
        self.app.show_error(message.error, strict=self.strict)  # type: ignore[attr-defined]

    @on(Snapshot)
    def _source_snapshot(self, message: Snapshot) -> None:
        old, model = self.model, message.model
        first = old is None
        self.model = model
        total = len(model)
        if old is not None and (total < len(old) or model.trace.path != old.trace.path):
            first = True  # the followed file was replaced, or the stream's new run has its own
        if old is not None and not first:
            self._new_since += total - len(old)
        if first:
            self.cursor, self.fit, self._new_since = 0, True, 0
        if self.tail:
            self.cursor = max(0, total - 1)
        self.window = Window.fit(total) if self.fit else self.window.clamp(total)
        if self.tail and not self.fit:
            self.window = self.window.follow(self.cursor, total)
        self._show_waiting()
        self.query_one(Timeline).show(model)
        self.query_one(StepTable).show(model)
        self.query_one(FlagList).show(model, self.kind)
        self.query_one("#run", Static).update(run_line(model))
        self.query_one("#engine", Static).update(engine_line(model))
        if message.done:
            self.loaded = True
            self.query_one(ProgressBar).add_class("done")
            # A big trace leaves hundreds of thousands of long-lived objects (its flags): keep
            # the cyclic GC from rescanning them, which stalled key presses by 100-300 ms.
            gc.freeze()
        elif self.follow:
            self.query_one(ProgressBar).add_class("done")
        self.apply_view()
        self.update_status()
        app = self.app
        if first:
            self.call_after_refresh(app.mark, "first_data_frame")  # type: ignore[attr-defined]
        if message.done:
            self.call_after_refresh(app.mark, "loaded")  # type: ignore[attr-defined]

    # -- views ------------------------------------------------------------------------------
    def apply_view(self) -> None:
        model = self.model
        self.query_one(Timeline).set_view(self.window, self.cursor)
        self.query_one(StepTable).set_cursor(self.cursor)
        self.query_one(FlagList).sync_to_row(self.cursor)
        self.query_one(Inspector).show(model, self.cursor)

    def update_status(self) -> None:
        parts = [self.replay_status()]
        if self.follow:
            tail = f"[$success]{labels.TAIL_ON}[/]" if self.tail else labels.TAIL_OFF
            new = f" · {labels.new_steps(self._new_since)}" if self._new_since and not self.tail else ""
            parts.append(f"{escape(source_line(self.state))}{new} · {tail}")
        elif not self.loaded:
            parts.append(labels.LOADING)
        self.query_one(Timeline).border_title = " · ".join([labels.TIMELINE, *parts])
        kinds = self.model.kinds_present if self.model is not None else []
        shown = self.kind or labels.ALL_KINDS
        choices = " · ".join(kinds) if kinds else empty.NO_FLAGS_IN_TRACE
        self.query_one("#flag-filter", Static).update(
            labels.flag_filter(escape(shown), escape(choices), mark=bold)
        )

    def set_cursor(self, row: int) -> None:
        if self.tail and row < self.total - 1:
            self.tail = False  # the user moved away from the tail: stay where they are
            self.update_status()
        super().set_cursor(row)

    @on(VirtualList.Chosen, "#steps")
    def _step_chosen(self, message: VirtualList.Chosen) -> None:
        self.set_cursor(message.row)

    @on(VirtualList.Chosen, "#flags")
    def _flag_chosen(self, message: VirtualList.Chosen) -> None:
        flags = self.query_one(FlagList)
        flags.set_cursor(message.row)
        row = int(flags.rows[message.row]) if len(flags.rows) else -1
        if row >= 0:
            self.set_cursor(row)
            flags.set_cursor(message.row)

    @on(Timeline.Clicked)
    def _timeline_clicked(self, message: Timeline.Clicked) -> None:
        self.set_cursor(message.row)

    # -- actions ----------------------------------------------------------------------------
    def action_last(self) -> None:
        if self.follow:
            self.tail = True
            self._new_since = 0
        super().action_last()
        self.update_status()

    def action_tail(self) -> None:
        if not self.follow:
            self.notify(moves.TAIL_NEEDS_FOLLOW)
            return
        self.tail = not self.tail
        if self.tail:
            self._new_since = 0
            super().set_cursor(self.total - 1)
        self.update_status()

    def _jump_flag(self, backwards: bool) -> None:
        if self.model is None:
            return
        row = self.model.next_flag(self.cursor, self.kind, backwards=backwards)
        if row is None:
            self.notify(moves.nothing_further(moves.flag_named(self.kind), backwards), timeout=2)
            return
        self.set_cursor(row)

    def action_next_flag(self) -> None:
        self._jump_flag(backwards=False)

    def action_prev_flag(self) -> None:
        self._jump_flag(backwards=True)

    def action_filter_kind(self, kind: str | None = "") -> None:
        """Cycle the flag filter (all, then each kind present), or set it to `kind`."""
        if self.model is None:
            return
        kinds: list[str | None] = [None, *self.model.kinds_present]
        if kind == "":
            kind = kinds[(kinds.index(self.kind) + 1) % len(kinds)] if self.kind in kinds else None
        self.kind = kind
        self.query_one(FlagList).show(self.model, self.kind)
        self.query_one(FlagList).sync_to_row(self.cursor)
        self.query_one(TabbedContent).active = "flags-tab"
        self.update_status()

    def action_tab(self, tab: str) -> None:
        self.query_one(TabbedContent).active = tab

    def action_search(self) -> None:
        from tui.screens.prompt import PromptScreen

        def found(text: str | None) -> None:
            if text:
                self.search(text)

        self.app.push_screen(PromptScreen(*keys.SEARCH_PROMPT), found)

    @work(thread=True, exclusive=True, group="search")
    def search(self, text: str) -> None:
        """Byte search over the trace off the UI thread: a million steps take a moment."""
        model = self.model
        if model is None:
            return
        life = model.request_life(text)
        suggestions = [] if life is not None else model.matching_ids(text, limit=12)
        if life is None and len(suggestions) == 1:
            life = model.request_life(suggestions[0])
        self.app.call_from_thread(self._show_life, text, life, suggestions)

    def _show_life(self, text: str, life: RequestLife | None, suggestions: list[str]) -> None:
        self.query_one(LifetimePanel).show_life(text, life, suggestions)
        self.query_one(TabbedContent).active = "request-tab"
        if life is not None and self.model is not None:
            step = life.admitted if life.admitted is not None else (life.scheduled or [None])[0]
            if step is not None:
                row = self.model.row_of(step)
                if row is not None:
                    self.set_cursor(row)

    def row_of_step(self, step: int) -> int | None:
        return self.model.row_of(step) if self.model is not None else None

    def action_requests(self) -> None:
        """The requests view (tui.screens.requests) over this window; back at its cursor."""
        from tui.screens.requests import RequestsScreen

        if self.model is None:
            return

        def back(row: int | None) -> None:
            if row is not None:
                self.set_cursor(row)

        window = None if self.fit else self.window
        self.app.push_screen(RequestsScreen(self.model, self.cursor, window), back)  # type: ignore[arg-type]

    def commands(self) -> list[Command]:
        out: list[Command] = [
            (*keys.NEXT_FLAG_CMD, "next_flag"),
            (*keys.PREVIOUS_FLAG_CMD, "prev_flag"),
            (*keys.SEARCH_CMD, "search"),
            (*keys.ALL_KINDS_CMD, "filter_kind(None)"),
        ]
        for kind in self.model.kinds_present if self.model is not None else []:
            out.append((*keys.kind_cmd(kind), f"filter_kind('{kind}')"))
        if self.follow:
            out.append((*keys.TAIL_CMD, "tail"))
        out += [
            (*keys.INSPECTOR_CMD, "tab('inspector-tab')"),
            (*keys.FLAG_LIST_CMD, "tab('flags-tab')"),
            (*keys.REQUESTS_CMD, "requests"),
        ]
        return out + super().commands()
