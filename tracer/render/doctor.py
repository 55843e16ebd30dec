"""`schedscope doctor` in words: each check's verdict sentence, a trace's section title and
the tally. tracer.doctor decides each verdict (PASS, FAIL or SKIP) and the numbers behind it;
these functions only word them."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

# What to check when the model-runner process reported no hook.
NOT_LOADED = (
    "the model-runner process did not load the hook (is schedscope pip-installed in the server's "
    "environment? the server log names a moved vLLM class in a 'schedscope:' warning)"
)


def verdict_line(status: str, check: str, sentence: str) -> str:
    return f"{status}  {check}: {sentence}"


def trace_title(path: str, steps: int, header: dict[str, Any]) -> str:
    """A trace's section heading: its file, size and who recorded it."""
    return (
        f"{path}: {steps} steps, vLLM {header.get('vllm_version')}, "
        f"schema {header.get('schema')}, EngineCore pid {header.get('pid')}"
    )


def totals_title(source: str | None) -> str:
    """The heading of the totals compared with /metrics (`source`: where they came from)."""
    return f"totals ({source})" if source is not None else "totals"


def tally(passed: int, failed: int, skipped: int) -> str:
    return f"{passed} passed, {failed} failed, {skipped} skipped"


# -- vLLM version ------------------------------------------------------------------------
def version(release: str | None, supported: bool | None, low: str, high: str) -> str:
    """`supported` None: the header names no release (`release` is then its raw value's repr)."""
    span = f"this schedscope supports {low} to {high}"
    if supported is None:
        return f"the header names no vLLM release ({release}); {span}"
    if supported:
        return f"recorded by vLLM {release}, supported ({span})"
    moved = "a field it moved may be missing from the records"
    return f"recorded by vLLM {release}, not supported: {span}; {moved}"


# -- hooks -------------------------------------------------------------------------------
UNKNOWN_CLASS = "an unknown class"  # a header that names no scheduler class


def scheduler_mismatch(cls: str, async_on: bool, use: str) -> str:
    """The class that recorded does not match async scheduling; `use` is the one that does."""
    if async_on:
        return f"async scheduling is on but {cls} recorded: use {use}"
    return f"{cls} recorded with async scheduling off: use {use}"


def scheduler_ok(cls: str, steps: int, async_on: bool) -> str:
    mode = "async" if async_on else "sync"
    return f"{cls} recorded {steps} steps ({mode} scheduling)"


def runner_offline() -> str:
    return "recorded offline (a replay or the offline harness): no model runner ran"


def runner_unnamed() -> str:
    return "runner records present (no runner named: a pre-1.1 trace)"


def nothing_scheduled(what: str) -> str:
    """No step scheduled tokens, so no `what` ("forward pass", "drafter pass") ran."""
    return f"no step scheduled tokens, so no {what} to record"


def runner_missing() -> str:
    return f"no runner records: {NOT_LOADED}"


def runner_name(runner: object, cls: object) -> str:
    return f"{runner} runner {cls}"


def runner_gaps(name: str, missing: int, busy: int) -> str:
    return f"{name}: {missing} of {busy} busy steps lack a record"


def runner_ok(name: str, padded: bool) -> str:
    pad = ", padded rows included" if padded else ""
    return f"{name}: a target-pass record for every busy step{pad}"


def no_speculation() -> str:
    return "no speculative decoding in this run"


def passless_drafted(method: str) -> str:
    return f"{method} runs no drafter pass, yet draft records exist"


def passless_ok(method: str) -> str:
    return f"{method} runs no drafter forward pass: none to record"


def speculator_unhooked(name: str, method: str) -> str:
    return f"{name} ({method}) is not hooked: draft rows not recorded"


def speculator_offline() -> str:
    return "recorded offline: no drafter ran"


def speculator_silent(method: str) -> str:
    return f"{method}: not one draft-pass record in a run that drafted"


def speculator_ok(name: str, records: int, rows: object | None, padded: bool, overflows: int) -> str:
    """`rows`: the hooks record's `speculator_rows` (None: no hooks record)."""
    detail = f"{name}: {records} draft-pass records"
    if rows is not None:
        detail += f" (rows: {rows})"
        if padded:
            detail += ", padded rows included"
    if overflows:
        detail += f"; {overflows} passes overflow the drafter buffer (schedscope flags)"
    return detail


