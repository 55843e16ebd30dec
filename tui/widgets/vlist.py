"""A virtual list: a fixed header line over rows drawn only when visible.

The row count is a number, not a list of widgets or strings, so a table over a
million steps costs what the visible rows cost. Subclasses format one row.
"""

from __future__ import annotations

from typing import Any, ClassVar

from rich.segment import Segment
from rich.style import Style
from textual import events
from textual.binding import Binding, BindingType
from textual.geometry import Size
from textual.message import Message
from textual.scroll_view import ScrollView
from textual.strip import Strip

from tracer.render import empty, keys

# A cell: (text, component style name without the "vlist--" prefix).
Cell = tuple[str, str]


class VirtualList(ScrollView, can_focus=True):
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("up", "move(-1)", keys.UP, show=False),
        Binding("down", "move(1)", keys.DOWN, show=False),
        Binding("pageup", "page(-1)", keys.PAGE_UP, show=False),
        Binding("pagedown", "page(1)", keys.PAGE_DOWN, show=False),
        Binding("home", "edge(0)", keys.FIRST, show=False),
        Binding("end", "edge(1)", keys.LAST, show=False),
        Binding("enter", "choose", keys.GO_TO, show=False),
    ]
    COMPONENT_CLASSES: ClassVar[set[str]] = {
        "vlist--header",
        "vlist--row",
        "vlist--cursor",
        "vlist--muted",
        "vlist--error",
        "vlist--warning",
        "vlist--info",
        "vlist--withheld",
        "vlist--more",
        "vlist--less",
        "vlist--empty",
    }
    DEFAULT_CSS = """
    VirtualList { background: $surface; }
    VirtualList > .vlist--header { color: $text-muted; text-style: bold; background: $panel; }
    VirtualList > .vlist--row { color: $text; }
    VirtualList > .vlist--cursor { background: $foreground 15%; }
    VirtualList:focus > .vlist--cursor { background: $primary 45%; }
    VirtualList > .vlist--muted { color: $text-muted; }
    VirtualList > .vlist--error { color: $error; }
    VirtualList > .vlist--warning { color: $warning; }
    VirtualList > .vlist--info { color: $text-muted; }
    VirtualList > .vlist--withheld { color: $error; text-style: bold; }
    VirtualList > .vlist--more { color: $success; }
    VirtualList > .vlist--less { color: $error; }
    VirtualList > .vlist--empty { color: $text-muted; text-style: italic; }
    """

    class Chosen(Message):
        """The user moved to (or chose) a row."""

        def __init__(self, source: VirtualList, row: int) -> None:
            super().__init__()
            self.source = source
            self.row = row

        @property
        def control(self) -> VirtualList:
            return self.source

    empty_text = empty.NOTHING

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.count = 0
        self.cursor = 0
        self._scroll_pending = False

    # -- what a subclass provides -----------------------------------------------------
    def header(self) -> list[Cell]:
        return []

    def row_cells(self, row: int) -> list[Cell]:
        return []

    @property
    def line_width(self) -> int:
        return sum(len(text) for text, _ in self.header())

    # -- state ------------------------------------------------------------------------
    def set_count(self, count: int) -> None:
        self.count = count
        self.cursor = min(self.cursor, max(0, count - 1))
        self.virtual_size = Size(self.line_width, count + 1)
        self.refresh()

    def set_cursor(self, row: int, *, scroll: bool = True) -> None:
        row = max(0, min(row, self.count - 1)) if self.count else 0
        if row != self.cursor:
            self.cursor = row
            self.refresh()
        if scroll:
            self.scroll_to_row(row)

    def scroll_to_row(self, row: int) -> None:
        if not self.size.height:  # hidden (an inactive tab): scroll when it is shown
            self._scroll_pending = True
            return
        if not self._scroll_into_view(row):
            # A new row count reaches the scroll limits only at the next layout: try again then.
            self.call_after_refresh(self._scroll_into_view, row)

    def _scroll_into_view(self, row: int) -> bool:
        """Scroll so `row` is visible; False if the scroll limits do not allow it yet."""
        visible = max(1, self.size.height - 1)
        top = int(self.scroll_y)
        if row < top:
            self.scroll_to(y=row, animate=False, force=True)
        elif row >= top + visible:
            y = row - visible + 1
            if y > self.max_scroll_y:
                return False
            self.scroll_to(y=y, animate=False, force=True)
        return True

    def on_resize(self, event: events.Resize) -> None:
        if self._scroll_pending and self.size.height:
            self._scroll_pending = False
            self.scroll_to_row(self.cursor)

    def _choose(self, row: int) -> None:
        if self.count:
            self.post_message(self.Chosen(self, max(0, min(row, self.count - 1))))

    def action_move(self, delta: int) -> None:
        self._choose(self.cursor + delta)

    def action_page(self, direction: int) -> None:
        self._choose(self.cursor + direction * max(1, self.size.height - 2))

    def action_edge(self, end: int) -> None:
        self._choose(self.count - 1 if end else 0)

    def action_choose(self) -> None:
        self._choose(self.cursor)

    def on_click(self, event: events.Click) -> None:
        if event.y >= 1:
            self._choose(int(self.scroll_y) + event.y - 1)

    # -- rendering ----------------------------------------------------------------------
    def render_line(self, y: int) -> Strip:
        width = self.size.width
        scroll_x = int(self.scroll_x)
        base = self.get_component_rich_style("vlist--row")
        if y == 0:
            cells = self.header()
            style = self.get_component_rich_style("vlist--header")
            return self._strip(cells, scroll_x, width, lambda _name: style, style)
        if not self.count:
            if y == 1:
                empty = self.get_component_rich_style("vlist--empty")
                return self._strip([(f" {self.empty_text}", "empty")], 0, width, lambda _n: empty, base)
            return Strip.blank(width, base)
        row = int(self.scroll_y) + y - 1
        if row >= self.count:
            return Strip.blank(width, base)
        cells = self.row_cells(row)
        if row == self.cursor:
            bg = Style(bgcolor=self.get_component_rich_style("vlist--cursor").bgcolor)

            def styled(name: str) -> Style:
                return self.get_component_rich_style(f"vlist--{name}") + bg

            return self._strip(cells, scroll_x, width, styled, base + bg)
        return self._strip(
            cells, scroll_x, width, lambda name: self.get_component_rich_style(f"vlist--{name}"), base
        )

    @staticmethod
    def _strip(cells: list[Cell], scroll_x: int, width: int, style: Any, fill: Style) -> Strip:
        segments = [Segment(text, style(name)) for text, name in cells]
        return Strip(segments).crop_extend(scroll_x, scroll_x + width, fill)
