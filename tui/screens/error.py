"""A clear message, instead of a traceback, when a trace cannot be opened."""

from __future__ import annotations

from typing import ClassVar

from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Vertical
from textual.markup import escape
from textual.screen import Screen
from textual.widgets import Static

from tracer.render import keys, labels


class ErrorScreen(Screen[None]):
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("q,escape,enter", "app.exit_error", keys.QUIT),
    ]
    DEFAULT_CSS = """
    ErrorScreen { align: center middle; }
    ErrorScreen > Vertical {
        width: 90%; max-width: 100; height: auto; padding: 1 2;
        border: heavy $error; background: $surface;
    }
    ErrorScreen #error-title { color: $error; text-style: bold; }
    ErrorScreen #error-hint { color: $text-muted; margin-top: 1; }
    """

    def __init__(self, message: str, hint: str = "") -> None:
        super().__init__()
        self.message = message
        self.hint = hint

    def compose(self) -> ComposeResult:
        with Vertical():
            yield Static(labels.CANNOT_OPEN, id="error-title")
            yield Static(escape(self.message), id="error-message")
            yield Static(escape(self.hint) + ("\n" if self.hint else "") + labels.PRESS_Q, id="error-hint")
