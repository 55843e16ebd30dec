"""A one-line question (a request id, a step number) as a small modal."""

from __future__ import annotations

from typing import ClassVar

from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import Input, Label

from tracer.render import keys


class PromptScreen(ModalScreen[str | None]):
    BINDINGS: ClassVar[list[BindingType]] = [Binding("escape", "cancel", keys.CANCEL)]
    DEFAULT_CSS = """
    PromptScreen { align: center middle; }
    PromptScreen > Vertical {
        width: 64; height: auto; padding: 1 2;
        border: round $accent; background: $surface;
    }
    PromptScreen Label { color: $text-muted; }
    """

    def __init__(self, title: str, placeholder: str, value: str = "") -> None:
        super().__init__()
        self.title_text = title
        self.placeholder = placeholder
        self.value = value

    def compose(self) -> ComposeResult:
        with Vertical() as box:
            box.border_title = self.title_text
            yield Input(value=self.value, placeholder=self.placeholder, id="prompt-input")
            yield Label(keys.PROMPT_KEYS)

    def on_mount(self) -> None:
        self.query_one(Input).cursor_blink = False  # no blinking: snapshots stay stable

    def on_input_submitted(self, event: Input.Submitted) -> None:
        self.dismiss(event.value.strip() or None)

    def action_cancel(self) -> None:
        self.dismiss(None)
