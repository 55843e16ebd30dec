"""What the why views draw, from the model layer: the reasons' colours, the request lanes
(tracer.analysis.request_lanes) and the waiting-by-reason series, on the sample traces."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

from tests.conftest import ROOT
from tracer.analysis import request_lanes as rl
from tracer.analysis.reasons import CODES, REASONS, color
from tracer.analysis.session import Session
from tracer.analysis.step_bindings import waiting_weights
from tracer.opening.door import Spec, open_input
from tracer.render.why import lanes_note, segment_text, state_label

SAMPLES = ROOT / "sample_traces"
LIVE = SAMPLES / "live_cpu_ngram.jsonl"


def opened(path: Path) -> Session:
    return open_input(Spec(traces=(path,))).session


@pytest.fixture(scope="module")
def live() -> Session:
    return opened(LIVE)


def test_every_reason_has_its_own_colour() -> None:
    colours = [REASONS[c].color for c in CODES]
    assert all(re.fullmatch(r"#[0-9A-F]{6}", c) for c in colours)
    assert len(set(colours)) == len(colours)
    assert color("max_num_seqs") == "#E69F00" and color("no such code") == REASONS["unknown"].color


def test_live_sample_waiting_requests_are_held_by_max_num_seqs_at_steps_3_to_19(live: Session) -> None:
    lanes = live.request_lanes()
    assert (lanes.start, lanes.end, lanes.requests, len(lanes.lanes)) == (0, 52, 12, 12)
    waiting = {}
    for lane in lanes.lanes:
        for step in range(3, 20):
            seg = lane.at(live.row_of(step))
            if seg is not None and seg.state == rl.WAITING:
                waiting.setdefault(step, []).append((lane.id, seg.code))
    assert sorted(waiting) == list(range(3, 20))
    for step, held in waiting.items():
        assert len(held) == 4, step
        assert {code for _, code in held} == {"max_num_seqs"}, step
    # One request's lane: waiting behind the spent budget at step 2, then max_num_seqs, then running.
    lane = next(x for x in lanes.lanes if x.id == "cmpl-b451ef580968e36c-0-8e741a70")
    assert [(s.first, s.last, s.state, s.code) for s in lane.segments] == [
        (2, 2, "waiting", "target_budget"),
        (3, 23, "waiting", "max_num_seqs"),
        (24, 47, "scheduled", "none"),
    ]
    assert segment_text(lane.segments[1]) == "steps 3–23 waiting: max_num_seqs"
    assert lanes_note(lanes) == "12 requests, steps 1–52"


def test_live_sample_waiting_by_reason_series(live: Session) -> None:
    series = live.waiting_by_reason
    assert list(series) == ["max_num_seqs", "target_budget"]  # largest total first
    seqs = series["max_num_seqs"]
    rows = [live.row_of(s) for s in range(3, 20)]
    assert seqs[rows].tolist() == [4] * 17
    assert int(seqs.sum()) == live.waiting_summary.by_reason["max_num_seqs"] == 79
    assert series["target_budget"][live.row_of(2)] == 6
    total = np.sum(list(series.values()), axis=0)
    assert total.tolist() == waiting_weights(live.trace).tolist()


def test_lanes_are_bounded_and_say_so(live: Session) -> None:
    few = rl.request_lanes(live.trace, 0, None, max_lanes=3)
    assert len(few.lanes) == 3 and few.requests == 12 and few.left_out == 9
    assert "3 of 12 requests" in lanes_note(few) and "9 more: zoom in" in lanes_note(few)
    window = rl.request_lanes(live.trace, 10, 15)
    assert (window.start, window.end) == (10, 15)
    assert all(s.first >= 11 and s.last <= 15 for lane in window.lanes for s in lane.segments)
    old, rl.MAX_WINDOW = rl.MAX_WINDOW, 4
    try:
        short = rl.request_lanes(live.trace, 0, 52)
    finally:
        rl.MAX_WINDOW = old
    assert (short.end, short.rows_asked, short.clipped_window) == (4, 52, True)
    assert "4 of the 52 steps asked read" in lanes_note(short)
    # A busy step counts for its requests: the window ends once they pass MAX_ENTRIES.
    c = live.trace.columns
    named = (c["n_running"] + c["n_new"] + c["n_resumed"])[:52].astype(int)
    bound = int(named[:7].sum())  # exactly the first 7 steps' entries
    old, rl.MAX_ENTRIES = rl.MAX_ENTRIES, bound
    try:
        busy = rl.request_lanes(live.trace, 0, 52)
    finally:
        rl.MAX_ENTRIES = old
    assert (busy.end, busy.rows_asked, busy.clipped_window) == (7 + int((named[7:] == 0).argmin()), 52, True)
    assert f"{busy.end} of the 52 steps asked read" in lanes_note(busy)
    full = rl.request_lanes(live.trace, 0, 52)
    assert [lane.id for lane in busy.lanes] == [lane.id for lane in full.lanes][: len(busy.lanes)]


def test_lanes_show_preemptions_and_clips() -> None:
    session = opened(SAMPLES / "ngram_preempt.jsonl")
    lanes = session.request_lanes()
    states = {s.state for lane in lanes.lanes for s in lane.segments}
    assert rl.PREEMPTED in states
    pre = [s for lane in lanes.lanes for s in lane.segments if s.state == rl.PREEMPTED]
    assert all(s.code == "preemption" for s in pre)
    preempted_steps = {
        int(session.trace.columns["step"][r]) for r in np.flatnonzero(session.trace.columns["n_preempted"])
    }
    assert {s.first for s in pre} <= preempted_steps and pre
    additive = opened(SAMPLES / "dflash_k7_additive.jsonl").request_lanes()
    first = additive.lanes[0].segments[0]
    assert (first.state, first.code) == ("clipped", "input_budget")
    assert state_label("clipped", "input_budget") == "clipped: input budget after draft-slot reservations"
    assert state_label("scheduled", "none") == "scheduled in full"


def test_a_session_keeps_recent_lane_windows_computed_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """A zoom in and back out asks for the wider window again (the web app's Gantt, on every
    zoom): it is kept, not recomputed at about 1.3 ms a step; two threads asking for one window
    (a zoom's answer and a tick's) compute it once."""
    import threading

    import tracer.analysis.session as session_module

    computed: list[tuple[int, int | None]] = []
    real = rl.request_lanes

    def counted(trace, start=0, end=None, **kw):  # type: ignore[no-untyped-def]
        computed.append((start, end))
        return real(trace, start, end, **kw)

    monkeypatch.setattr(session_module.lanes_model, "request_lanes", counted)
    s = opened(LIVE)
    whole = s.request_lanes()
    assert s.request_lanes(10, 20) is not whole and s.request_lanes() is whole  # back out: kept
    for i in range(session_module.LANES_KEPT):
        s.request_lanes(i, i + 5)
    assert s.request_lanes() is not whole  # the oldest window went
    computed.clear()
    threads = [threading.Thread(target=s.request_lanes, args=(30, 40)) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert computed == [(30, 40)]
