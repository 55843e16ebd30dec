"""The sentences of "why", written once: a cause, a step, a preemption, a request's life, and
the summary's waiting-by-reason line. `schedscope why`, `summary`, the flag, the TUI and the web
app take their words from here (tracer.analysis.why decides; this module only words).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

from tracer.analysis.reasons import DERIVED, EXACT, LIKELY, REASONS, label
from tracer.analysis.request_lanes import RequestLanes, Segment
from tracer.analysis.request_story import LifeStep, RequestStory
from tracer.analysis.step_bindings import WaitingSummary
from tracer.analysis.why import Cause, Detail, PreemptionWhy, RequestWhy, StepWhy
from tracer.render.empty import NO_REQUEST_IN_STEPS, NO_WAITING
from tracer.whatif.probe import ASYNC_DONE, Change


def _pct(x: float) -> str:
    return f"{x:.0%}"


def certainty_mark(certainty: str) -> str:
    """How sure, as a short suffix: "" for exact, otherwise the word."""
    return "" if certainty == EXACT else f" ({certainty})"


# A cause's `why` detail (tracer.analysis.why.Detail), as `why` prints it and `why --json` keeps it.
_DETAILS = {
    Detail.NOTHING_WAITING: "nothing waiting",
    Detail.NONE_LISTED: "no waiting request listed",
    Detail.AT_PREEMPTION: "the loop ended at a preemption",
}


def detail_text(detail: Detail) -> str:
    return _DETAILS[detail]


def cause_text(cause: Cause) -> str:
    """One cause, with its numbers, in a phrase ("max_num_seqs=8: 8 running")."""
    n, code = cause.numbers, cause.code
    if code == "none":
        text = "nothing held back: " + (detail_text(n["why"]) if "why" in n else "all demand met")
    elif code == "preemption":
        text = f"a preemption in this step ({n.get('preempted')}): vLLM admits nothing in such a step"
    elif code == "paused":
        text = f"the scheduler was paused ({n.get('state')})"
    elif code == "target_budget":
        if "taken_ahead" in n:
            text = f"target budget: {n['taken_ahead']} tokens taken by requests ahead"
        else:
            text = f"target budget spent ({n.get('used')} of {n.get('cap')})"
    elif code == "input_budget":
        if "taken_ahead" in n:
            text = (
                f"input budget: {n['taken_ahead']} rows taken ahead, "
                f"{n.get('reserved')} draft slots reserved for it"
            )
        else:
            text = (
                f"input budget: {n.get('left')} of {n.get('cap')} rows left, not more than the "
                f"{n.get('draft_slots')} draft slots a request reserves; "
                f"reservations took {n.get('reserved')}"
            )
    elif code == "draft_budget":
        text = (
            f"draft-input budget: {n.get('left')} of {n.get('cap')} drafter rows left, fewer than the "
            f"{n.get('rows_per_request')} a scheduled request takes"
        )
    elif code in ("max_num_seqs", "max_num_active_seqs"):
        kv = n.get("kv_usage")
        free_kv = f" and {_pct(1 - kv)} of KV" if isinstance(kv, int | float) else ""
        text = (
            f"{code}={n.get('cap')}: {n.get('running')} running, with {n.get('target_left')} of "
            f"{n.get('target_cap')} budget tokens{free_kv} free"
        )
    elif code == "kv_blocks":
        if n.get("kv_free") is not None:
            text = f"KV blocks: {n['kv_free']} free; " + _kv_need_text(n)
        elif "why" in n:
            text = f"KV blocks ({detail_text(n['why'])})"
        else:
            kv = n.get("kv_usage")
            text = "KV blocks" + (f" (KV {_pct(kv)} used)" if isinstance(kv, int | float) else "")
    elif code == "chunked_prefill_off":
        text = (
            f"chunked prefill is off and {n.get('demand')} prompt tokens do not fit the {n.get('room')} left"
        )
    elif code == "spec_padding":
        text = f"a padded admission needs {n.get('padded_rows')} rows; {n.get('room')} left"
    elif code == "long_prefill":
        text = f"long-prefill threshold {n.get('threshold')}"
    elif code == "behind":
        text = f"behind {cause.behind} ({label(str(n.get('root')))})"
    elif code in ("grammar", "remote_kv", "streaming_input", "lora_limit"):
        text = f"skipped: {label(code)}"
    else:
        text = label(code)
    if n.get("also"):
        text += f"; {' and '.join(label(c) for c in n['also'])} would have stopped it too"
    if "withheld" in n and code != "none":
        text += f", {n['withheld']} tokens short"
    if cause.certainty == LIKELY and cause.alternatives:
        alts = ", ".join(label(a) for a in cause.alternatives)
        return f"likely {text} (or: {alts})"
    return text + ("" if cause.certainty in (EXACT, LIKELY) else f" ({cause.certainty})")


def _kv_need_text(n: dict[str, Any]) -> str:
    """What the head request's allocation needs, as tracer.analysis.why.kv_need counts it."""
    rid, chunk = n.get("request"), min(n.get("demand", 0), n.get("room", 0))
    prompt = n.get("kv_prompt_blocks")
    if prompt is not None and prompt > n.get("kv_chunk_blocks", 0):
        # The whole prompt, not the chunk, decides: vLLM's scheduler_reserve_full_isl.
        said = (
            ""
            if n.get("reserve_full_isl")
            else " if vLLM reserved it, as by default (the trace does not say)"
        )
        most = "up to " if n.get("prefix_hit_possible", True) else ""
        text = f"{rid}'s whole prompt ({n.get('demand')} tokens) needs {most}{prompt}{said}"
    else:
        text = (
            f"{rid}'s next {chunk} tokens need up to {n.get('kv_chunk_blocks', n.get('kv_needed_at_most'))}"
        )
    watermark = n.get("kv_watermark_blocks")
    if watermark:
        text += f", and the watermark keeps {watermark} free: {n.get('kv_needed_at_most')} in all"
    return text


