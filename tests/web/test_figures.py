"""Figure builders as plain functions."""

from __future__ import annotations

import numpy as np
import plotly.graph_objects as go
import pytest
from plotly.subplots import make_subplots

from tracer.analysis.compare import compare
from tracer.analysis.flags import ADDITIVE, KINDS
from tracer.render.compare import headline_sentences
from tracer.render.text import compare_totals
from web.chart import (
    AXIS_LOOK,
    LOOK,
    MARGIN,
    MAX_MARKERS,
    XAXIS_LOOK,
    Chart,
    Line,
    Panel,
    _stacked_layout,
    build_figure,
    extend_patch,
    figure_dict,
    range_patch,
    trace_data,
)
from web.compare_view import compare_chart, headline, totals_table
from web.decimate import HOVER_CELLS, select_rows
from web.model import TraceView
from web.timeline import timeline_chart

from .helpers import sample, tiled, view


def _by_name(fig, name: str):  # type: ignore[no-untyped-def]
    return next(t for t in fig.data if t.name == name)


def test_timeline_panels_and_svg_traces() -> None:
    chart = timeline_chart(view())
    fig = build_figure(chart)
    titles = [a.text for a in fig.layout.annotations]
    for title in (
        "target tokens vs target budget",
        "input budget used: target rows + reserved draft slots",
        "drafter query rows vs their buffer",
        "buffer occupancy per forward pass (runner records)",
        "requests: running, waiting, preempted",
        "KV cache usage (%)",
    ):
        assert title in titles
    n_lines = sum(len(panel.lines) for panel in chart.panels)
    lines, markers = fig.data[:n_lines], fig.data[n_lines:]  # the Chart's order: lines, then markers
    assert len(lines) >= 17 and len(markers) == len(KINDS)  # flags are one trace per kind
    assert {t.type for t in fig.data} == {"scatter"}  # SVG throughout: no WebGL trace
    assert all(t.marker.line.color == "#222" for t in markers)


def test_the_withheld_band_is_on_every_prefill_step_and_each_is_flagged() -> None:
    fig = build_figure(timeline_chart(view()))
    reserved = _by_name(fig, "reserved (red band: excess)")
    needed = _by_name(fig, "needed by the method")
    assert list(reserved.y[:4]) == [7, 7, 7, 7] and list(needed.y[:4]) == [0, 0, 0, 0]
    assert _by_name(fig, "used incl. reserved draft slots").y[0] == 8192
    assert _by_name(fig, "of which target rows").y[0] == 8185
    flags = next(t for t in fig.data if t.type == "scatter" and t.name.startswith("additive"))
    assert list(flags.x) == [1, 2, 3, 4] and set(flags.y) == {ADDITIVE}
    assert flags.marker.color == "#d62728"
    assert "withheld 7 target tokens" in flags.hovertext[0] and "tokens_withheld=7" in flags.hovertext[0]
    assert list(_by_name(fig, "target tokens withheld").y[:5]) == [7, 7, 7, 7, None]


def test_big_traces_send_at_most_4k_points_per_trace_and_zoom_re_decimates() -> None:
    v = TraceView.build("big", "big", tiled(60_000))
    chart = timeline_chart(v)
    fig = build_figure(chart)
    assert max(len(t.x) for t in fig.data) <= 4000
    # Flag markers are thinned evenly to MAX_MARKERS a kind (they overlap into a band beyond it).
    marker_traces = fig.data[-len(chart.markers) :]
    counts = [(len(m.rows), len(t.x)) for m, t in zip(chart.markers, marker_traces, strict=True)]
    assert any(flags > MAX_MARKERS for flags, _ in counts)
    assert all(shown == min(flags, MAX_MARKERS) for flags, shown in counts), counts
    patch = range_patch(chart, (30_000.0, 31_000.0)).to_plotly_json()
    xs = [op["params"]["value"] for op in patch["operations"] if op["location"][-1] == "x"]
    assert max(len(x) for x in xs) <= 1003 and min(xs[0]) >= 29_999 and max(xs[0]) <= 31_001
    assert all(op["operation"] == "Assign" for op in patch["operations"])
    # The arrays, and the new data revision that tells plotly.js they changed (web.chart).
    assert {tuple(op["location"]) for op in patch["operations"] if op["location"][0] != "data"} == {
        ("layout", "datarevision")
    }


def test_a_decimated_line_shows_every_step_of_its_group_and_a_cap_line_sends_a_point_a_cell() -> None:
    v = TraceView.build("big", "big", tiled(60_000))
    chart = timeline_chart(v)
    fig = figure_dict(chart)
    by_name = {t["name"]: t for t in fig["data"]}
    budget, used = by_name["target budget"], by_name["target used"]
    assert len(budget["x"]) <= HOVER_CELLS + 2 < len(used["x"])  # the cap never moves
    # Each line, drawn as plotly.js draws it ("hv": a value holds until the next point), shows
    # the value of every row its group's decimation chose.
    rows = select_rows([line.y for line in chart.panels[1].lines], 0, len(chart.x))
    for line in chart.panels[1].lines:
        t = by_name[line.name]
        assert t["line"]["shape"] == "hv"
        drawn = np.asarray(t["y"])[np.searchsorted(t["x"], chart.x[rows], "right") - 1]
        assert np.array_equal(drawn, line.y[rows]), line.name


