"""The viewers' fixed words: titles, tab and button labels, column headers, hints under a
panel, status words, chart titles, axis and legend names, tooltips, and the words of
`schedscope tui` and `schedscope web` themselves. The TUI's keys are worded in `render.keys`.

The views lay these out (markup, style, columns, colour) without rewording them. A phrase with
a number or a name in it is a function; the view styles its parts through `mark` where a part
is bold, as `render.empty.no_request` does.
"""

from __future__ import annotations

import json
from collections.abc import Callable

from tracer.render.command_lines import error_line


def _plain(text: str) -> str:
    return text


APP_NAME = "schedscope"  # both viewers' title


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
LANES_REQUEST_COLUMN = "request"  # over the lanes' request ids, left of the step numbers


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


def needs_textual(problem: object) -> str:
    return error_line(f"the terminal UI needs textual ({problem}): pip install 'schedscope[tui]'")


# == the web app ===============================================================================
PAUSE = "Pause"
RESUME = "Resume"
LIVE_PREFIX = "live: "  # before a followed file's or stream's name in the trace menu
DIFFERENCE = "B − A"  # a compare column and its delta lines' name


def engines_figure_title(totals: str) -> str:
    """The engines figure's title when exported: the run's totals line."""
    return f"engines: {totals}"


# -- the timeline figure -----------------------------------------------------------------------
FLAGS_PANEL = "flags (hover: what to do; click: inspect the step)"
TARGET_PANEL = "target tokens vs target budget"
TARGET_USED = "target used"
TARGET_BUDGET = "target budget"
INPUT_PANEL = "input budget used: target rows + reserved draft slots"
INPUT_USED = "used incl. reserved draft slots"
INPUT_TARGET = "of which target rows"
INPUT_BUDGET = "input budget"
RESERVATION_PANEL = "draft-slot reservation per step (rows): needed vs excess, tokens withheld"
RESERVED = "reserved (red band: excess)"
NEEDED = "needed by the method"
TOKENS_WITHHELD_LINE = "target tokens withheld"
QUERY_PANEL = "drafter query rows vs their buffer"
QUERY_ROWS = "query rows"
QUERY_CAPACITY = "query capacity"
BUFFER_PANEL = "buffer occupancy per forward pass (runner records)"
TARGET_PASS_ROWS = "target pass rows"
TARGET_BUFFER = "target buffer"
DRAFT_PASS_ROWS = "draft pass rows"
DRAFT_BUFFER = "draft buffer"
REQUESTS_PANEL = "requests: running, waiting, preempted"
RUNNING_LINE, WAITING_LINE, PREEMPTED_LINE = "running", "waiting", "preempted"
KV_PANEL = "KV cache usage (%)"
KV_LINE = "KV usage %"


def flag_hover_title(step: int, kind: str) -> str:
    """The bold head of a flag marker's hover text (its severity follows in parentheses)."""
    return f"step {step}: {kind}"


# -- the compare figure and tables -------------------------------------------------------------
COMPARE_TARGET = "target tokens scheduled per step"
COMPARE_TARGET_DELTA = "Δ target tokens (B − A)"
COMPARE_QUERY = "drafter query rows per step"
COMPARE_QUERY_DELTA = "Δ query rows (B − A)"
COMPARE_ADMITTED = "requests admitted per step"
COMPARE_PREEMPTED = "requests preempted per step"
COMPARE_ADMITTED_DELTA = "Δ admitted (B − A)"


def side_name(side: str, name: str) -> str:
    """A compare side's line name: "A (trace.jsonl)"."""
    return f"{side} ({name})"


def flags_in(side: str, count: int) -> str:
    """A compare side's flag markers' legend name."""
    return f"flags in {side} ({count})"


# -- the engines figure ------------------------------------------------------------------------
TOKENS_WITHHELD = "tokens withheld"
RUN = "Run: "  # before the run's totals line


def engine_panel(label: str) -> str:
    return f"{label}: target tokens vs target budget (click to open this engine)"


# -- the flag table and the step inspector ----------------------------------------------------
FLAG_TABLE_COLUMNS = ("step", "severity", "kind", "tokens withheld", "what to do")
JUMP_TIP = "jump to this step"
REQUEST_COLUMNS = ("", "request", "tokens", "spec", "demand", "sampled")
NOT_SCHEDULED = "not scheduled"
BUDGET_ARITHMETIC = "Budget arithmetic"
REQUESTS_AND_TOKENS = "Requests and tokens"
WAITING_DEMAND = "waiting, not admitted (demand)"


def flags_count(count: int) -> str:
    return f"Flags ({count})"


def and_more(count: int) -> str:
    """After a list of ids cut short."""
    return f" (+{count} more)"


# -- the why figures under the timeline --------------------------------------------------------
WAITING_FIGURE = "waiting requests by the constraint that held them (request-steps)"
STEP_AXIS = "step"
WAITING_AXIS = "waiting"
GANTT_AXIS = "step (click a lane: its why)"


def gantt_title(note: str) -> str:
    return f"requests: one lane each, by state and reason — {note}"


