"""What a replay's workload or identity check notes, as facts: what happened and the steps,
ids or versions behind it. tracer.render.notes words them (`replay` and `replay --check` print
them), so the what-if layer holds no sentence."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class UnrecordedUpdate:
    """A step's inputs carry an update for a step the trace does not hold: skipped."""

    step: int  # the step whose inputs carry it
    updated: int  # the step it updates


@dataclass(frozen=True)
class NoFooter:
    """The trace has no footer (the run was cut short): the replay ends where it does."""


@dataclass(frozen=True)
class Approximate:
    """The trace lacks the scheduler's recorded inputs, so the workload is inferred."""

    gaps: bool  # True: it has gaps (steps the live stream lost); False: it predates format 1.1


@dataclass(frozen=True)
class OtherVllm:
    """Recorded on one vLLM, replayed on another whose scheduler may differ."""

    recorded_on: str
    replayed_on: str


Note = UnrecordedUpdate | NoFooter | Approximate | OtherVllm
