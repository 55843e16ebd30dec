"""The web app's why views as plain functions: the waiting-by-reason area chart, the request
Gantt and its click, on the bundled live sample (no browser)."""

from __future__ import annotations

from typing import Any

import plotly.graph_objects as go
import pytest
from dash.exceptions import PreventUpdate

from tracer.analysis.reasons import color
from web.store import TraceStore
from web.why_view import WhyHandlers, gantt_figure, lane_label, waiting_figure

from .helpers import LIVE_NGRAM, sample, view

SAMPLE_ID = "cmpl-b451ef580968e36c-0-8e741a70"


def _fig(d: dict[str, Any]) -> go.Figure:
    """The why views' plain-dict figures, as plotly objects to read (validated by plotly)."""
    return go.Figure(d)


@pytest.fixture
def h() -> WhyHandlers:
    store = TraceStore(max_upload=1 << 20)
    store.add("live", "live sample", sample(LIVE_NGRAM))
    return WhyHandlers(store)


def test_waiting_area_stacks_max_num_seqs_at_steps_3_to_19() -> None:
    fig = _fig(waiting_figure(view(LIVE_NGRAM)))
    by_name = {t.name: t for t in fig.data}
    assert list(by_name) == ["max_num_seqs (79)", "target token budget (6)"]
    seqs = by_name["max_num_seqs (79)"]
    assert seqs.stackgroup == "waiting" and seqs.fillcolor == color("max_num_seqs")
    y = dict(zip(seqs.x, seqs.y, strict=True))
    assert [y[s] for s in range(3, 20)] == [4] * 17
    assert (
        dict(zip(by_name["target token budget (6)"].x, by_name["target token budget (6)"].y, strict=True))[2]
        == 6
    )


def test_waiting_area_follows_the_timeline_zoom(h: WhyHandlers) -> None:
    fig = _fig(h.waiting("live", {"xaxis.range[0]": 5, "xaxis.range[1]": 10}))
    assert list(fig.layout.xaxis.range) == [5, 10]
    assert min(fig.data[0].x) >= 4 and max(fig.data[0].x) <= 11  # one row of margin each side
    with pytest.raises(PreventUpdate):
        h.waiting("nothing", None)


def test_gantt_lanes_are_coloured_by_reason_and_patterned_by_state() -> None:
    v = view(LIVE_NGRAM)
    fig = _fig(gantt_figure(v, v.session.request_lanes()))
    names = [t.name for t in fig.data]
    assert "waiting: max_num_seqs" in names and "scheduled in full" in names
    waiting = fig.data[names.index("waiting: max_num_seqs")]
    assert waiting.marker.color == color("max_num_seqs") and waiting.marker.pattern.shape == "/"
    assert fig.data[names.index("scheduled in full")].marker.pattern.shape == ""
    # Four lanes wait through steps 3–19 for max_num_seqs: bars that cover the whole range.
    covering = [
        c[0]
        for c, base, x in zip(waiting.customdata, waiting.base, waiting.x, strict=True)
        if base <= 2.5 and base + x >= 19.5
    ]
    assert len(covering) == 4 and SAMPLE_ID in covering
    lane = next(c for c in waiting.customdata if c[0] == SAMPLE_ID)
    assert lane[1] == "steps 3–23 waiting: max_num_seqs"
    assert lane_label(SAMPLE_ID) in set(waiting.y)
    assert "12 requests, steps 1–52" in fig.layout.title.text


def test_gantt_follows_the_zoom_and_its_click_opens_the_why(h: WhyHandlers) -> None:
    fig = _fig(h.gantt("live", {"xaxis.range[0]": 30, "xaxis.range[1]": 40}))
    assert all(b >= 28.5 for t in fig.data for b in t.base)  # steps 29..41 read (a row of margin)
    click = {"points": [{"customdata": [SAMPLE_ID, "steps 3–23 waiting: max_num_seqs"]}]}
    panel = h.why(click, "live")
    text = panel[1].children
    assert text.startswith(f"request {SAMPLE_ID}")
    assert "steps 3–23       waiting            needs 18: max_num_seqs=8" in text
    with pytest.raises(PreventUpdate):
        h.why(None, "live")
    assert "No request nobody" in h.why({"points": [{"customdata": ["nobody", ""]}]}, "live")[0].children


@pytest.mark.parametrize("zoom", [None, {"xaxis.range[0]": 5, "xaxis.range[1]": 30}])
def test_the_why_figures_are_what_plotly_makes_of_them(h: WhyHandlers, zoom: dict[str, Any] | None) -> None:
    """Built as plain dicts (no plotly objects on a zoom's path); plotly's own validation must
    give each back exactly (no property it would drop, rename or coerce)."""
    for fig in (h.waiting("live", zoom), h.gantt("live", zoom)):
        made = go.Figure(fig).to_dict()
        made["layout"].pop("template")  # plotly.py adds its default; the page gets none
        assert made == fig


def test_waiting_area_names_the_draft_input_budget_under_the_draft_budget_policy() -> None:
    """The fork's policy in the web app: the one waiting request-step of step 4 is stacked under
    the draft-input budget, in that reason's colour."""
    fig = _fig(waiting_figure(view("dspark_k4_draft_budget.jsonl")))
    by_name = {t.name: t for t in fig.data}
    held = by_name["draft-input budget (drafter rows) (1)"]
    assert held.fillcolor == color("draft_budget")
    assert dict(zip(held.x, held.y, strict=True))[4] == 1
