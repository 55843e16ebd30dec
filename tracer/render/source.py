"""A trace source's state in one line, as both viewers show it (tracer.trace.source.SourceState).
What the command line says while it opens a trace is render.command_lines'."""

from __future__ import annotations

from pathlib import Path

from tracer.render.stream import link_status
from tracer.trace.attach import LinkState
from tracer.trace.source import FILE, HEADER, Mode, Phase, SourceState


def source_line(state: SourceState) -> str:
    """Where a file, a growing file or a live stream stands: loading, following, a problem."""
    name = Path(state.target).name if state.mode is not Mode.STREAM else state.target
    phase = state.phase
    if phase is Phase.FAILED:
        return f"cannot read: {state.detail}"
    if state.mode is Mode.STREAM:
        return _stream_line(state)
    if phase is Phase.WAITING:
        if state.waiting == HEADER:
            return f"waiting for the header record of {Path(state.target)}"
        if state.waiting == FILE:
            return f"waiting for {Path(state.target)} to appear"
        return f"waiting for {state.target}"
    if phase is Phase.LOADING:
        share = f" {state.done / state.total:.0%}" if state.total else ""
        return f"loading {name}{share}: {state.steps} steps"
    if phase is Phase.FOLLOWING:
        return f"following {name}: {state.steps} steps"
    return f"{name}: {state.steps} steps"


def _stream_line(state: SourceState) -> str:
    link = state.link if state.link is not None else LinkState(state.target)
    saving = Path(state.saving) if state.saving else None
    if state.phase is Phase.ENDED:
        if state.footer:
            ended = "the run wrote its footer"
        else:
            ended = link_status(state.link) if state.link is not None else "the stream ended"
        return f"ended: {ended} · last step {link.last_step}" + (
            f" · saved to {saving.name}" if saving else ""
        )
    text = link_status(link, saving)
    if state.phase is Phase.GAP and state.gap is not None:
        first, last, why = state.gap
        text = f"gap: steps {first}..{last} missing ({why or 'not received'}) · {text}"
    elif state.gaps:
        text += f" · {state.gaps} gap{'s' if state.gaps > 1 else ''}"
    return text
