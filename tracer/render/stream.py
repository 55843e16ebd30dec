"""A live stream in words: its connection's state as the one line `attach` and both viewers
show, the follower's notes (`attach` prints them), and `attach`'s compact line per step.
The follower (tracer.trace.attach) keeps only facts: a note's name and numbers, a link's
phase and the error text it met."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from tracer.trace import attach
from tracer.trace.attach import LinkState, StreamEvent
from tracer.trace.compact import GROUPS, size


def _clock(t: float) -> str:
    return time.strftime("%H:%M:%S", time.localtime(t))


def _cause(state: LinkState) -> str:
    """What a link met: its own words for a stall and a closed stream, else the error's text."""
    if state.cause == attach.STALLED:
        return f"no data for {state.timeout:g}s, not even a heartbeat"
    if state.cause == attach.CLOSED:
        return "the server closed the stream"
    return state.detail


def link_status(state: LinkState, saving: Path | None = None) -> str:
    """The connection state as one line: what `attach`, the TUI and the web app show.

    `saving`: the file the current run is saved to, named once the server has restarted.
    """
    text = _phase_text(state)
    if state.run > 1:
        text += f" · new run {state.run} (the server restarted)"
        if saving is not None:
            text += f" → {saving.name}"
    return text


def _phase_text(state: LinkState) -> str:
    step = f"last step {state.last_step}" if state.last_step else "no step yet"
    phase = state.phase
    if phase == "connecting":
        return f"connecting to {state.url}"
    if phase == "live":
        return f"live · step {state.last_step}" if state.last_step else "live · no step yet"
    if phase == "idle":
        since = f" since {_clock(state.idle_since)}" if state.idle_since is not None else ""
        return f"idle{since} ({step})"
    if phase == "stalled":
        return f"stalled: {_cause(state)} · reconnecting"
    if phase == "reconnecting":
        return f"reconnecting ({_cause(state)}) · {step}"
    if phase == "refused":
        return f"refused: {_cause(state)}"
    if phase == "unauthorised":
        return f"unauthorised: {_cause(state)} (check --token or SCHEDSCOPE_STREAM_TOKEN)"
    return f"gave up after {state.reconnects} reconnects ({_cause(state)})"


def status_line(event: StreamEvent) -> str:
    """A follower's note (a `status` event) in words, as `attach` prints it."""
    note, facts = event.note, event.facts
    state = event.state if event.state is not None else LinkState("")
    if note == attach.GIVING_UP:
        return f"giving up after {state.reconnects} reconnects"
    if note == attach.RETRYING:
        return f"reconnecting in {facts['delay']:.1f}s after step {state.last_step}"
    if note == attach.CONNECTED:
        return f"connected to {state.url}"
    if note == attach.DROPPED:
        return _cause(state)
    if note == attach.UNAUTHORISED:
        return f"unauthorised: {_cause(state)}"
    if note == attach.REFUSED:
        return f"refused: {_cause(state)}"
    if note == attach.STALL:
        return f"stalled: {_cause(state)}"
    if note == attach.DISCONNECTED:
        return f"disconnected: {facts['error']}"
    if note == attach.LONG_LINE:
        return f"dropped a line longer than {attach.MAX_LINE >> 20} MiB"
    if note == attach.NOT_JSON:
        return f"skipped a line that is not JSON ({facts['head']!r}…)"
    if note == attach.RESTARTED:
        start = facts.get("start")
        started = f", started {_clock(start)}" if isinstance(start, (int, float)) else ""
        return f"the server restarted: a new run begins (pid {facts.get('pid')}{started})"
    if note == attach.IDLE:
        return _phase_text(state)
    return note


def status_note(event: StreamEvent) -> str:
    """A follower's note as `attach` prints it on stderr: a comment line (`#`), so that a
    script reading the stream's lines can tell them apart."""
    return f"# {status_line(event)}"


def saved_line(run: int, path: str | Path) -> str:
    """`attach --save`, on stderr when the server starts another run: where that run goes."""
    return f"# run {run} is saved to {path}"


def step_line(record: dict[str, Any]) -> str:
    """One compact line per step for `schedscope attach`."""
    if record.get("kind") == "gap":
        return f"-- gap: steps {record['after'] + 1}..{record['before'] - 1} missing ({record.get('reason')})"
    t, i = record["target"], record["input"]
    n = [size(record.get(key)) for key in GROUPS]  # raw stream records: 1.1 or 1.2 layout
    query = record.get("query") or {}
    q = f" query {query.get('rows')}/{query.get('cap')}" if query else ""
    return (
        f"step {record['step']:>7}  target {t['used']:>5}/{t['cap']:<5} "
        f"input {i['used']:>5}(+{i.get('reserved', 0)})"
        f"/{i['cap']:<5}{q}  new {n[0]} res {n[1]} run {n[2]}  pre {len(record.get('preempted', ()))} "
        f"fin {len(record.get('finished', ()))}  wait {record.get('num_waiting', 0)}"
    )
