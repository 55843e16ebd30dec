"""The timeline: every lane of the run, one terminal column per bin of steps.

Drawn with the Line API from NumPy reductions (tui.bins), so a million-step
trace costs one pass over its arrays per zoom or pan, and moving the cursor
only restyles the cached cells.
"""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np
from rich.segment import Segment
from rich.style import Style
from textual import events
from textual.message import Message
from textual.strip import Strip
from textual.widget import Widget

from tracer.render import labels
from tui.bins import Columns, Window, eighths
from tui.data import TraceModel
from tui.lanes import Lane, build_lanes

BLOCKS = " ▁▂▃▄▅▆▇█"
LABEL_W = 9
VALUE_W = 16

# A cell: (text, foreground style name, background style name or "").
Cell = tuple[str, str, str]


class Timeline(Widget):
    COMPONENT_CLASSES: ClassVar[set[str]] = {
        "timeline--label",
        "timeline--value",
        "timeline--axis",
        "timeline--cursor",
        "timeline--target",
        "timeline--reserved",
        "timeline--withheld",
        "timeline--query",
        "timeline--buffer",
        "timeline--running",
        "timeline--waiting",
        "timeline--error",
        "timeline--warning",
        "timeline--info",
        "timeline--preempt",
        "timeline--note",
        "timeline--peak",
    }
    DEFAULT_CSS = """
    Timeline { height: auto; }
    Timeline > .timeline--label { color: $text-muted; }
    Timeline > .timeline--value { color: $text; }
    Timeline > .timeline--axis { color: $text-muted; }
    Timeline > .timeline--cursor { background: $foreground 18%; }
    Timeline > .timeline--target { color: $primary; }
    Timeline > .timeline--reserved { color: $warning; }
    Timeline > .timeline--withheld { color: $error; text-style: bold; }
    Timeline > .timeline--query { color: $accent; }
    Timeline > .timeline--buffer { color: $secondary; }
    Timeline > .timeline--running { color: $success; }
    Timeline > .timeline--waiting { color: $foreground 60%; }
    Timeline > .timeline--error { color: $error; }
    Timeline > .timeline--warning { color: $warning; }
    Timeline > .timeline--info { color: $text-muted; }
    Timeline > .timeline--preempt { color: $secondary; text-style: bold; }
    Timeline > .timeline--note { color: $text-muted; text-style: italic; }
    Timeline > .timeline--peak { color: $foreground 30%; }
    """

    class Clicked(Message):
        """A click on the chart: move the cursor to the step under it."""

        def __init__(self, row: int) -> None:
            super().__init__()
            self.row = row

    def __init__(self, *, compact: bool = False, label_width: int = LABEL_W, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.compact = compact
        self.label_width = label_width
        self.model: TraceModel | None = None
        self.steps: np.ndarray | None = None  # the step number of each row; None: nothing shown
        self.total = 0
        self.window = Window(0, 1)
        self.cursor = 0
        self._lanes: list[Lane] = []
        self._cells_key: tuple[Any, ...] | None = None
        self._cells: list[list[Cell]] = []
        self._columns: Columns | None = None
        self._strips_key: tuple[Any, ...] | None = None
        self._strips: list[Strip] = []

    # -- state set by the screen --------------------------------------------------------
    def show(self, model: TraceModel | None, total: int | None = None) -> None:
        self.model = model
        lanes = build_lanes(model, compact=self.compact) if model is not None else []
        steps = model.trace.columns["step"] if model is not None else None
        self.show_lanes(lanes, steps, total if total is not None else (len(model) if model else 0))

    def show_lanes(self, lanes: list[Lane], steps: np.ndarray | None, total: int) -> None:
        """Draw these lanes over rows [0, total); `steps` numbers the rows on the axis."""
        self.steps = steps
        self.total = total
        self._lanes = lanes
        self._cells_key = self._strips_key = None
        self.refresh(layout=True)

    def set_view(self, window: Window, cursor: int) -> None:
        if window != self.window or cursor != self.cursor:
            self.window, self.cursor = window, cursor
            self.refresh()

    @property
    def chart_width(self) -> int:
        return max(1, self.size.width - self.label_width - VALUE_W)

    def get_content_height(self, container: Any, viewport: Any, width: int) -> int:
        return sum(lane.height for lane in self._lanes) + 1 if self._lanes else 1

    def on_click(self, event: events.Click) -> None:
        offset = event.get_content_offset(self)
        columns = self._columns
        if offset is None or columns is None or not self._lanes:
            return
        c = offset.x - self.label_width
        if 0 <= c < columns.n:
            self.post_message(self.Clicked(min(int(columns.lo[c]), max(0, self.total - 1))))

    # -- rendering -----------------------------------------------------------------------
    def render_line(self, y: int) -> Strip:
        strips = self._build_strips()
        return strips[y] if y < len(strips) else Strip.blank(self.size.width, self.rich_style)

    def _build_strips(self) -> list[Strip]:
        width = self.chart_width
        key = (id(self._lanes), self.total, self.window, width, self.cursor, self.app.theme, self.size.width)
        if key == self._strips_key:
            return self._strips
        cells = self._build_cells(width)
        columns = self._columns
        first, last = columns.of_row(self.cursor) if columns is not None else (0, 0)
        style = self._style
        strips: list[Strip] = []
        line_no = 0
        for lane in self._lanes:
            for level in range(lane.height):
                label = lane.name if level == 0 else ""
                value = lane.readout(self.cursor) if level == 0 and self.steps is not None else ""
                strips.append(self._strip(label, cells[line_no], value, first, last, style))
                line_no += 1
        if self._lanes:
            value = labels.at_step(self._step_at(self.cursor)) if self.steps is not None else ""
            strips.append(self._strip(labels.LANE_STEP, cells[line_no], value, first, last, style))
        self._strips_key, self._strips = key, strips
        return strips

    def _style(self, name: str) -> Style:
        return self.get_component_rich_style(f"timeline--{name}")

    def _strip(self, label: str, cells: list[Cell], value: str, first: int, last: int, style: Any) -> Strip:
        w = self.label_width - 1
        segments = [Segment(f"{label:<{w}.{w}} ", style("label"))]
        cursor_bg = style("cursor").bgcolor
        run_text: list[str] = []
        run_style: Style | None = None
        for c, (text, fg, bg) in enumerate(cells):
            s = style(fg)
            if bg:
                s = s + Style(bgcolor=style(bg).color)
            if first <= c < last and not bg:  # a two-colour cell keeps its own background
                s = s + Style(bgcolor=cursor_bg)
            if s != run_style and run_text:
                segments.append(Segment("".join(run_text), run_style))
                run_text = []
            run_style = s
            run_text.append(text)
        if run_text:
            segments.append(Segment("".join(run_text), run_style))
        segments.append(Segment(f" {value:>{VALUE_W - 1}.{VALUE_W - 1}}", style("value")))
        return Strip(segments).adjust_cell_length(self.size.width, self.rich_style)

    def _step_at(self, row: int) -> int:
        steps = self.steps if self.steps is not None else np.zeros(0, np.int64)
        return int(steps[row]) if 0 <= row < len(steps) else row + 1

    def _build_cells(self, width: int) -> list[list[Cell]]:
        key = (id(self._lanes), self.total, self.window, width)
        if key == self._cells_key:
            return self._cells
        columns = Columns.of(self.window, width)
        lines: list[list[Cell]] = []
        for lane in self._lanes:
            if lane.kind == "note":
                lines.append([(ch, "note", "") for ch in f"{lane.note:<{width}.{width}}"])
            elif lane.kind == "marks":
                lines.append(_marks(lane, columns))
            else:
                lines.extend(_bars(lane, columns))
        if self._lanes:
            lines.append(self._axis(columns))
        self._cells_key, self._cells, self._columns = key, lines, columns
        return lines

    def _axis(self, columns: Columns) -> list[Cell]:
        chars = [" "] * columns.n
        if columns.stretched:
            places = [(row, (c0 + c1) // 2) for row, c0, c1 in columns.spans()]
        else:
            places = [(int(columns.lo[c]), c) for c in range(0, columns.n, 1)]
        free = 0
        for row, c in places:
            text = f"{self._step_at(row)}"
            start = c - len(text) // 2 if columns.stretched else c
            if start < free or start + len(text) > columns.n:
                continue
            chars[start : start + len(text)] = list(text)
            free = start + len(text) + 2
        return [(ch, "axis", "") for ch in chars]


def _gaps(columns: Columns) -> np.ndarray:
    """Stretched steps wider than two columns keep their last column blank, so bars separate."""
    gap = np.zeros(columns.n, dtype=bool)
    if columns.stretched:
        for _row, c0, c1 in columns.spans():
            if c1 - c0 > 2:
                gap[c1 - 1] = True
    return gap


def _bars(lane: Lane, columns: Columns) -> list[list[Cell]]:
    assert lane.values is not None
    h = lane.height
    upper = lane.top_style
    scale = columns.max(lane.scale) if isinstance(lane.scale, np.ndarray) else lane.scale
    low = eighths(columns.max(lane.values), scale, h)
    if lane.kind == "stack" and lane.top is not None:
        # Zoomed out, both parts are means; the upper part (reserved draft slots) always
        # shows, as at least the top eighth, wherever any step in the column had one.
        level = columns.max if columns.stretched else columns.mean
        low = eighths(level(lane.values), scale, h)
        extra = columns.max(lane.top - lane.values) > 0
        top = np.maximum(eighths(level(lane.top), scale, h), np.where(extra, low + 1, low))
        top = np.minimum(top, h * 8)
        low = np.where(extra, np.minimum(low, top - 1), low)
    elif not columns.stretched:
        # Zoomed out: the mean as the bar, and the peak above it in a fainter colour, so a
        # column of many steps shows both the typical level and the worst step.
        top = eighths(columns.max(lane.values), scale, h)
        low = np.minimum(eighths(columns.mean(lane.values), scale, h), top)
        upper = "peak"
    else:
        top = low
    gap = _gaps(columns)
    lines: list[list[Cell]] = []
    for level in range(h - 1, -1, -1):
        a = np.clip(low - level * 8, 0, 8)
        t = np.clip(top - level * 8, 0, 8)
        row: list[Cell] = []
        for c in range(columns.n):
            ac, tc = int(a[c]), int(t[c])
            if gap[c] or tc == 0:
                row.append((" ", lane.style, ""))
            elif ac == 8 or ac == tc:
                row.append((BLOCKS[ac], lane.style, ""))
            elif ac == 0 or tc < 8:  # the upper part tops this cell: draw it in its own colour
                row.append((BLOCKS[tc], upper, ""))
            else:  # a full cell split between both parts: lower part on the upper part's colour
                row.append((BLOCKS[ac], lane.style, upper))
        lines.append(row)
    return lines


def _marks(lane: Lane, columns: Columns) -> list[Cell]:
    present = [(columns.max(np.asarray(m.rows)) > 0, m) for m in lane.marks]
    row: list[Cell] = [(" ", "label", "")] * columns.n
    if columns.stretched:
        # One mark per step, centred; its figure instead when the step is wide enough.
        for step_row, c0, c1 in columns.spans():
            for mask, mark in present:
                if mask[c0]:
                    text = mark.glyph
                    if lane.numbers is not None and mark is lane.marks[0]:
                        figure = f"{int(lane.numbers[step_row])}"
                        text = figure if len(figure) <= max(1, c1 - c0 - 1) else mark.glyph
                    mid = c0 + max(0, (c1 - c0 - 1 - len(text)) // 2)
                    for i, ch in enumerate(text):
                        row[mid + i] = (ch, mark.style, "")
                    break
        return row
    for c in range(columns.n):
        for mask, mark in present:
            if mask[c]:
                row[c] = (mark.glyph, mark.style, "")
                break
    return row