def inactive(reasons: Sequence[str]) -> str:
    return "; ".join(reasons)


# -- totals against /metrics ---------------------------------------------------------------
def metrics_unreadable(problem: object) -> str:
    """`doctor`'s error (after its prefix): /metrics unreachable or unparsable, or a file unreadable."""
    return f"cannot read the server's metrics: {problem}"


def no_metrics() -> str:
    return "not compared with the server's counters (no --metrics-url/-file)"


def engines_missing(engines: Sequence[str], traces: int) -> str:
    return (
        f"the server reports engines {', '.join(engines)}, {traces} trace(s) given: "
        "pass every engine's trace (SCHEDSCOPE_TRACE with {pid})"
    )


def not_exported(name: str) -> str:
    return f"the server does not export {name}"


def in_range(name: str, theirs: int, lo: int, hi: int, what: str, ok: bool) -> str:
    relation = "within" if ok else "outside"
    why = "what vLLM discards is not in the trace"
    return f"{name} {theirs} is {relation} the trace's {lo}–{hi} {what} ({why})"


def equal(name: str, ours: int, theirs: int, what: str) -> str:
    if ours == theirs:
        return f"{ours} {what} in the trace = {name} {theirs}"
    return f"{ours} {what} in the trace ≠ {name} {theirs} (differ by {theirs - ours})"


def finished_requests(admitted: int) -> str:
    """What the requests total counts, for `equal`."""
    return f"finished requests ({admitted} admitted)"


def prompts_unknown(unknown: int, admitted: int, limit: int) -> str:
    return (
        f"{unknown} of {admitted} admitted requests have no recorded prompt length "
        f"(a step admitted more than {limit})"
    )


# What each total counts, for `equal` and `in_range`.
PROMPT_TOKENS = "prompt tokens at admission"
SAMPLED_TOKENS = "sampled tokens"
PREEMPTIONS = "preemptions"
DRAFT_TOKENS = "draft tokens scheduled"


# -- records -----------------------------------------------------------------------------
def steps_missing(steps: int) -> str:
    return f"step numbers are not 1..{steps}: steps are missing"


def stream_gaps(gaps: int) -> str:
    return f"{gaps} gaps from a live stream (`attach --save`)"


def torn(description: str) -> str:
    return f"the file is {description}"


def malformed_skipped(lines: int) -> str:
    return f"{lines} malformed lines skipped"


def unordered_skipped(records: int, first: object) -> str:
    return f"{records} out-of-order step records skipped, the first {first}"


def no_footer(problems: Sequence[str]) -> str:
    why = "; ".join(problems) or "records dropped are counted at a clean shutdown"
    return f"no footer yet (the server is running, or was killed): {why}"


def dropped(records: object) -> str:
    return f"{records} records dropped (raise SCHEDSCOPE_QUEUE, or a faster disk)"


def tracer_errors(errors: object) -> str:
    return f"{errors} tracer errors (the server log has the first one)"


def writing_stopped(failure: object) -> str:
    return f"writing stopped: {failure}"


def problems(found: Sequence[str]) -> str:
    return "; ".join(found)


def footer_ok(steps: int, kept: bool) -> str:
    why = " (kept beside the trace: EngineCore was killed before it wrote its footer)" if kept else ""
    return f"footer: {steps} steps written, 0 records dropped, 0 errors{why}"


def tracer_cost(hooks_us: float, thread_us: float, interval_s: float, share: float | None) -> str:
    line = (
        f"EngineCore spent {hooks_us:.0f} µs a step in the tracer's hooks (the scheduler thread) "
        f"and {thread_us:.0f} µs of CPU on the thread that ships or writes its records"
    )
    if share is None:
        return line
    return f"{line}: {share:.2%} of the median {interval_s * 1e3:.1f} ms between steps"


# -- identity replay ---------------------------------------------------------------------
def replay_approximate() -> str:
    return "no recorded scheduler inputs (format 1.0, or stream gaps): a replay would be approximate"


def replay_needs_vllm(exc: BaseException) -> str:
    return f"needs vLLM installed here ({exc})"


def replay_raised(exc: BaseException) -> str:
    return f"the replay raised {type(exc).__name__}: {exc}"


def replay_summary(headline: str) -> str:
    """render.fidelity's headline, without the check's name the verdict already carries."""
    return headline.removeprefix("identity replay ")
