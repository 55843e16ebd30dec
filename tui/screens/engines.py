"""The engines of one data-parallel run (`--engines`), one timeline lane each on a shared step axis.

Each lane is one engine's target tokens against its target budget, with the tokens its
reservation withheld; the line above them is the run's totals (tracer.analysis.engines.Run).
`e`/`E` pick a lane and `o` opens that engine's trace in the single-trace view.
"""

from __future__ import annotations

from dataclasses import replace
from typing import ClassVar

from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, Vertical
from textual.markup import escape
from textual.widgets import Footer, ProgressBar, Static

from tracer.opening.door import Spec, open_input
from tracer.render import keys, labels
from tracer.render.text import run_totals_line
from tracer.trace.errors import TraceError
from tracer.trace.source import TraceSource
from tui.bins import Window
from tui.data import RunModel, TraceModel
from tui.lanes import engine_lanes
from tui.markup import bold
from tui.screens.base import Command, StepScreen
from tui.screens.main import MainScreen
from tui.widgets.inspector import engine_line
from tui.widgets.timeline import Timeline

LABEL_W = 26  # "▶ engine 10 (pid 4194303)" fits


class EngineScreen(MainScreen):
    """One engine of the run, opened from its lane: the single-trace view, escape goes back."""

    BINDINGS: ClassVar[list[BindingType]] = [Binding("escape", "back", keys.BACK_TO_ENGINES)]

    def action_back(self) -> None:
        self.dismiss()


class EnginesScreen(StepScreen):
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("e", "select(1)", keys.NEXT_ENGINE, tooltip=keys.NEXT_ENGINE_TIP),
        Binding("E", "select(-1)", keys.PREVIOUS_ENGINE, show=False),
        Binding("o,enter", "open", keys.OPEN_ENGINE, tooltip=keys.OPEN_ENGINE_TIP),
    ]
    DEFAULT_CSS = """
    EnginesScreen #top { height: auto; background: $panel; padding: 0 1; }
    EnginesScreen #titlebar { height: 1; }
    EnginesScreen #run-title { width: 1fr; }
    EnginesScreen #status { width: auto; color: $text-muted; }
    EnginesScreen #progress { height: 1; }
    EnginesScreen #progress.done { display: none; }
    EnginesScreen #run-totals { padding: 0 1; }
    EnginesScreen #engine-config { padding: 0 1; color: $text-muted; }
    EnginesScreen Timeline { border: round $primary 40%; }
    """

    def __init__(self, spec: Spec) -> None:
        super().__init__()
        self.spec = spec  # the run's traces (tracer.opening.door)
        self.strict = spec.strict
        self.model: RunModel | None = None
        self.selected = 0
        self.loaded = False

    def compose(self) -> ComposeResult:
        with Vertical(id="top"):
            with Horizontal(id="titlebar"):
                yield Static(labels.engines_title(len(self.spec.engines), mark=bold), id="run-title")
                yield Static(labels.LOADING, id="status")
            yield ProgressBar(id="progress", show_eta=False)
        yield Static("", id="run-totals")
        yield Static("", id="engine-config")
        timeline = Timeline(id="lanes", label_width=LABEL_W)
        timeline.border_title = labels.ENGINES_TIMELINE
        timeline.border_subtitle = labels.ENGINES_KEYS
        yield timeline
        yield Footer()

    def on_mount(self) -> None:
        self.call_after_refresh(self.app.mark, "first_frame")  # type: ignore[attr-defined]
        self.load()

    @property
    def total(self) -> int:
        return len(self.model) if self.model is not None else 0

    @work(thread=True, exclusive=True, group="engines")
    def load(self) -> None:
        """Every trace, their analyses and the one-run check, off the UI thread."""
        bar = self.query_one(ProgressBar)

        def progress(done: int, total: int) -> None:
            self.app.call_from_thread(bar.update, total=total, progress=done)

        try:
            opened = open_input(replace(self.spec, progress=progress, session=TraceModel.build))
            assert opened.run is not None
            model = RunModel(opened.run)
        except TraceError as exc:
            self.app.call_from_thread(self.app.show_error, exc, strict=self.strict)  # type: ignore[attr-defined]
            return
        self.app.call_from_thread(self._ready, model)

    def _ready(self, model: RunModel) -> None:
        self.model = model
        self.loaded = True
        self.query_one(ProgressBar).add_class("done")
        self.query_one("#run-totals", Static).update(escape(run_totals_line(model.totals)))
        # Engines of one run share their config (Run.of checked it): one line says it for all.
        self.query_one("#engine-config", Static).update(engine_line(model.models[0]))
        self.window = Window.fit(len(model))
        self._draw()
        self.call_after_refresh(self.app.mark, "loaded")  # type: ignore[attr-defined]

    def _draw(self) -> None:
        if self.model is None:
            return
        timeline = self.query_one(Timeline)
        timeline.show_lanes(engine_lanes(self.model, self.selected), self.model.steps, len(self.model))
        self.apply_view()

    def apply_view(self) -> None:
        self.query_one(Timeline).set_view(self.window, self.cursor)
        self.update_status()

    def update_status(self) -> None:
        if self.model is None:
            return
        label = self.model.run.engines[self.selected].label
        self.query_one("#status", Static).update(f"{self.replay_status()} · {labels.selected(escape(label))}")

    @on(Timeline.Clicked)
    def _timeline_clicked(self, message: Timeline.Clicked) -> None:
        self.set_cursor(message.row)

    def action_select(self, delta: int) -> None:
        if self.model is None:
            return
        self.selected = (self.selected + delta) % len(self.model.run.engines)
        self._draw()

    def action_open(self) -> None:
        if self.model is None:
            return
        engine = self.model.run.engines[self.selected]
        # The single-trace view takes its trace from a source: the one read here, not the file again.
        source = TraceSource.loaded(engine.trace, strict=self.strict)
        self.app.push_screen(EngineScreen(source))

    engines_axis = True

    def row_of_step(self, step: int) -> int | None:
        return self.model.row_of(step) if self.model is not None else None

    def commands(self) -> list[Command]:
        return [
            (*keys.NEXT_ENGINE_CMD, "select(1)"),
            (*keys.PREVIOUS_ENGINE_CMD, "select(-1)"),
            (*keys.OPEN_ENGINE_CMD, "open"),
            *super().commands(),
        ]
