"""The requests view: one lane per request over the step axis, coloured by state and reason.

Each lane is tracer.analysis.request_lanes' segments for the steps in the window: the glyph says
the request's state in the step, the colour its reason (tracer.analysis.reasons.Reason.color,
the web app's Gantt's colours). ↑/↓ pick a lane, ←/→ move the step cursor, +/- and [ ] zoom and
pan as on the main screen; enter (or a click on a lane) opens that request's `why`
(tracer.render.why.story_lines), escape goes back with the cursor where it is now.

The lanes are bounded: at most request_lanes.MAX_WINDOW steps are read and MAX_LANES lanes kept
(the title line says what was left out); zoom in to see the rest.
"""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np
from rich.style import Style
from textual import events, on, work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Vertical
from textual.markup import escape
from textual.message import Message
from textual.screen import ModalScreen
from textual.widgets import Footer, Static

from tracer.analysis.reasons import CODE_INDEX, CODES, color, label
from tracer.analysis.request_lanes import (
    CLIPPED,
    MAX_LANES,
    MAX_WINDOW,
    PREEMPTED,
    SCHEDULED,
    UNSCHEDULED,
    WAITING,
    RequestLane,
    RequestLanes,
)
from tracer.render import empty, keys, labels
from tracer.render.why import lanes_note, no_story_line, segment_text, state_label, story_lines
from tui.bins import Columns, Window
from tui.data import TraceModel
from tui.markup import bold
from tui.screens.base import Command, StepScreen
from tui.widgets.textview import TextView
from tui.widgets.vlist import Cell, VirtualList

# A state's glyph, and its weight when one column covers several steps (the heaviest shows).
GLYPH = {SCHEDULED: "█", CLIPPED: "▓", WAITING: "▒", UNSCHEDULED: "░", PREEMPTED: "◆"}
WEIGHT = {SCHEDULED: 1, CLIPPED: 2, UNSCHEDULED: 3, WAITING: 4, PREEMPTED: 5}
STATE_OF = {w: s for s, w in WEIGHT.items()}
LABEL_W = 22
CURSOR = "cursor"  # the style-name suffix of a cell in the cursor's step column


def lane_label(rid: str, width: int = LABEL_W - 2) -> str:
    """The end of a request id (vLLM's ids differ at both ends; the end is what `why` needs)."""
    return rid if len(rid) <= width else "…" + rid[-(width - 1) :]