def why_title(request_id: str) -> str:
    return f"Why: {request_id}"


# -- the page: its header, tabs and controls ---------------------------------------------------
TAGLINE = "vLLM scheduler budgets, step by step"
DOWNLOAD = "download this view: "
PNG, PNG_TIP = "PNG", "the current figure as PNG"
HTML, HTML_TIP = "HTML", "the current figure as a standalone page"
TIMELINE_TAB, COMPARE_TAB, ENGINES_TAB, SWEEP_TAB = "Timeline", "Compare", "Engines", "Sweep"
UPLOAD_PROMPT, UPLOAD_CHOOSE = "Open a trace: drop a .jsonl or .jsonl.gz here, or ", "choose a file"
PAUSE_TIP = "stop or resume live updates"
FOLLOW_TAIL = " follow tail"
FILTER_PLACEHOLDER = "filter: text or step"
PREVIOUS_PAGE, NEXT_PAGE = "‹ previous", "next ›"
JUMP_HINT = "click a step to jump to it"
ENGINES_NOTE = (
    "One lane per engine of the run, on a shared step axis. Click a lane to open that "
    "engine on the Timeline tab; the trace menu there lists every engine."
)

# -- the sweep page ----------------------------------------------------------------------------
SWEEP_RECORDED = "recorded"  # the x of a run at the recorded budget
SWEEP_LEGEND = "setting"
SWEEP_X_AXIS = "max_num_batched_tokens"  # the budget swept, by vLLM's name for it


def sweep_hover(name: str, objective: str, unit: str) -> str:
    """A sweep point's Plotly hover template (its %{...} fields filled by Plotly)."""
    return (
        f"{name}<br>B %{{x}}<br>{objective} %{{y:,.2f}} {unit}<br>steps %{{customdata[0]}}, "
        "%{customdata[1]:,.1f} tok/step, %{customdata[2]} withheld<br>rank %{customdata[3]}"
        "<extra></extra>"
    )


# -- an upload that cannot be opened (raised as UploadError, shown under the upload box) ------
def not_an_upload(name: str) -> str:
    return f"{name}: not a file upload"


def upload_too_large(name: str, limit_mib: float) -> str:
    return f"{name}: larger than the upload limit of {limit_mib:.0f} MiB"


def not_base64(name: str) -> str:
    return f"{name}: the upload is not valid base64"


def not_a_trace(problem: object) -> str:
    return f"not a schedscope trace: {problem}"


# What the upload box says before a file is sent: the page's size check runs in the browser
# (web.callbacks), which fills in each {field}.
UPLOAD_TOO_LARGE = (
    "Could not open the upload: {name} is {size}, larger than the upload limit of {limit}; "
    "open it with `schedscope web FILE` instead."
)
UPLOAD_OPENING = "opening {name} …"
UPLOAD_WORDS_JS = json.dumps({"tooLarge": UPLOAD_TOO_LARGE, "opening": UPLOAD_OPENING}, ensure_ascii=False)


def upload_label(name: str) -> str:
    """An uploaded trace's name in the trace menu."""
    return f"upload: {name}"


# == the viewers' commands: `schedscope web` ===================================================
WEB_HELP = "interactive web app: timelines, step inspector, flags, compare, live --follow"
WEB_DESCRIPTION = (
    "Serves a Dash app (needs the 'web' extra) on loopback and prints its URL. "
    "With TRACE_B the compare page opens on A vs B; --engines shows the engines of a "
    "data-parallel run as lanes; --follow FILE shows a growing trace live."
)
HOST_HELP = "address to bind (default 127.0.0.1)"
PORT_HELP = "port (default 8050)"
ALLOW_REMOTE_HELP = "allow a non-loopback --host (no authentication!)"
MAX_UPLOAD_HELP = "upload size limit in MiB (default 64)"
SWEEP_METAVAR = "JSON"
SWEEP_HELP = "show a saved `schedscope sweep --json` on a Sweep page"


def not_loopback(host: str) -> str:
    return error_line(
        f"{host} is not a loopback address and the web app has no "
        "authentication; pass --allow-remote to serve it there anyway"
    )


def serving_remote(host: str, port: int) -> str:
    return (
        f"schedscope: warning: serving on {host}: anyone who can reach port {port} can read "
        "these traces and upload files"
    )


def needs_dash(problem: object) -> str:
    return error_line(f"the web app needs: pip install 'schedscope[web]' ({problem})")


def bad_sweep(problem: object) -> str:
    return error_line(f"--sweep {problem}")


def web_note(note: str) -> str:
    return f"schedscope web: note: {note}"


def serving(host: str, port: int) -> str:
    """The line `schedscope web` prints once it serves: the URL to open."""
    return f"schedscope web: http://{host}:{port}/  (Ctrl-C to stop)"


def plotly_fallback(ours: str | None, theirs: str) -> str:
    """Why the page loads the plotly package's full bundle: the bundled plotly.js differs."""
    return (
        f"web/static holds plotly.js {ours} (cartesian) and the plotly package writes figures for "
        f"plotly.js {theirs}: the page loads the package's full bundle (a first figure about 0.5 s later)"
    )
