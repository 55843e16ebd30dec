"""What the main and compare screens share: a step cursor, a zoom window and replay."""

from __future__ import annotations

from typing import ClassVar

from textual.binding import Binding, BindingType
from textual.screen import Screen
from textual.timer import Timer

from tracer.render import keys, labels, moves
from tui.bins import Window

SPEEDS = (1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 5000, 20000)  # steps per second
MAX_FPS = 30

# (title, help, action) for the command palette.
Command = tuple[str, str, str]


class StepScreen(Screen[None]):
    BINDINGS: ClassVar[list[BindingType]] = [
        # priority: left/right step the cursor even where a scrolling panel has focus.
        Binding("left", "step(-1)", keys.STEP, key_display="←/→", priority=True, tooltip=keys.PREVIOUS_STEP),
        Binding("right", "step(1)", keys.NEXT_STEP, show=False, priority=True),
        Binding("shift+left", "step(-10)", keys.BACK_10, show=False, priority=True),
        Binding("shift+right", "step(10)", keys.FORWARD_10, show=False, priority=True),
        Binding("home", "first", keys.FIRST_STEP, show=False, priority=True),
        Binding("end", "last", keys.LAST_STEP, show=False, priority=True),
        Binding("g", "goto", keys.GO_TO_STEP, show=False),
        Binding("plus,equals_sign", "zoom(0.5)", keys.ZOOM_IN, key_display="+/-"),
        Binding("minus", "zoom(2)", keys.ZOOM_OUT, show=False),
        Binding("0", "fit", keys.ZOOM_FIT, show=False),
        Binding("left_square_bracket", "pan(-0.5)", keys.PAN_LEFT, show=False),
        Binding("right_square_bracket", "pan(0.5)", keys.PAN_RIGHT, show=False),
        Binding("space", "play", keys.PLAY),
        Binding("full_stop", "speed(1)", keys.FASTER, show=False),
        Binding("comma", "speed(-1)", keys.SLOWER, show=False),
    ]

    def __init__(self) -> None:
        super().__init__()
        self.cursor = 0
        self.window = Window(0, 1)
        self.fit = True  # the window shows the whole run until the user zooms or pans
        self.speed = SPEEDS[2]
        self._timer: Timer | None = None

    # -- what a subclass provides -------------------------------------------------------
    @property
    def total(self) -> int:
        return 0

    def apply_view(self) -> None:
        """Push the cursor and window into the widgets."""

    def update_status(self) -> None:
        """Redraw the status line (replay state, follow state, filters)."""

    def commands(self) -> list[Command]:
        return [(*entry, action) for action, entry in keys.STEP_COMMANDS.items()]

    # -- the cursor and window ----------------------------------------------------------
    def set_cursor(self, row: int) -> None:
        total = self.total
        self.cursor = max(0, min(row, total - 1)) if total else 0
        if self.fit:
            self.window = Window.fit(total)
        else:
            self.window = self.window.follow(self.cursor, total)
        self.apply_view()

    def action_step(self, delta: int) -> None:
        self.set_cursor(self.cursor + delta)

    def action_first(self) -> None:
        self.set_cursor(0)

    def action_last(self) -> None:
        self.set_cursor(self.total - 1)

    def action_zoom(self, factor: float) -> None:
        total = self.total
        if not total:
            return
        window = Window.fit(total) if self.fit else self.window
        self.window = window.zoom(factor, self.cursor, total)
        self.fit = self.window.span >= total
        self.apply_view()

    def action_fit(self) -> None:
        self.fit = True
        self.window = Window.fit(self.total)
        self.apply_view()

    def action_pan(self, fraction: float) -> None:
        total = self.total
        if not total or self.fit:
            return
        self.window = self.window.pan(fraction, total)
        # Keep the cursor on screen: it moves with the window when panned off it.
        if not self.window.start <= self.cursor < self.window.end:
            self.cursor = self.window.start if fraction > 0 else self.window.end - 1
        self.apply_view()

    def action_goto(self) -> None:
        from tui.screens.prompt import PromptScreen

        def go(text: str | None) -> None:
            if text:
                self.goto_step(text)

        self.app.push_screen(PromptScreen(*keys.GOTO_PROMPT), go)

    # Whether `g`'s step numbers are the engines' shared axis (render.moves.no_step words it).
    engines_axis = False

    def row_of_step(self, step: int) -> int | None:
        """The row showing `step` as recorded, None if none does (a subclass knows its rows)."""
        return None

    def goto_step(self, text: str) -> None:
        if not text.lstrip("-").isdigit():
            self.notify(moves.not_a_step(text), severity="warning")
            return
        row = self.row_of_step(int(text))
        if row is None:
            self.notify(moves.no_step(text, self.engines_axis), severity="warning")
        else:
            self.set_cursor(row)

    # -- replay -------------------------------------------------------------------------
    @property
    def playing(self) -> bool:
        return self._timer is not None

    def action_play(self) -> None:
        if self._timer is not None:
            self._stop_replay()
        elif self.total:
            if self.cursor >= self.total - 1:
                self.set_cursor(0)
            self._start_replay()
        self.update_status()

    def _start_replay(self) -> None:
        self._timer = self.set_interval(1 / min(self.speed, MAX_FPS), self._tick)

    def _stop_replay(self) -> None:
        if self._timer is not None:
            self._timer.stop()
            self._timer = None

    def action_speed(self, direction: int) -> None:
        i = SPEEDS.index(self.speed) + direction
        self.speed = SPEEDS[max(0, min(len(SPEEDS) - 1, i))]
        if self._timer is not None:
            self._stop_replay()
            self._start_replay()
        self.update_status()

    def _tick(self) -> None:
        advance = max(1, round(self.speed / MAX_FPS))
        if self.cursor + advance >= self.total:
            self.set_cursor(self.total - 1)
            self._stop_replay()
        else:
            self.set_cursor(self.cursor + advance)
        self.update_status()

    def replay_status(self) -> str:
        state = f"[$success]{labels.PLAYING}[/]" if self.playing else labels.PAUSED
        return f"{state} {labels.per_second(self.speed)}"