# What a `why --exact` probe changed on its copy of the scheduler (tracer.whatif.probe.Change).
_CHANGES = {
    "seqs": "admission cap +{by}",
    "kv": "+{by} free KV blocks",
    "budget": "token budget +{by}",
    "draft_slots": "no draft-slot reservations",
    "long_prefill": "long-prefill threshold off",
    "chunked": "chunked prefill on",
    ASYNC_DONE: "read on the state: max_tokens in flight",
}


def change_text(changes: Iterable[Change]) -> str:
    """What a probe relaxed, in words ("token budget +97", "admission cap +2, +40 free KV blocks")."""
    return ", ".join(_CHANGES[c.relaxation].format(by=c.by) for c in changes)


def _worded(value: Any) -> Any:
    """A why document with its facts in words: a cause's detail, what a probe relaxed."""
    if isinstance(value, dict):
        return {k: _worded(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_worded(v) for v in value]
    if isinstance(value, Detail):
        return detail_text(value)
    if isinstance(value, tuple) and value and all(isinstance(c, Change) for c in value):
        return change_text(value)
    return value


def step_document(why: StepWhy) -> dict[str, Any]:
    """`schedscope why --step N --json`: the step's reasons and facts, their details in words."""
    return _worded(why.as_dict())


def story_document(story: RequestStory) -> dict[str, Any]:
    """`schedscope why REQUEST --json`: the request's life and reasons, their details in words."""
    return _worded(story.as_dict())


def request_line(r: RequestWhy) -> str:
    got = f"{r.tokens} of {r.demand}" if r.state == "clipped" else f"needs {r.demand}"
    return f"{r.state:<11} {r.id}  {got}: {cause_text(r.cause)}"


def preemption_line(p: PreemptionWhy) -> str:
    who = (
        "itself (nothing else to evict)" if p.trigger == p.victim else (p.trigger or "an unrecorded request")
    )
    by = "the lowest priority" if p.policy == "priority" else "the newest running request"
    parts = [f"{p.victim} preempted as {by}, for {who} whose KV allocation failed"]
    if p.lost is not None:
        parts.append(f"{p.lost} computed tokens lost")
    if p.kv_before is not None and p.kv_after is not None:
        parts.append(f"KV {_pct(p.kv_before)} → {_pct(p.kv_after)}")
    if p.resumed_step is not None:
        again = f", {p.recomputed} tokens re-computed" if p.recomputed is not None else ""
        hit = f" ({p.cached_on_resume} found in the prefix cache)" if p.cached_on_resume else ""
        parts.append(f"resumed at step {p.resumed_step} after {p.steps_until_resumed} steps{again}{hit}")
    elif p.looked_for_resume:
        parts.append("not resumed in the trace")
    return "; ".join(parts) + certainty_mark(p.certainty)


def step_lines(why: StepWhy) -> Iterator[str]:
    f = why.facts
    yield f"step {why.step}: {cause_text(why.binding)}"
    kv = f", KV {f['kv_free'][0]} → {f['kv_free'][1]} blocks free" if f.get("kv_free") else ""
    yield (
        f"  target {f['target_left']} left, input {f['input_left']} left "
        f"({f['input_reserved']} reserved), {f['num_running']} running of cap {f['admission_cap']}, "
        f"{f['num_waiting']} waiting{kv}"
    )
    for p in why.preemptions:
        yield f"  preempted   {preemption_line(p)}"
    for r in why.requests:
        yield f"  {request_line(r)}"
    if why.unlisted:
        yield f"  … and {why.unlisted} more waiting requests the trace does not list (behind those above)"


def _seconds(s: float) -> str:
    return f"{s * 1000:.1f} ms" if s < 1 else f"{s:.2f} s"


def _runs(steps: list[LifeStep]) -> list[list[LifeStep]]:
    """Consecutive steps in the same state for the same reason, as one line each."""
    runs: list[list[LifeStep]] = []
    for s in steps:
        prev = runs[-1][-1] if runs else None
        same = (
            prev is not None
            and s.step == prev.step + 1
            and s.state == prev.state
            and s.state in ("waiting", "scheduled", "unscheduled")
            and (s.cause.code if s.cause else None) == (prev.cause.code if prev.cause else None)
            and (s.tokens == s.demand) == (prev.tokens == prev.demand)
        )
        if same:
            runs[-1].append(s)
        else:
            runs.append([s])
    return runs


def no_story_line(request_id: str) -> str:
    """What the views' why panels say when the trace never names the request."""
    return f"No request {request_id} in this trace."


def story_lines(story: RequestStory) -> Iterator[str]:
    yield f"request {story.id}"
    for run in _runs(story.steps):
        s, last = run[0], run[-1]
        where = f"step {s.step:>6}" if len(run) == 1 else f"steps {s.step}–{last.step}"
        if s.state in ("arrived", "finished", "preempted"):
            yield f"  {where:<16} {s.state}"
            continue
        amount = f"{s.tokens} of {s.demand}" if s.tokens else f"needs {s.demand}"
        if len(run) > 1 and s.tokens:
            amount = f"{sum(x.tokens for x in run)} tokens in {len(run)} steps"
        reason = f": {cause_text(s.cause)}" if s.cause else ""
        yield f"  {where:<16} {s.state:<18} {amount}{reason}"
    for p in story.preemptions:
        yield f"  preemption: {preemption_line(p)}"
    if story.waiting_by_reason:
        parts = [
            f"{label(code)} {n} steps ({_seconds(t)})"
            for code, (n, t) in sorted(story.waiting_by_reason.items(), key=lambda kv: -kv[1][1])
        ]
        yield "  waited: " + ", ".join(parts)
    t = story.ttft
    if t.get("first_token_step") is not None:
        waits = " + ".join(f"{_seconds(v)} {label(k)}" for k, v in t["waiting"].items()) or "no waiting"
        if t.get("unlisted_seconds"):
            waits += f" + {_seconds(t['unlisted_seconds'])} waiting unlisted (beyond the 32 a step lists)"
        if t.get("frontend_seconds") is not None:
            waits = f"{_seconds(t['frontend_seconds'])} before the scheduler had it + {waits}"
        start = {"arrival": "from arrival", "engine": "from the step it was added before"}.get(
            t.get("from"), ""
        )
        yield (
            f"  TTFT {start + ' ' if start else ''}{_seconds(t['total_seconds'])} = {waits} + "
            f"{t['prefill_steps']} prefill steps "
            f"({_seconds(t['prefill_seconds'])}) + the first token's step "
            f"({_seconds(t['first_token_seconds'])})"
        )
    else:
        yield "  no first token in the trace"


def waiting_sentence(summary: WaitingSummary) -> str | None:
    """The summary's one actionable sentence: what held most waiting request-steps, and what to change."""
    if not summary.total:
        return None
    code, steps = next(iter(summary.by_reason.items()))
    share = steps / summary.total
    reason = REASONS.get(code)
    cfg = summary.config
    name = code
    if code == "max_num_seqs":
        name = f"max_num_seqs={cfg.get('max_num_seqs')}"
    elif code == "max_num_active_seqs":
        name = f"max_num_active_seqs={cfg.get('max_num_active_seqs')}"
    else:
        name = label(code)
    idle = summary.idle_tokens.get(code, 0.0)
    kv = summary.idle_kv.get(code, 0.0)
    knob = (
        f": raise {reason.knob}"
        if reason and reason.knob and reason.limit
        else (f"; {reason.knob}" if reason and reason.knob else "")
    )
    return (
        f"{_pct(share)} of waiting request-steps were held by {name} with {idle:.0f} tokens and "
        f"{_pct(kv)} of KV free on average{knob}"
    )


def waiting_lines(summary: WaitingSummary) -> Iterator[str]:
    if not summary.total:
        yield f"waiting  {NO_WAITING}"
        return
    parts = [f"{label(code)} {_pct(n / summary.total)} ({n})" for code, n in summary.by_reason.items()]
    yield f"waiting  {summary.total} request-steps: " + ", ".join(parts)
    sentence = waiting_sentence(summary)
    if sentence:
        yield f"         {sentence}"


# -- the request lanes (TUI requests view, web Gantt) -------------------------------------------
def state_label(state: str, code: str) -> str:
    """A lane state with its reason, for legends ("waiting: max_num_seqs", "scheduled")."""
    if state == "scheduled":
        return "scheduled in full"
    if state == "preempted":
        return "preempted"
    return f"{state}: {label(code)}"


def segment_text(seg: Segment) -> str:
    """One segment of a request's lane ("steps 3–19 waiting: max_num_seqs")."""
    where = f"step {seg.first}" if seg.first == seg.last else f"steps {seg.first}–{seg.last}"
    return f"{where} {state_label(seg.state, seg.code)}"


def lanes_note(lanes: RequestLanes) -> str:
    """What the lanes show, and what they leave out."""
    if not lanes.lanes:
        return NO_REQUEST_IN_STEPS
    parts = [
        f"{len(lanes.lanes)} of {lanes.requests} requests" if lanes.left_out else f"{lanes.requests} requests"
    ]
    parts[0] += f", steps {lanes.first_step}–{lanes.last_step}"
    if lanes.left_out:
        parts.append(f"the first {len(lanes.lanes)} shown ({lanes.left_out} more: zoom in)")
    if lanes.clipped_window:
        parts.append(
            f"{lanes.end - lanes.start} of the {lanes.rows_asked} steps asked read (zoom in for the rest)"
        )
    if lanes.unlisted:
        parts.append(f"up to {lanes.unlisted} waiting requests a step are not listed in the trace")
    return "; ".join(parts)


def reason_cell(cause: Cause) -> str:
    """A cause in a few words, for a table's reason column ("max_num_seqs", "behind: KV blocks")."""
    text = f"behind: {label(cause.root)}" if cause.code == "behind" else label(cause.code)
    return text + ("" if cause.certainty in (EXACT, DERIVED) else f" ({cause.certainty})")
