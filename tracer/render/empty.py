"""What the viewers say where there is nothing to show: no trace, no step, no request, no flag.

Each viewer keeps its own hint where its way to fill the panel differs (a key in the TUI, a
click in the web app). A phrase naming something the user typed takes `mark`, which the view
uses to style that part (bold in the TUI); the words stay these.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence


def _plain(text: str) -> str:
    return text


# -- the step inspectors ---------------------------------------------------------------------
NO_STEP_SELECTED = "no step selected"  # the TUI's, before a trace has a step under the cursor
INSPECT_HINT = "Click a step in the timeline, or a step in the flag table, to inspect it."  # web
NO_REQUEST_SCHEDULED = "no request scheduled"
NONE = "none"  # an inspector's flag list, when the step has none


def no_such_step(step: int | str) -> str:
    """A step number the trace does not hold (the web inspector)."""
    return f"This trace has no step {step}."


def trace_lacks_step(path: str, step: int) -> str:
    """A step number the trace does not hold, as `step` and `why --step` say it (after their prefix)."""
    return f"{path} has no step {step}"


# -- a request looked up by id -----------------------------------------------------------------
def trace_never_names(path: str, request: str) -> str:
    """A request id the trace never names, as `why` says it (after its prefix)."""
    return f"{path} never names request {request!r}"


def starting_alike(ids: Sequence[str]) -> str:
    """`why`'s line under `trace_never_names`: the ids that start as the one asked for did."""
    return f"  requests starting alike: {', '.join(ids)}"


def no_request(query: str, mark: Callable[[str], str] = _plain) -> str:
    return f"No request {mark(query)} in this trace."


def ids_like(ids: Sequence[str]) -> str:
    """The ids that start with what was searched for, after `no_request`."""
    return "Ids starting with it: " + ", ".join(ids)


def life_found(key: str) -> str:
    """Under a request's lifetime, in the TUI: where the cursor went, and the key that searches."""
    return f"the cursor moved to its admission; {key} searches again"


WHY_HINT = "Click a request's lane in the Gantt to read its why."  # web, before a lane is clicked
NO_WAITING = "no request waited"  # the waiting-by-reason chart of a run where none did
NO_REQUEST_IN_STEPS = "no request in these steps"  # the TUI's requests view
NOT_IN_STEP = "not in this step"  # a request lane at the cursor's step, where it has no segment

# -- the timelines' panels and lanes -----------------------------------------------------------
NO_RUNNER_RECORDS = "no runner records in this trace"  # the web's buffer panel
NO_RUNNER_RECORDS_LANE = f"{NO_RUNNER_RECORDS} (target pass = target)"  # the TUI's buffer lane
NO_DRAFTER_PASS = "no separate drafter pass for this method"  # the web's query-rows panel
NO_SUCH_STEP = "no such step"  # an engine's lane at a step of the axis it did not record

# -- traces ------------------------------------------------------------------------------------
NO_TRACE = "no trace loaded"
NO_TRACE_UPLOAD = "no trace loaded: upload one"
COMPARE_NEEDS_TWO = "Load two traces to compare: `schedscope web A B`, or upload one."
NO_STEPS_YET = "no steps yet"  # a step table before the first step is read
NOTHING = "nothing to show"  # any list with no rows


def upload_failed(problem: object) -> str:
    return f"Could not open the upload: {problem}"


def upload_opened(label: str, steps: int) -> str:
    return f"opened {label} ({steps} steps)"


# -- flags -------------------------------------------------------------------------------------
NO_FLAGS_IN_TRACE = "no flags in this trace"


def no_flags_of(kind: str | None) -> str:
    """The TUI's flag list with no row: no flags, or none of the kind it filters on."""
    return "no flags" if kind is None else f"no {kind} flags"


def no_flags(total: int) -> str:
    """A flag table with no row: none in the trace, or none the filter lets through."""
    return "no flags" if not total else "no flag matches the filter"


def flag_page(page: int, pages: int, flags: int) -> str:
    """Which page of the flag table is shown (`page` from 1)."""
    return f"page {page} of {pages} ({flags} flags)"