def test_extend_patch_appends_only_new_steps() -> None:
    small = TraceView.build("live", "live", tiled(10))
    grown = TraceView.build("live", "live", tiled(14))
    ops = extend_patch(timeline_chart(grown), len(small)).to_plotly_json()["operations"]
    revision = [op for op in ops if op["location"] == ["layout", "datarevision"]]
    assert len(revision) == 1 and revision[0]["operation"] == "Assign"
    ops = [op for op in ops if op not in revision]
    assert {op["operation"] for op in ops} == {"Extend"}
    assert ops[0]["location"] == ["data", 0, "x"] and ops[0]["params"]["value"] == [11, 12, 13, 14]
    flag_ops = [op for op in ops if op["location"][-1] == "hovertext"]
    assert flag_ops and all(len(op["params"]["value"]) >= 1 for op in flag_ops)


def test_runner_gaps_and_panel_notes() -> None:
    fig = build_figure(timeline_chart(view("live_cpu_ngram.jsonl")))
    rows = _by_name(fig, "target pass rows")
    assert any(v is not None and v > 0 for v in rows.y)
    assert "no runner records in this trace" not in [a.text for a in fig.layout.annotations]
    fig = build_figure(timeline_chart(view()))
    assert "no runner records in this trace" in [a.text for a in fig.layout.annotations]
    assert all(v is None for v in _by_name(fig, "target pass rows").y)


def test_compare_chart_aligns_like_the_model_and_shows_the_gain() -> None:
    c = compare(sample("dflash_k7_additive.jsonl"), sample("dflash_k7_separate.jsonl"))
    data = trace_data(compare_chart(c))
    a_target, b_target, delta = data[0]["y"], data[1]["y"], data[2]["y"]
    assert a_target[:4] == [8185] * 4 and b_target[:4] == [8192] * 4 and delta[:4] == [7] * 4
    assert headline(c) == headline_sentences(c)
    assert np.array_equal(data[0]["x"], c.steps)


def test_totals_are_coloured_by_their_direction_not_their_label() -> None:
    c = compare(sample("dflash_k7_additive.jsonl"), sample("dflash_k7_separate.jsonl"))
    table = totals_table(c)
    body = table.children[1].children
    shown = {row.children[0].children: row.children[3].className for row in body}
    assert shown == {t.label: t.verdict for t in compare_totals(c)}
    assert shown["steps to drain"] == "better" and shown["target_used (sum)"] == ""
    titles = {row.children[0].children: row.children[0].title for row in body}
    assert titles["tokens withheld"] == "fewer is better" and titles["query_rows (sum)"] is None


def test_a_new_flag_kind_draws_everywhere(monkeypatch: pytest.MonkeyPatch) -> None:
    """A kind added to the registry (one entry) gets its marker trace, axis tick, legend name
    and filter option; a kind no registry knows is still listed and inspected (no KeyError)."""
    from tests.flag_support import FAKE, FAKE_SHORT, STRAY, add_fake_kinds
    from web import flagtable, layout
    from web.inspector import inspector

    add_fake_kinds(monkeypatch)
    v = view()
    fig = build_figure(timeline_chart(v))
    assert _by_name(fig, f"{FAKE_SHORT} (1)").marker.color == "#123456"
    assert FAKE_SHORT in fig.layout.yaxis.ticktext
    page = str(layout.layout([], default=None, compare_pair=(None, None), live=False, max_upload=1 << 20))
    assert FAKE in page
    shown = str(flagtable.table(v.report.flags, len(v.report.flags)))
    assert FAKE in shown and STRAY in shown
    inspected = str(inspector(v, int(v.steps[0])))
    assert FAKE in inspected and STRAY in inspected


@pytest.mark.parametrize("name", ["dflash_k7_additive.jsonl", "live_cpu_ngram.jsonl"])
@pytest.mark.parametrize("shown", [{}, {"x_range": (2.0, 5.0), "selected": 3, "title": "run A"}])
def test_the_figure_dict_is_what_plotly_makes_of_it(name: str, shown: dict) -> None:
    """The timeline's figure is built as plain dicts (web.chart.figure_dict) rather than plotly
    objects; plotly's own validation must give back exactly that dict (no property it would drop,
    rename or coerce)."""
    import plotly.graph_objects as go

    chart = timeline_chart(view(name))
    fig = figure_dict(chart, shown.get("x_range"), selected=shown.get("selected"), title=shown.get("title"))
    made = go.Figure(fig).to_dict()
    made["layout"].pop("template")  # plotly.py adds its default; the browser gets none (web.chart)
    assert made == fig
    one, two = figure_dict(chart), figure_dict(chart)
    # Each figure is a new data revision; apart from it, the shared layout frame is never changed by a call.
    assert one["layout"].pop("datarevision") < two["layout"].pop("datarevision")
    assert one == two


