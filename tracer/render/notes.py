"""A replay's notes in words (tracer.whatif.notes keeps them as facts): what `replay` prints
(`note_line`) and `replay --check` under its report; and `replay`'s closing line."""

from __future__ import annotations

from pathlib import Path

from tracer.whatif.notes import Approximate, NoFooter, Note, OtherVllm, UnrecordedUpdate


def note_sentence(note: Note) -> str:
    """One note, as both commands print it after their prefix (`note_line`)."""
    match note:
        case UnrecordedUpdate(step=step, updated=updated):
            return f"step {step}: an update for an unrecorded step ({updated}); skipped"
        case NoFooter():
            return "the trace has no footer (the run was cut short): the replay ends where it does"
        case Approximate(gaps=gaps):
            why = "it has gaps (steps the live stream lost)" if gaps else "it predates format 1.1"
            return (
                f"approximate: {why}, so it lacks the scheduler's recorded inputs. Arrivals are taken "
                "at first sighting, the proposer is assumed to offer K drafts every step, prompts share "
                "no prefix, no request is aborted, and each ends after the tokens it sampled."
            )
        case OtherVllm(recorded_on=recorded_on, replayed_on=replayed_on):
            return f"recorded on vLLM {recorded_on}, replayed on {replayed_on}: their schedulers differ"


def note_line(note: Note) -> str:
    """One note, as `replay` prints it before its closing line (`replay --check` indents it)."""
    return f"note: {note_sentence(note)}"


def written_line(path: str | Path, requests: int, policy: str) -> str:
    """`replay`'s last line, after its notes: the trace it wrote."""
    return f"wrote {path} ({requests} requests under policy {policy})"
