"""The `?` screen: every key binding of the screen below it, generated from the bindings themselves."""

from __future__ import annotations

from typing import ClassVar

from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import VerticalScroll
from textual.content import Content
from textual.screen import ModalScreen, Screen
from textual.widgets import Static

from tracer.render import keys
from tui.widgets.vlist import VirtualList


def _bindings(classes: list[type]) -> list[Binding]:
    out: list[Binding] = []
    seen: set[str] = set()
    for cls in classes:
        for binding in getattr(cls, "BINDINGS", []):
            if isinstance(binding, Binding) and binding.key not in seen:
                seen.add(binding.key)
                out.append(binding)
    return out


def help_sections(screen: Screen) -> list[tuple[str, list[Binding]]]:
    """(section title, bindings) for the screen, its tables and the app."""
    screen_classes = [c for c in type(screen).__mro__ if c.__dict__.get("BINDINGS")]
    app_classes = [c for c in type(screen.app).__mro__ if "SchedscopeApp" in c.__name__]
    return [
        (keys.THIS_SCREEN, _bindings(screen_classes)),
        (keys.TABLES, _bindings([VirtualList])),
        (keys.EVERYWHERE, _bindings(app_classes)),
    ]


class HelpScreen(ModalScreen[None]):
    BINDINGS: ClassVar[list[BindingType]] = [Binding("escape,q,question_mark", "dismiss", keys.CLOSE)]
    DEFAULT_CSS = """
    HelpScreen { align: center middle; }
    HelpScreen > VerticalScroll {
        width: 84; max-height: 90%; height: auto; padding: 0 2;
        border: round $accent; background: $surface;
    }
    """

    def __init__(self, under: Screen, intro: str) -> None:
        super().__init__()
        self.under = under
        self.intro = intro

    def compose(self) -> ComposeResult:
        parts: list[Content] = [Content.from_markup(self.intro), Content("")]
        for title, bindings in help_sections(self.under):
            parts.append(Content.styled(title, style="bold $accent"))
            for b in bindings:
                shown = ", ".join(self.app.get_key_display(Binding(k, "")) for k in b.key.split(","))
                what = b.tooltip or b.description or b.action
                parts.append(Content.assemble("  ", (f"{shown:<22}", "bold"), " ", what))
            parts.append(Content(""))
        parts.append(Content.styled(keys.HELP_CLOSING, style="$text-muted"))
        with VerticalScroll() as box:
            box.border_title = keys.HELP_TITLE
            yield Static(Content("\n").join(parts), id="help-text")
