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


# -- the run line over the timeline, the step inspector and a request's lifetime ---------------
def policy_part(name: str, mark: Callable[[str], str] = _plain) -> str:
    return f"policy {mark(name)}"


def regime_part(name: str) -> str:
    return f"regime {name}"


def vllm_part(version: str) -> str:
    return f"vLLM {version}"


def step_title(step: object) -> str:
    return f"Step {step}"


def request_title(request_id: str) -> str:
    return f"Request {request_id}"


BUDGET = "Budget"
FLAGS = "Flags"
WHY_HEADING = "Why"
REQUESTS_HEADING = "Requests"
RUNNING_NOT_SCHEDULED = "Running, not scheduled"
WAITING_NOT_ADMITTED = "Waiting, not admitted"
ADMITTED = "admitted"  # the inspector's name for a new request's row
PREEMPTED = "preempted"
FINISHED = "finished"
UNSCHEDULED = "unscheduled"
WAITING = "waiting"
# The inspector's request columns.
COL_TOKENS, COL_SPEC, COL_QUERY, COL_DEMAND, COL_REASON, COL_ID = (
    "tokens",
    "spec",
    "query",
    "demand",
    "reason",
    "id",
)


def scheduled_count(count: int) -> str:
    return f"({count} scheduled)"


def more(count: int, unlisted: bool = False) -> str:
    """Rows past the ones listed (`unlisted`: some the trace did not list at all)."""
    return f"… {count} more" + (" (not listed in the trace)" if unlisted else "")


# -- the step table, the flag list and the compare delta table ---------------------------------
# The step table's columns, abbreviated to fit half the screen ("whld": withheld).
STEP_COLUMNS = ("step", "target", "input", "+rsv", "query", "whld", "sched", "adm", "pre", "fin", "wait")
STEP_FLAGS_COLUMN = "flags"
FLAG_COLUMNS = ("step", "kind", "withheld", "what to do")
DELTA_COLUMNS = (
    "step",
    "target A",
    "target B",
    "Δ",
    "query Δ",
    "admit Δ",
    "preempt Δ",
    "withheld A",
    "withheld B",
    "flags A",
    "flags B",
)

# -- the timeline's lanes ----------------------------------------------------------------------
LANE_TARGET, LANE_INPUT, LANE_WITHHELD, LANE_QUERY = "target", "input", "withheld", "query"
LANE_BUFFER_TARGET, LANE_BUFFER_DRAFT, LANE_BUFFERS = "buf tgt", "buf drf", "buffers"
LANE_RUNNING, LANE_WAITING, LANE_FLAGS, LANE_PREEMPT, LANE_STEP = (
    "running",
    "waiting",
    "flags",
    "preempt",
    "step",
)


def reserved_readout(used: str, reserved: str) -> str:
    """The input lane's readout: rows used, and the draft slots reserved on top."""
    return f"{used} +{reserved} rsv"


def tokens_readout(tokens: object, withheld: bool = False) -> str:
    return f"{tokens} tok withheld" if withheld else f"{tokens} tok"


def of_readout(value: str, total: object) -> str:
    return f"{value} of {total}"


def flags_readout(count: object) -> str:
    return f"{count} flag(s)"


# == the viewers' commands: `schedscope tui` ===================================================
TUI_HELP = "the terminal UI: timeline, step table, inspector, flags, replay, follow, compare"
TUI_DESCRIPTION = (
    "Open a trace in the terminal UI; two traces open side by side (compare); "
    "--engines shows the engines of a data-parallel run as lanes; "
    "--follow tails a trace that a live server is still writing. Press ? in the UI for every key."
)
TUI_COMPARE_HELP = "compare TRACE and TRACE_B side by side"


def error(problem: object) -> str:
    """A viewer command's error line, on stderr."""
    return f"schedscope: error: {problem}"


def needs_textual(problem: object) -> str:
    return error(f"the terminal UI needs textual ({problem}): pip install 'schedscope[tui]'")
