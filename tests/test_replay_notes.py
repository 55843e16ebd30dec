"""A replay's notes are facts in tracer.whatif.notes and words in tracer.render.notes: each
kind's sentence, as `replay` prints it after `note:` (the version note needs two vLLMs to
happen, so it is pinned here)."""

from __future__ import annotations

import pytest

from tracer.render.notes import note_sentence, written_line
from tracer.whatif.notes import Approximate, NoFooter, Note, OtherVllm, UnrecordedUpdate

APPROXIMATE = (
    "so it lacks the scheduler's recorded inputs. Arrivals are taken at first sighting, the "
    "proposer is assumed to offer K drafts every step, prompts share no prefix, no request is "
    "aborted, and each ends after the tokens it sampled."
)


@pytest.mark.parametrize(
    ("note", "said"),
    [
        (UnrecordedUpdate(3, 999), "step 3: an update for an unrecorded step (999); skipped"),
        (NoFooter(), "the trace has no footer (the run was cut short): the replay ends where it does"),
        (Approximate(gaps=False), f"approximate: it predates format 1.1, {APPROXIMATE}"),
        (Approximate(gaps=True), f"approximate: it has gaps (steps the live stream lost), {APPROXIMATE}"),
        (
            OtherVllm("0.31.0", "0.32.0"),
            "recorded on vLLM 0.31.0, replayed on 0.32.0: their schedulers differ",
        ),
    ],
)
def test_each_note_in_words(note: Note, said: str) -> None:
    assert note_sentence(note) == said


def test_replays_closing_line() -> None:
    assert written_line("out.jsonl", 6, "stock") == "wrote out.jsonl (6 requests under policy stock)"
