"""The Textual app and its factory, used by `schedscope tui` and by the tests (as posting does)."""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

from textual.app import App, SystemCommand
from textual.binding import Binding, BindingType
from textual.screen import Screen

from tracer.cli import check_viewer_inputs
from tracer.trace.errors import skippable
from tracer.trace.reader import TraceError
from tracer.trace.source import TraceSource
from tui.screens.base import StepScreen
from tui.screens.compare import CompareScreen
from tui.screens.engines import EnginesScreen
from tui.screens.error import ErrorScreen
from tui.screens.help import HelpScreen
from tui.screens.main import MainScreen

HELP_INTRO = (
    "[b]schedscope[/b] replays a vLLM scheduler trace step by step. The timeline shows, per step, "
    "target tokens against the target budget, the input budget with reserved draft slots in the "
    "warning colour, the target tokens those slots withheld, query rows against the drafter "
    "buffer, buffer rows per forward pass, running and waiting requests, flags (✖ error, "
    "▲ warning, ● info) and preemptions (◆). [b]w[/b] opens the requests view: one lane per "
    "request, coloured by state and reason; enter on a lane says why."
)


@dataclass(frozen=True)
class Opening:
    """What to open: one source (a file, a growing file or a live stream), two traces to compare,
    or the engines of one data-parallel run."""

    source: TraceSource | None = None
    trace: Path | None = None
    trace_b: Path | None = None
    compare: bool = False
    strict: bool = True
    engines: tuple[Path, ...] = ()


class SchedscopeApp(App[None]):
    TITLE = "schedscope"
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("question_mark", "help", "Help", key_display="?"),
        Binding("d", "toggle_theme", "Dark/light theme", show=False),
        Binding("q", "quit", "Quit"),
    ]

    def __init__(self, opening: Opening) -> None:
        super().__init__()
        self.opening = opening
        self.marks: dict[str, float] = {"start": time.perf_counter()}
        self.error: str | None = None  # set when a trace could not be opened

    def mark(self, name: str) -> None:
        """Record when something first happened (the bench reads these)."""
        self.marks.setdefault(name, time.perf_counter())

    def get_default_screen(self) -> Screen:
        o = self.opening
        if o.engines:
            return EnginesScreen(list(o.engines), strict=o.strict)
        if o.compare:
            assert o.trace is not None and o.trace_b is not None
            return CompareScreen(o.trace, o.trace_b, strict=o.strict)
        assert o.source is not None
        return MainScreen(o.source)

    def show_error(self, error: TraceError, *, strict: bool = True) -> None:
        hint = "--lenient skips malformed lines." if strict and skippable(error) else ""
        self.error = str(error)
        self.push_screen(ErrorScreen(str(error), hint))

    def action_exit_error(self) -> None:
        self.exit(return_code=2)

    def action_help(self) -> None:
        if isinstance(self.screen, StepScreen):
            self.push_screen(HelpScreen(self.screen, HELP_INTRO))

    def action_toggle_theme(self) -> None:
        self.theme = "textual-light" if self.current_theme.dark else "textual-dark"

    def get_system_commands(self, screen: Screen) -> Iterable[SystemCommand]:
        yield from super().get_system_commands(screen)
        if isinstance(screen, StepScreen):
            for title, help_text, action in screen.commands():
                yield SystemCommand(title, help_text, lambda a=action: screen.run_action(a))
            yield SystemCommand("Keys", "Every key binding (?)", self.action_help)


def make_app(
    trace: str | Path | TraceSource | None = None,
    trace_b: str | Path | None = None,
    *,
    follow: str | Path | None = None,
    compare: bool = False,
    strict: bool = True,
    engines: Sequence[str | Path] = (),
) -> SchedscopeApp:
    """Build the app for one trace source, two traces (compare), or `engines`: the traces of one
    data-parallel run, one lane each.

    `trace`: a `TraceSource` (a file, `--follow FILE` or `--attach URL`, as the web app takes
    it), or a path, opened as a complete file; `follow`: a path, followed as it grows. The
    screen starts the source and closes it when the app ends.
    """
    given = isinstance(trace, TraceSource)  # a source opens alone, as --follow FILE does
    compare = compare or trace_b is not None
    check_viewer_inputs(  # the command line's own check (tracer.cli), so both say the same
        traces=sum(p is not None for p in (None if given else trace, trace_b)),
        engines=len(engines),
        sources=int(given) + int(follow is not None),
        compare=compare,
        command="tui",
    )
    if engines:
        return SchedscopeApp(Opening(engines=tuple(Path(p) for p in engines), strict=strict))
    if isinstance(trace, TraceSource):
        return SchedscopeApp(Opening(source=trace, strict=trace.strict))
    if compare:
        assert trace is not None and trace_b is not None
        return SchedscopeApp(Opening(trace=Path(trace), trace_b=Path(trace_b), compare=True, strict=strict))
    if follow is not None:
        return SchedscopeApp(Opening(source=TraceSource.follow(follow, strict=strict), strict=strict))
    assert trace is not None
    return SchedscopeApp(Opening(source=TraceSource.file(trace, strict=strict), strict=strict))
