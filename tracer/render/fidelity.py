"""The identity check in words: `replay --check`'s report, its headline as `replay`, `diff`
and `doctor` print it, and a what-if trace's baseline identity error."""

from __future__ import annotations

from typing import Any

from tracer.render.notes import note_line
from tracer.whatif.fidelity import Fidelity


def _short(value: Any, limit: int = 160) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def fidelity_lines(f: Fidelity) -> list[str]:
    """The identity check as `replay --check`, `diff` and `doctor` print it."""
    verdict = "re-makes the run exactly" if f.identical else "does NOT re-make the run"
    lines = [
        f"identity replay under {f.policy}: {f.identical_steps} of {f.recorded_steps} recorded steps "
        f"identical ({f.identical_share:.1%}): {verdict}",
        f"  steps {f.recorded_steps} recorded, {f.replayed_steps} replayed "
        f"({f.replayed_steps - f.recorded_steps:+d}); target tokens {f.recorded_tokens} recorded, "
        f"{f.replayed_tokens} replayed ({f.replayed_tokens - f.recorded_tokens:+d})",
    ]
    if f.first is not None:
        lines.append(f"  first divergent step {f.first.step}:")
        for name, (rec, rep) in f.first.fields.items():
            lines.append(f"    {name}: recorded {_short(rec)}")
            lines.append(f"    {' ' * len(name)}  replayed {_short(rep)}")
    lines.extend(f"  {note_line(note)}" for note in f.notes)
    return lines


def identity_line(header: dict[str, Any]) -> str | None:
    """One line on a what-if trace's baseline identity error (its header's `replay` block)."""
    info = (header.get("replay") or {}).get("identity")
    if not info:
        return None
    n, same = info["recorded_steps"], info["identical_steps"]
    if info["identical"]:
        return f"replay identity error: none (the recorded policy's replay re-makes all {n} steps)"
    return (
        f"replay identity error: the recorded policy's replay matches {same} of {n} steps, first "
        f"diverging at step {info['first_divergent_step']}, target tokens "
        f"{info['replayed_tokens'] - info['recorded_tokens']:+d}: part of this diff is replay error, "
        "not the policy"
    )
