"""The Textual app and its factory, used by `schedscope tui` and by the tests (as posting does)."""

from __future__ import annotations

import re
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar

from textual.app import App, SystemCommand
from textual.binding import Binding, BindingType
from textual.screen import Screen

from tui.screens.base import StepScreen
from tui.screens.compare import CompareScreen
from tui.screens.error import ErrorScreen
from tui.screens.help import HelpScreen
from tui.screens.main import MainScreen

if TYPE_CHECKING:
    from tracer.live.attach import StreamMirror

HELP_INTRO = (
    "[b]schedscope[/b] replays a vLLM scheduler trace step by step. The timeline shows, per step, "
    "target tokens against the target budget, the input budget with reserved draft slots in the "
    "warning colour, the target tokens those slots withheld, query rows against the drafter "
    "buffer, buffer rows per forward pass, running and waiting requests, flags (✖ error, "
    "▲ warning, ● info) and preemptions (◆)."
)


@dataclass(frozen=True)
class Source:
    """What to open: one trace, a followed file, or two traces to compare."""

    trace: Path | None = None
    trace_b: Path | None = None
    follow: Path | None = None
    compare: bool = False
    strict: bool = True
    attach: StreamMirror | None = None  # --attach: the live stream mirrored into `follow`


class SchedscopeApp(App[None]):
    TITLE = "schedscope"
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("question_mark", "help", "Help", key_display="?"),
        Binding("d", "toggle_theme", "Dark/light theme", show=False),
        Binding("q", "quit", "Quit"),
    ]

    def __init__(self, source: Source) -> None:
        super().__init__()
        self.source = source
        self.marks: dict[str, float] = {"start": time.perf_counter()}
        self.error: str | None = None  # set when a trace could not be opened

    def mark(self, name: str) -> None:
        """Record when something first happened (the bench reads these)."""
        self.marks.setdefault(name, time.perf_counter())

    def get_default_screen(self) -> Screen:
        s = self.source
        if s.compare:
            assert s.trace is not None and s.trace_b is not None
            return CompareScreen(s.trace, s.trace_b, strict=s.strict)
        path = s.follow if s.follow is not None else s.trace
        assert path is not None
        return MainScreen(path, follow=s.follow is not None, strict=s.strict, attach=s.attach)

    def show_error(self, message: str, *, strict: bool = True) -> None:
        # A malformed line ("file:12: field ...") can be skipped; a missing file or a newer schema cannot.
        malformed = re.search(r":\d+: ", message) and "schema version" not in message
        hint = "--lenient skips malformed lines." if strict and malformed else ""
        self.error = message
        self.push_screen(ErrorScreen(message, hint))

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
    trace: str | Path | None = None,
    trace_b: str | Path | None = None,
    *,
    follow: str | Path | None = None,
    compare: bool = False,
    strict: bool = True,
    attach: StreamMirror | None = None,
) -> SchedscopeApp:
    """Build the app for one trace, a followed file, or two traces (compare).

    `attach`: the mirror of a live stream that writes `follow`; its state joins the status line
    and a new run's file is followed when the server restarts.
    """
    if follow is not None and (trace is not None or trace_b is not None):
        raise ValueError("--follow FILE opens that file alone: give no other trace")
    if trace_b is not None:
        compare = True
    if compare and (trace is None or trace_b is None):
        raise ValueError("--compare needs two traces: A and B")
    if trace is None and follow is None:
        raise ValueError("give a trace to open, or --follow FILE")
    return SchedscopeApp(
        Source(
            trace=Path(trace) if trace is not None else None,
            trace_b=Path(trace_b) if trace_b is not None else None,
            follow=Path(follow) if follow is not None else None,
            compare=compare,
            strict=strict,
            attach=attach,
        )
    )
