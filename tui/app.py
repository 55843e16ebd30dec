"""The Textual app and its factory, used by `schedscope tui` and by the tests (as posting does)."""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import ClassVar

from textual.app import App, SystemCommand
from textual.binding import Binding, BindingType
from textual.screen import Screen

from tracer.opening.door import Spec, check, open_input
from tracer.render import keys, labels
from tracer.trace.errors import TraceError, skippable
from tracer.trace.source import TraceSource
from tui.screens.base import StepScreen
from tui.screens.compare import CompareScreen
from tui.screens.engines import EnginesScreen
from tui.screens.error import ErrorScreen
from tui.screens.help import HelpScreen
from tui.screens.main import MainScreen


class SchedscopeApp(App[None]):
    TITLE = labels.APP_NAME
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("question_mark", "help", keys.HELP, key_display="?"),
        Binding("d", "toggle_theme", keys.THEME, show=False),
        Binding("q", "quit", keys.QUIT),
    ]

    def __init__(self, spec: Spec) -> None:
        super().__init__()
        self.spec = spec  # what to open, checked (tracer.opening.door)
        self.marks: dict[str, float] = {"start": time.perf_counter()}
        self.error: str | None = None  # set when a trace could not be opened

    def mark(self, name: str) -> None:
        """Record when something first happened (the bench reads these)."""
        self.marks.setdefault(name, time.perf_counter())

    def get_default_screen(self) -> Screen:
        spec = self.spec
        if spec.engines:
            return EnginesScreen(spec)  # opened whole, in the screen's worker
        if len(spec.traces) == 2:
            return CompareScreen(spec)
        # One trace, a growing file or a stream: a source, shown while it reads (nothing read yet).
        opened = open_input(replace(spec, shown_while_loading=True))
        source = opened.live or opened.source
        assert source is not None
        return MainScreen(source)

    def show_error(self, error: TraceError, *, strict: bool = True) -> None:
        hint = labels.LENIENT_HINT if strict and skippable(error) else ""
        self.error = str(error)
        self.push_screen(ErrorScreen(str(error), hint))

    def action_exit_error(self) -> None:
        self.exit(return_code=2)

    def action_help(self) -> None:
        if isinstance(self.screen, StepScreen):
            self.push_screen(HelpScreen(self.screen, keys.HELP_INTRO))

    def action_toggle_theme(self) -> None:
        self.theme = "textual-light" if self.current_theme.dark else "textual-dark"

    def get_system_commands(self, screen: Screen) -> Iterable[SystemCommand]:
        yield from super().get_system_commands(screen)
        if isinstance(screen, StepScreen):
            for title, help_text, action in screen.commands():
                yield SystemCommand(title, help_text, lambda a=action: screen.run_action(a))
            yield SystemCommand(*keys.KEYS, self.action_help)


def make_app(
    trace: str | Path | TraceSource | None = None,
    trace_b: str | Path | None = None,
    *,
    follow: str | Path | None = None,
    compare: bool = False,
    strict: bool = True,
    engines: Sequence[str | Path] = (),
    spec: Spec | None = None,
) -> SchedscopeApp:
    """Build the app for one trace source, two traces (compare), or `engines`: the traces of one
    data-parallel run, one lane each; or for `spec`, what `schedscope tui` was asked to open.

    `trace`: a `TraceSource` (a file, `--follow FILE` or `--attach URL`, as the web app takes
    it), or a path, opened as a complete file; `follow`: a path, followed as it grows. The
    screen starts the source and closes it when the app ends. ValueError for what the command
    line refuses (tracer.opening.door.check, the same check).
    """
    if spec is None:
        given = trace if isinstance(trace, TraceSource) else None  # a source opens alone
        spec = Spec(
            traces=tuple(p for p in (None if given else trace, trace_b) if p is not None),
            engines=tuple(engines),
            follow=follow,
            sources=(given,) if given is not None else (),
            strict=given.strict if given is not None else strict,
            compare=compare or trace_b is not None,
            viewer="tui",
        )
    check(spec)
    return SchedscopeApp(spec)