def test_the_timeline_answers_go_through_dash_in_one_json_pass(monkeypatch: pytest.MonkeyPatch) -> None:
    """Dash encodes a callback's answer with plotly's to_json_plotly: one orjson pass when the
    answer is plain JSON types, else a walk of every list in Python first (0.1-0.2 s for the
    200k-step timeline's 750 KB). The whole figure and a zoom's patch must take the one pass."""
    import plotly.io._json as plotly_json
    from dash._utils import to_json

    from web import layout as ids
    from web.callbacks import Handlers, wire
    from web.store import TraceStore

    def walk(*_: object, **__: object) -> None:
        raise AssertionError("the answer was walked in Python before encoding")

    monkeypatch.setattr(plotly_json, "clean_to_json_compatible", walk)
    store = TraceStore()
    store.put(TraceView.build("a", "A", tiled(10_000)))
    h = Handlers(store)
    fig, state, *_ = h.timeline(None, "a", None, None, None, None)
    patch, *_ = h.timeline(ids.GRAPH, "a", {"xaxis.range[0]": 10, "xaxis.range[1]": 900}, None, state, None)
    for answer in (fig, patch):
        assert to_json({"multi": True, "response": {ids.GRAPH: {"figure": wire(answer)}}})


def _subplots_layout(chart: Chart) -> dict:
    """The stacked layout as plotly's make_subplots builds it (what web.chart wrote before it
    wrote the arithmetic itself), made one x axis: the reference for _stacked_layout."""
    n = len(chart.panels)
    weights = [p.weight for p in chart.panels]
    fig = make_subplots(
        rows=n,
        cols=1,
        shared_xaxes=True,
        vertical_spacing=0.035 if n < 8 else 0.028,
        row_heights=[w / sum(weights) for w in weights],
        subplot_titles=[p.title for p in chart.panels],
    )
    fig.update_annotations(font_size=12)
    for p, panel in enumerate(chart.panels):
        axis = fig.layout["yaxis" if p == 0 else f"yaxis{p + 1}"]
        auto = {} if "range" in panel.yaxis else {"autorange": True}
        axis.update({"type": "linear", **AXIS_LOOK, **auto, **panel.yaxis})
        fig.layout[f"legend{p + 1}" if p else "legend"] = {
            "x": 1.01,
            "y": axis.domain[1],
            "yanchor": "top",
            "xanchor": "left",
            "font": {"size": 11},
            "bgcolor": "rgba(255,255,255,0)",
            "traceorder": "normal",
        }
        if panel.note:
            fig.add_annotation(
                text=panel.note,
                xref="x domain",
                yref=f"y{p + 1 if p else ''} domain",
                x=0.5,
                y=0.5,
                showarrow=False,
                font={"color": "#888"},
            )
    fig.update_layout(margin=MARGIN, hovermode="x", **LOOK)
    layout = fig.to_dict()["layout"]
    layout.pop("template")
    for r in range(2, n + 1):
        del layout[f"xaxis{r}"]
    layout["xaxis"] = {
        "anchor": f"y{n}" if n > 1 else "y",
        "domain": [0.0, 1.0],
        "type": "linear",
        "title": {"text": "step"},
        "autorange": True,
        **XAXIS_LOOK,
    }
    for r in range(1, n + 1):
        layout[f"yaxis{r}" if r > 1 else "yaxis"]["anchor"] = "x"
    return layout


def _charts() -> list[Chart]:
    c = compare(view().session, view("dflash_k7_separate.jsonl").session)
    return [
        timeline_chart(view("live_cpu_ngram.jsonl")),  # a panel note
        timeline_chart(view()),
        compare_chart(c),
        Chart(x=np.arange(3), panels=(Panel("one", (Line("a", np.ones(3), "#000000"),)),)),
    ]


@pytest.mark.parametrize("chart", _charts(), ids=["timeline-notes", "timeline", "compare", "one-panel"])
def test_the_stacked_layout_is_make_subplots_one_x_axis(chart: Chart) -> None:
    ours = _stacked_layout(chart.panels)
    assert _close(ours, _subplots_layout(chart))
    assert _close(go.Layout(ours).to_plotly_json(), ours)  # plotly takes it as it is


def _close(a: object, b: object, path: str = "layout") -> bool:
    if isinstance(a, dict) and isinstance(b, dict):
        assert a.keys() == b.keys(), (path, sorted(a.keys() ^ b.keys()))
        return all(_close(a[k], b[k], f"{path}.{k}") for k in a)
    if isinstance(a, list) and isinstance(b, list):
        assert len(a) == len(b), path
        return all(_close(x, y, f"{path}[{i}]") for i, (x, y) in enumerate(zip(a, b, strict=True)))
    if isinstance(a, float) or isinstance(b, float):
        assert a == pytest.approx(b, abs=1e-12), (path, a, b)
        return True
    assert a == b, (path, a, b)
    return True
