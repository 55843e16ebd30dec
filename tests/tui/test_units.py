"""Pure pieces of the TUI: the zoom window, column binning, flag navigation, the source adapter."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from textual.message import Message

from tests.tui.helpers import ADDITIVE, SAMPLES
from tracer.trace.reader import load
from tracer.trace.source import Phase, TraceSource
from tui.bins import MIN_SPAN, Columns, Window, eighths
from tui.data import CompareModel, TraceModel
from tui.feed import Progress, Snapshot, StateChanged, connect


def test_window_zoom_pan_follow_stay_in_range() -> None:
    total = 1_000_000
    w = Window.fit(total)
    for _ in range(30):
        w = w.zoom(0.5, 999_999, total)
        assert w.start <= 999_999 < w.end <= total
    assert w.span == MIN_SPAN
    assert w.pan(-0.5, total).start < w.start
    assert Window(0, 10).follow(50, 100) == Window(41, 10)
    assert Window.fit(3).zoom(2, 1, 3) == Window(0, 3)


def test_columns_reduce_max_sum_and_mean_per_bin() -> None:
    values = np.arange(100, dtype=np.int64)
    cols = Columns.of(Window(0, 100), 10)
    assert cols.max(values).tolist() == list(range(9, 100, 10))
    assert cols.sum(values)[0] == sum(range(10))
    assert cols.mean(values)[1] == 14.5
    assert cols.of_row(55) == (5, 6)
    stretched = Columns.of(Window(0, 4), 12)  # 3 columns per step
    assert stretched.stretched and stretched.spans() == [(0, 0, 3), (1, 3, 6), (2, 6, 9), (3, 9, 12)]
    assert stretched.of_row(2) == (6, 9)
    assert Columns.of(Window(0, 10), 5).max(np.arange(4)).tolist() == [1, 3, 0, 0, 0]  # past the end: 0


def test_eighths_never_hide_a_nonzero_value() -> None:
    assert eighths(np.array([0, 1, 8192]), 8192, 3).tolist() == [0, 1, 24]


def test_flag_navigation_and_compare_changes() -> None:
    model = TraceModel.build(load(SAMPLES / "dspark_k4_additive.jsonl"))
    assert model.flag_rows.tolist() == [0, 1, 3, 4, 5, 7]
    assert model.next_flag(1) == 3 and model.next_flag(7) is None
    assert model.next_flag(7, backwards=True) == 5 and model.next_flag(0, backwards=True) is None
    assert model.next_flag(0, "query-overflow") is None
    assert [f.step for f in model.flags_at(7)] == [8] and model.flags_at(2) == []
    assert model.severity_by_row().tolist() == [2, 2, 0, 2, 2, 2, 0, 2, 0, 0]
    cmp = CompareModel.build(load(ADDITIVE), load(SAMPLES / "dflash_k7_separate.jsonl"))
    assert cmp.changed[0] == 0 and cmp.next_change(0) == 1


class _Sink:
    def __init__(self) -> None:
        self.messages: list[Message] = []

    def post_message(self, message: Message) -> bool:
        self.messages.append(message)
        return True


def test_the_adapter_posts_the_source_as_messages_that_coalesce() -> None:
    sink = _Sink()
    source = connect(TraceSource.file(ADDITIVE), sink)  # type: ignore[arg-type]
    assert source.start().join(10)
    snaps = [m for m in sink.messages if isinstance(m, Snapshot)]
    assert [s.version for s in snaps] == [1] and snaps[0].done and len(snaps[0].model) == 7
    states = [m.state.phase for m in sink.messages if isinstance(m, StateChanged)]
    assert states[-1] is Phase.COMPLETE
    progress = [m for m in sink.messages if isinstance(m, Progress)]
    assert progress[-1].read == progress[-1].total == ADDITIVE.stat().st_size
    a, b = Progress(source, 1, 2), Progress(source, 2, 2)
    assert a.can_replace(b) and not a.can_replace(snaps[0])
    assert not a.can_replace(Progress(TraceSource.file(ADDITIVE), 2, 2))  # another source's


def test_compare_totals_show_throughput_and_latency_side_by_side() -> None:
    from tui.screens.compare import totals_lines

    cmp = CompareModel.build(load(ADDITIVE), load(SAMPLES / "dflash_k7_separate.jsonl"))
    text = "\n".join(totals_lines(cmp))
    for label in (
        "prompt tok/s",
        "output tok/s",
        "TTFT p50 ms",
        "TTFT p99 ms",
        "TPOT p99 ms",
        "time to drain ms",
    ):
        assert label in text, label
    assert "measured" in text and "Times: A measured from its own timestamps" in text


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({}, "tui needs a TRACE"),
        ({"trace": ADDITIVE, "follow": ADDITIVE}, "--follow and --attach open a trace alone"),
        ({"trace": ADDITIVE, "engines": [ADDITIVE]}, "--engines opens one run's traces"),
        ({"trace": ADDITIVE, "compare": True}, "--compare needs two traces"),
        ({"trace": TraceSource.file(ADDITIVE), "follow": ADDITIVE}, "not both"),
    ],
)
def test_make_app_refuses_what_the_command_line_refuses(kwargs: dict[str, Any], message: str) -> None:
    """tui.make_app runs the command line's one check (tracer.opening.door.check)."""
    from tui import make_app

    with pytest.raises(ValueError, match=message):
        make_app(**kwargs)


def test_the_compare_screen_compares_the_sessions_the_door_opened() -> None:
    """A and B opened through tracer.opening.door with TraceModel.build are the compare
    model's sides: their reports are not computed again."""
    from tracer.opening.door import Spec, open_input

    spec = Spec(traces=(ADDITIVE, SAMPLES / "dflash_k7_separate.jsonl"), session=TraceModel.build)
    a, b = open_input(spec).pair
    report = a.report
    cmp = CompareModel.build(a, b)  # type: ignore[arg-type]
    assert cmp.a is a and cmp.b is b and cmp.a.report is report