def lane_columns(lane: RequestLane, columns: Columns) -> list[tuple[str, str]]:
    """(state, reason code) of each column ("" where the request is not in its steps)."""
    start, span = columns.window.start, columns.window.span
    packed = np.zeros(span, dtype=np.int64)  # weight * 64 + code index: the max is the heaviest
    for s in lane.segments:
        lo, hi = max(s.first_row, start) - start, min(s.last_row + 1, start + span) - start
        if lo < hi:
            packed[lo:hi] = WEIGHT[s.state] * 64 + CODE_INDEX.get(s.code, CODE_INDEX["unknown"])
    lo = np.clip(columns.lo - start, 0, span - 1)
    best = np.maximum.reduceat(packed, lo) if span else np.zeros(columns.n, dtype=np.int64)
    # reduceat reduces [lo[c], lo[c+1]); with stretched columns lo repeats and gives packed[lo].
    repeat = np.append(lo[1:] <= lo[:-1], False)
    best = np.where(repeat, packed[lo], best)
    return [(STATE_OF[int(v) // 64], CODES[int(v) % 64]) if v else ("", "") for v in best.tolist()]


class LaneList(VirtualList):
    """One row per request: its id, then a glyph per column of the step window."""

    class Opened(Message):
        """Open the why of the request on this row (enter or a click)."""

        def __init__(self, row: int) -> None:
            super().__init__()
            self.row = row

    empty_text = empty.NO_REQUEST_IN_STEPS

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.lanes: RequestLanes | None = None
        self.columns: Columns | None = None
        self.step_cursor = 0  # the step row under the cursor
        self.steps: np.ndarray = np.zeros(0, dtype=np.int64)
        self._rows: dict[int, list[tuple[str, str]]] = {}

    def show(self, lanes: RequestLanes | None, window: Window, steps: np.ndarray, cursor: int) -> None:
        columns = Columns.of(window, max(1, self.size.width - LABEL_W))
        same = lanes is self.lanes and self.columns is not None and self.columns.window == window
        if not (same and self.columns is not None and columns.n == self.columns.n):
            self._rows = {}  # a lane's columns, computed when it scrolls into view
            self.columns = columns
        self.lanes, self.steps, self.step_cursor = lanes, steps, cursor
        self.set_count(len(lanes.lanes) if lanes is not None else 0)

    def on_resize(self, event: events.Resize) -> None:  # VirtualList's own handler runs too
        if self.columns is not None:
            self.show(self.lanes, self.columns.window, self.steps, self.step_cursor)

    @property
    def line_width(self) -> int:
        return max(1, self.size.width)

    def get_component_rich_style(
        self, *names: str, partial: bool = False, default: Style | None = None
    ) -> Style:
        # A lane cell's style name is its reason's colour, "#RRGGBB" (and "/cursor" in the cursor's column).
        name = names[0] if len(names) == 1 else ""
        if name.startswith("vlist--#"):
            hex_color, _, cursor = name[len("vlist--") :].partition("/")
            bg = super().get_component_rich_style("vlist--cursor").bgcolor if cursor else None
            return Style(color=hex_color, bgcolor=bg)
        return super().get_component_rich_style(*names, partial=partial, default=default)

    def header(self) -> list[Cell]:
        cols = self.columns
        if cols is None:
            return [(labels.LANES_REQUEST_COLUMN, "header")]
        chars = [" "] * cols.n
        free = 0
        for c in range(cols.n):  # step numbers where they fit, each at its first column
            if c > 0 and cols.lo[c] == cols.lo[c - 1]:
                continue
            row = int(cols.lo[c])
            text = str(int(self.steps[row])) if 0 <= row < len(self.steps) else ""
            if c >= free and c + len(text) <= cols.n:
                chars[c : c + len(text)] = list(text)
                free = c + len(text) + 1
        return [(f"{labels.LANES_REQUEST_COLUMN:<{LABEL_W}}" + "".join(chars), "header")]

    def row_cells(self, row: int) -> list[Cell]:
        assert self.lanes is not None and self.columns is not None
        lane = self.lanes.lanes[row]
        if row not in self._rows:
            self._rows[row] = lane_columns(lane, self.columns)
        first, last = self._cursor_columns()
        cells: list[Cell] = [(f"{lane_label(lane.id):<{LABEL_W}}", "muted")]
        for c, (state, code) in enumerate(self._rows[row]):
            mark = f"/{CURSOR}" if first <= c < last else ""
            cells.append((GLYPH.get(state, " "), f"{color(code)}{mark}" if state or mark else "row"))
        return cells

    def _cursor_columns(self) -> tuple[int, int]:
        cols = self.columns
        if cols is None:
            return 0, 0
        hit = np.flatnonzero((cols.lo <= self.step_cursor) & (self.step_cursor < cols.hi))
        return (int(hit[0]), int(hit[-1]) + 1) if len(hit) else (0, 0)

    def on_click(self, event: events.Click) -> None:
        event.prevent_default()  # not VirtualList's: a click also opens the lane's why
        offset = event.get_content_offset(self)  # inside the border: 0 is the header line
        if offset is not None and offset.y >= 1 and self.count:
            row = min(self.count - 1, int(self.scroll_y) + offset.y - 1)
            self._choose(row)
            self.post_message(self.Opened(row))

    def action_open(self) -> None:
        if self.count:
            self.post_message(self.Opened(self.cursor))


class StoryScreen(ModalScreen[None]):
    """A request's `why`: tracer.render.why.story_lines."""

    BINDINGS: ClassVar[list[BindingType]] = [Binding("escape,q,enter", "dismiss", keys.CLOSE)]
    DEFAULT_CSS = """
    StoryScreen { align: center middle; }
    StoryScreen > TextView {
        width: 90%; height: 80%; border: round $accent; background: $surface; padding: 0 1;
    }
    """

    def __init__(self, lines: list[str]) -> None:
        super().__init__()
        self.lines = lines

    def compose(self) -> ComposeResult:
        view = TextView("\n".join(escape(line) for line in self.lines), id="story")
        view.border_title = labels.WHY
        view.border_subtitle = labels.ESCAPE_CLOSES
        yield view

    def on_mount(self) -> None:
        self.query_one(TextView).focus()


class RequestsScreen(StepScreen):
    BINDINGS: ClassVar[list[BindingType]] = [
        # priority: the lane list's own enter would only move its cursor.
        Binding(
            "enter,w",
            "open",
            keys.WHY,
            priority=True,
            tooltip=keys.WHY_TIP,
        ),
        Binding("escape", "back", keys.BACK, tooltip=keys.BACK_TIP),
    ]
    DEFAULT_CSS = """
    RequestsScreen #top { height: auto; background: $panel; padding: 0 1; }
    RequestsScreen #note { color: $text-muted; }
    RequestsScreen #legend { height: auto; }
    RequestsScreen LaneList { height: 1fr; border: round $primary 40%; border-title-color: $text-muted; }
    RequestsScreen #readout { height: 1; padding: 0 1; }
    """

    def __init__(self, model: TraceModel, cursor: int = 0, window: Window | None = None) -> None:
        super().__init__()
        self.model = model
        self.cursor = cursor
        self.window = window or Window.fit(len(model))
        self.fit = window is None or self.window.span >= len(model)
        self.lanes: RequestLanes | None = None
        self.loaded = False

    def compose(self) -> ComposeResult:
        with Vertical(id="top"):
            yield Static(labels.requests_title(escape(self.model.name), mark=bold), id="title")
            yield Static(labels.READING_STEPS, id="note")
            yield Static(self._legend([]), id="legend")
        lanes = LaneList(id="lanes")
        lanes.border_title = labels.LANES_TITLE
        lanes.border_subtitle = labels.LANES_KEYS
        yield lanes
        yield Static("", id="readout")
        yield Footer()

    def on_mount(self) -> None:
        self.query_one(LaneList).focus()
        self.set_cursor(self.cursor)

    @property
    def total(self) -> int:
        return len(self.model)

    # -- the lanes, read off the UI thread ----------------------------------------------------
    def apply_view(self) -> None:
        if self.window.span > MAX_WINDOW:  # the lanes read at most MAX_WINDOW steps: zoom to them
            self.fit = False
            self.window = Window(self.cursor - MAX_WINDOW // 2, MAX_WINDOW).clamp(self.total)
        lanes = self.lanes
        if lanes is None or (lanes.start, lanes.end) != (self.window.start, self.window.end):
            self.read(self.window)
        self._draw()

    @work(thread=True, exclusive=True, group="lanes")
    def read(self, window: Window) -> None:
        lanes = self.model.request_lanes(window.start, window.end, max_lanes=MAX_LANES)
        self.app.call_from_thread(self._ready, lanes)

    def _ready(self, lanes: RequestLanes) -> None:
        if (lanes.start, lanes.end) != (self.window.start, self.window.end):
            return  # the window moved on: its own read is coming
        self.lanes = lanes
        self.loaded = True
        note = lanes_note(lanes)
        if self.window.span < self.total:
            note += f"; {labels.of_the_run(self.total, MAX_WINDOW)}"
        self.query_one("#note", Static).update(escape(note))
        self.query_one("#legend", Static).update(self._legend(lanes.codes()))
        self._draw()

    def _draw(self) -> None:
        lanes = self.query_one(LaneList)
        if self.lanes is not None:
            lanes.show(self.lanes, self.window, self.model.trace.columns["step"], self.cursor)
        self.update_status()

    @staticmethod
    def _legend(codes: list[str]) -> str:
        states = " ".join(f"{GLYPH[s]} {s}" for s in (SCHEDULED, CLIPPED, UNSCHEDULED, WAITING, PREEMPTED))
        names = {c: state_label(SCHEDULED, c) if c == "none" else label(c) for c in codes}
        reasons = "  ".join(f"[{color(c)}]■[/] {escape(names[c])}" for c in codes)
        return f"[$text-muted]{labels.GLYPH}[/] {states}\n[$text-muted]{labels.COLOUR}[/] {reasons or '–'}"

    def update_status(self) -> None:
        step = int(self.model.trace.columns["step"][self.cursor]) if self.total else 0
        lanes, row = self.lanes, self.query_one(LaneList).cursor
        text = f"{self.replay_status()} · {labels.at_step(step)}"
        if lanes is not None and lanes.lanes:
            lane = lanes.lanes[min(row, len(lanes.lanes) - 1)]
            seg = lane.at(self.cursor)
            where = segment_text(seg) if seg is not None else empty.NOT_IN_STEP
            text += f" · [b]{escape(lane.id)}[/b]: {escape(where)}"
        self.query_one("#readout", Static).update(text)

    # -- keys and clicks ------------------------------------------------------------------------
    @on(VirtualList.Chosen, "#lanes")
    def _lane_chosen(self, message: VirtualList.Chosen) -> None:
        self.query_one(LaneList).set_cursor(message.row)
        self.update_status()

    @on(LaneList.Opened)
    def _lane_opened(self, message: LaneList.Opened) -> None:
        self.open_why(message.row)

    def action_open(self) -> None:
        self.open_why(self.query_one(LaneList).cursor)

    def open_why(self, row: int) -> None:
        if self.lanes is None or not 0 <= row < len(self.lanes.lanes):
            return
        self.story(self.lanes.lanes[row].id)

    @work(thread=True, exclusive=True, group="story")
    def story(self, request_id: str) -> None:
        """A request's story may build the trace's request index (tracer.analysis.request_story):
        off the UI thread."""
        story = self.model.request_story(request_id)
        lines = list(story_lines(story)) if story is not None else [no_story_line(request_id)]
        self.app.call_from_thread(self.app.push_screen, StoryScreen(lines))

    def action_back(self) -> None:
        self.dismiss(self.cursor)  # type: ignore[arg-type]

    def row_of_step(self, step: int) -> int | None:
        return self.model.row_of(step)

    def commands(self) -> list[Command]:
        return [
            (*keys.WHY_CMD, "open"),
            (*keys.BACK_CMD, "back"),
            *super().commands(),
        ]
