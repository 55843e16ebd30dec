"""The TUI's words for its keys: each binding's description and tooltip (the footer and the `?`
screen show them), the command palette's entries and the key help screen.

The views keep the keys and the actions (`Binding("n", "next_flag", NEXT_FLAG)`); a palette
entry here is its (title, help) pair, to which the view adds the action it runs.
"""

from __future__ import annotations

# A command palette entry: (title, help).
Entry = tuple[str, str]

# -- the app, everywhere -----------------------------------------------------------------------
HELP = "Help"
THEME = "Dark/light theme"
QUIT = "Quit"
KEYS: Entry = ("Keys", "Every key binding (?)")

# -- a step cursor, its zoom window and replay (the main, compare and engines screens) -------
STEP = "Step"
PREVIOUS_STEP = "Previous step"
NEXT_STEP = "Next step"
BACK_10 = "Back 10 steps"
FORWARD_10 = "Forward 10 steps"
FIRST_STEP = "First step"
LAST_STEP = "Last step"
GO_TO_STEP = "Go to step"
ZOOM_IN = "Zoom in"
ZOOM_OUT = "Zoom out"
ZOOM_FIT = "Zoom to the whole run"
PAN_LEFT = "Pan left"
PAN_RIGHT = "Pan right"
PLAY = "Play/pause"
FASTER = "Replay faster"
SLOWER = "Replay slower"

STEP_COMMANDS: dict[str, Entry] = {  # by the action each runs
    "play": ("Play / pause replay", "Step through the run at the replay speed"),
    "speed(1)": (FASTER, "More steps per second"),
    "speed(-1)": (SLOWER, "Fewer steps per second"),
    "goto": ("Go to step…", "Move the cursor to a step number"),
    "zoom(0.5)": (ZOOM_IN, "Halve the steps shown on the timeline"),
    "zoom(2)": (ZOOM_OUT, "Double the steps shown on the timeline"),
    "fit": (ZOOM_FIT, "Fit every step on the timeline"),
    "first": (FIRST_STEP, "Move the cursor to the first step"),
    "last": (LAST_STEP, "Move the cursor to the last step"),
}

# -- the main screen ---------------------------------------------------------------------------
NEXT_FLAG = "Next flag"
PREVIOUS_FLAG = "Previous flag"
FILTER_KIND = "Filter flags by kind"
REQUEST = "Request"
TAIL = "Follow the tail (--follow)"
INSPECTOR_TAB = "Inspector tab"
FLAGS_TAB = "Flags tab"
REQUEST_TAB = "Request tab"
REQUESTS = "Requests"
REQUESTS_TIP = "Requests view: lanes by state and reason"

NEXT_FLAG_CMD: Entry = (NEXT_FLAG, "Jump to the next flagged step")
PREVIOUS_FLAG_CMD: Entry = (PREVIOUS_FLAG, "Jump to the previous flagged step")
SEARCH_CMD: Entry = ("Search request…", "Show a request's lifetime: admitted, scheduled, preempted, finished")
ALL_KINDS_CMD: Entry = ("Flags: all kinds", "List every flag; n/N visit every flagged step")
TAIL_CMD: Entry = ("Follow the tail", "Keep the cursor on the newest step as the file grows")
INSPECTOR_CMD: Entry = ("Show the inspector", "The selected step's requests, budget arithmetic and flags")
FLAG_LIST_CMD: Entry = ("Show the flag list", "Every flag with its sentence")
REQUESTS_CMD: Entry = ("Requests view", "One lane per request over the steps, by state and reason; its why")


def kind_cmd(kind: str) -> Entry:
    """The palette entry that filters the flags on one kind."""
    return (f"Flags: only {kind}", f"List and visit only {kind} flags")


# -- the compare screen ------------------------------------------------------------------------
NEXT_DIFFERENCE = "Next difference"
PREVIOUS_DIFFERENCE = "Previous difference"
NEXT_DIFFERENCE_CMD: Entry = (NEXT_DIFFERENCE, "Jump to the next step where A and B differ")
PREVIOUS_DIFFERENCE_CMD: Entry = (PREVIOUS_DIFFERENCE, "Jump to the previous step where A and B differ")

# -- the engines screen, and one engine opened from it ---------------------------------------
BACK_TO_ENGINES = "Back to the engines"
NEXT_ENGINE = "Next engine"
NEXT_ENGINE_TIP = "Select the next engine's lane"
PREVIOUS_ENGINE = "Previous engine"
OPEN_ENGINE = "Open engine"
OPEN_ENGINE_TIP = "Open the selected engine alone"
NEXT_ENGINE_CMD: Entry = (NEXT_ENGINE, NEXT_ENGINE_TIP)
PREVIOUS_ENGINE_CMD: Entry = (PREVIOUS_ENGINE, "Select the previous engine's lane")
OPEN_ENGINE_CMD: Entry = (OPEN_ENGINE, "Open the selected engine in the single-trace view")

# -- the requests view -------------------------------------------------------------------------
WHY_TIP = "Open the selected request's why (or click its lane)"
WHY = "Why"
BACK = "Back"
BACK_TIP = "Back to the main screen, at this step"
WHY_CMD: Entry = ("Why of the selected request", "Its life step by step, with its reasons")
BACK_CMD: Entry = (BACK, BACK_TIP)

# -- the step table and flag list (when focused) -----------------------------------------------
UP = "Up"
DOWN = "Down"
PAGE_UP = "Page up"
PAGE_DOWN = "Page down"
FIRST = "First"
LAST = "Last"
GO_TO = "Go to"

# -- small screens -----------------------------------------------------------------------------
CLOSE = "Close"
CANCEL = "Cancel"
PROMPT_KEYS = "enter: go · escape: cancel"
GOTO_PROMPT = ("Go to step", "a step number as recorded")  # (title, placeholder)
SEARCH_PROMPT = ("Search request", "request id (or its beginning)")

# -- the key help screen (`?`) -----------------------------------------------------------------
HELP_TITLE = "Keys"
THIS_SCREEN = "This screen"
TABLES = "Step table and flag list (when focused)"
EVERYWHERE = "Everywhere"
HELP_CLOSING = "ctrl+p opens the command palette · escape closes this help"
HELP_INTRO = (
    "[b]schedscope[/b] replays a vLLM scheduler trace step by step. The timeline shows, per step, "
    "target tokens against the target budget, the input budget with reserved draft slots in the "
    "warning colour, the target tokens those slots withheld, query rows against the drafter "
    "buffer, buffer rows per forward pass, running and waiting requests, flags (✖ error, "
    "▲ warning, ● info) and preemptions (◆). [b]w[/b] opens the requests view: one lane per "
    "request, coloured by state and reason; enter on a lane says why."
)
