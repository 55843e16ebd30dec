"""Markup text drawn with the Line API, for panels that change on every cursor move.

A Static that changes height makes the screen lay out again, which costs a
second frame per key press; here new text only changes this widget's own
virtual size, so a cursor move repaints once.
"""

from __future__ import annotations

from typing import Any

from textual import events
from textual.content import Content
from textual.geometry import Size
from textual.scroll_view import ScrollView
from textual.strip import Strip
from textual.visual import Visual


class TextView(ScrollView, can_focus=True):
    DEFAULT_CSS = """
    TextView { overflow-x: hidden; padding: 0 1; }
    """

    def __init__(self, text: str | Content = "", *, grow_only: bool = True, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._grow = grow_only
        self._content = Content.from_markup(text) if isinstance(text, str) else text
        self._strips: list[Strip] = []
        self._wrapped_at = -1

    @property
    def plain(self) -> str:
        return self._content.plain

    def update(self, text: str | Content) -> None:
        self._content = Content.from_markup(text) if isinstance(text, str) else text
        self._wrapped_at = -1
        self._wrap()
        self.refresh()

    def _wrap(self) -> None:
        width = self.scrollable_content_region.width
        if width <= 0 or width == self._wrapped_at:
            return
        self._strips = Visual.to_strips(self, self._content, width, None, self.visual_style)
        self._wrapped_at = width
        # The virtual height only grows: a size change means a layout pass and a second frame.
        size = Size(width, max(len(self._strips), self.virtual_size.height if self._grow else 0))
        if size != self.virtual_size:
            self.virtual_size = size

    def on_resize(self, event: events.Resize) -> None:
        self._wrap()  # re-wraps only if the width changed

    def render_line(self, y: int) -> Strip:
        self._wrap()
        index = y + int(self.scroll_y)
        width = self.scrollable_content_region.width
        if 0 <= index < len(self._strips):
            return self._strips[index].crop_extend(0, width, self.rich_style)
        return Strip.blank(width, self.rich_style)
