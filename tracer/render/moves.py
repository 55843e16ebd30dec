"""What the TUI says when its cursor cannot go where it was asked: a step it does not show, a
jump with nothing further, a compare side that drained first, a tail with no file growing."""

from __future__ import annotations

TAIL_NEEDS_FOLLOW = "The tail follows a growing file: open it with --follow FILE."


def not_a_step(text: str) -> str:
    """`g` was given something that is not a step number."""
    return f"not a step number: {text}"


def no_step(step: int | str, engines: bool = False) -> str:
    """`g` was given a step number no row shows (`engines`: on the engines' shared axis)."""
    return f"no engine recorded a step {step}" if engines else f"this trace has no step {step}"


def nothing_further(what: str, backwards: bool) -> str:
    """A jump (`n`/`N`) found no further `what` ("flag", "kv_blocks flag", "step that differs")."""
    return f"no {'earlier' if backwards else 'later'} {what}"


def flag_named(kind: str | None) -> str:
    """What a flag jump looks for: any flag, or one kind's."""
    return f"{kind} flag" if kind else "flag"


STEP_THAT_DIFFERS = "step that differs"


def drained(side: str, row: int, steps: int) -> str:
    """A compare side shorter than the cursor's row: it drained its workload in fewer steps."""
    return f"{side} has no step {row + 1}: it drained in {steps} steps"


def steps_differ(changed: int) -> str:
    return f"{changed} steps differ"
