"""The viewers' fixed words: titles, tab and button labels, column headers, hints under a
panel, status words, chart titles, axis and legend names, tooltips, and the words of
`schedscope tui` and `schedscope web` themselves. The TUI's keys are worded in `render.keys`.

The views lay these out (markup, style, columns, colour) without rewording them. A phrase with
a number or a name in it is a function; the view styles its parts through `mark` where a part
is bold, as `render.empty.no_request` does.
"""

from __future__ import annotations

from collections.abc import Callable


def _plain(text: str) -> str:
    return text


# == the TUI ===================================================================================
LENIENT_HINT = "--lenient skips malformed lines."  # under an error a lenient read would skip
LOADING = "loading…"
OPENING = "opening…"
COMPARING = "comparing…"

# -- replay, in each screen's status line ------------------------------------------------------
PLAYING = "▶ playing"
PAUSED = "‖ paused"


def per_second(speed: int) -> str:
    return f"{speed} steps/s"


# -- the main screen ---------------------------------------------------------------------------
TIMELINE = "timeline"
TIMELINE_KEYS = "←/→ step · +/- zoom · [ ] pan · 0 fit · n/N flags"
INSPECTOR_TAB = "Inspector"
FLAGS_TAB = "Flags"
REQUEST_TAB = "Request"
LIFE_HINT = "Press [b]/[/b] and type a request id to see its lifetime."  # markup: the key is bold
TAIL_ON = "tail on"
TAIL_OFF = "tail off (t)"
ALL_KINDS = "all kinds"


def new_steps(count: int) -> str:
    """Steps come in since the user moved off the tail."""
    return f"+{count} new"


def flag_filter(shown: str, choices: str, mark: Callable[[str], str] = _plain) -> str:
    """The flag list's filter line: the kind shown (`mark`ed), the kinds `k` cycles through."""
    return f"showing {mark(shown)} · k cycles: {choices} · enter jumps"


# -- the compare screen ------------------------------------------------------------------------
HEADLINE = "Headline"
TOTALS = "Totals"


def compare_title(a: str, b: str, mark: Callable[[str], str] = _plain) -> str:
    """The compare screen's title: its two traces' names (`mark`ed)."""
    return f"{mark('Compare')}  A {mark(a)}  vs  B {mark(b)}"


def side_title(side: str, name: str, policy: str, vllm: str, mark: Callable[[str], str] = _plain) -> str:
    """One side's heading in the compare screen: the side (A, B), its trace, policy and vLLM."""
    return f"{mark(side)} {name} · policy {mark(policy)} · vLLM {vllm}"


def side_step(side: str, step: int) -> str:
    """Over one side's budget arithmetic: the side and the step it is."""
    return f"{side} step {step}"


# -- the engines screen ------------------------------------------------------------------------
ENGINES_TIMELINE = "target tokens vs target budget, per engine"
ENGINES_KEYS = "e/E engine · o open · ←/→ step · +/- zoom · [ ] pan"


def engines_title(count: int, mark: Callable[[str], str] = _plain) -> str:
    return f"{mark('Engines')} · {count} traces of one run"


def selected(label: str) -> str:
    """The engine whose lane is selected, in the engines screen's status line."""
    return f"selected {label}"


# -- the requests view and a request's why -----------------------------------------------------
WHY = "why"
ESCAPE_CLOSES = "escape closes"
READING_STEPS = "reading the steps…"
LANES_TITLE = "one lane per request · glyph: state · colour: reason"
LANES_KEYS = "↑/↓ request · enter/click why · ←/→ step · +/- zoom · [ ] pan · esc back"
GLYPH = "glyph:"
COLOUR = "colour:"


def requests_title(name: str, mark: Callable[[str], str] = _plain) -> str:
    return f"{mark('Requests')} · {name}"


def of_the_run(total: int, most: int) -> str:
    """After the lanes' note, when they show part of the run: how to see more of it."""
    return f"of the run's {total} steps ([ ] pan, - zooms out to at most {most})"


def at_step(step: int) -> str:
    """The step at the cursor, in a status line."""
    return f"step {step}"


# -- small screens -----------------------------------------------------------------------------
CANNOT_OPEN = "schedscope could not open this trace"
PRESS_Q = "Press q to quit."
