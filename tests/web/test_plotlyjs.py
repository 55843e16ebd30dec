"""The page's plotly.js (web.plotlyjs): plotly.js's cartesian bundle, asked for from the page's
head, served only when it is the plotly.js the plotly package writes figures for."""

from __future__ import annotations

import re
from pathlib import Path

import plotly
import pytest
from dash import Dash

from tracer.analysis.compare import compare
from web import plotlyjs
from web.app import make_app
from web.chart import build_figure, figure_dict
from web.compare_view import compare_chart
from web.sweep_figure import sweep_figure
from web.timeline import timeline_chart
from web.why_view import gantt_figure, waiting_figure

from .helpers import LIVE_NGRAM, sample, view
from .test_sweep_page import _doc

PACKAGE_BUNDLE = Path(plotly.__file__).parent / "package_data" / "plotly.min.js"
ADDRESS = "/" + plotlyjs.PLOTLY_PATH


def _served(app: Dash) -> tuple[str, bytes]:
    client = app.server.test_client()
    page = client.get("/").get_data(as_text=True)
    return page, client.get(ADDRESS).get_data()


def test_the_page_asks_for_plotly_js_from_its_head_and_gets_the_cartesian_bundle() -> None:
    assert plotlyjs.bundle_version() == "4.1.1"
    if plotlyjs.fallback() is not None:  # a newer plotly than the bundle: the next test's branch
        pytest.xfail(plotlyjs.fallback())
    page, body = _served(make_app(sample(LIVE_NGRAM)))
    head = page.split("</head>")[0]
    assert f'<link rel="preload" as="script" href="{ADDRESS}">' in head
    assert body == plotlyjs.BUNDLE.read_bytes()
    assert len(body) < PACKAGE_BUNDLE.stat().st_size / 3


def test_another_plotly_js_gets_the_plotly_package_s_bundle(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(plotlyjs, "plotly_version", lambda: "9.9.9")
    reason = plotlyjs.fallback()
    assert reason is not None and "4.1.1" in reason and "9.9.9" in reason
    page, body = _served(make_app(sample(LIVE_NGRAM)))
    assert f'href="{ADDRESS}"' in page.split("</head>")[0]  # still asked for early: the full one
    assert body == PACKAGE_BUNDLE.read_bytes()


def _types(figure: dict) -> set[str]:
    return {t.get("type", "scatter") for t in figure["data"]}


def test_every_trace_type_the_pages_draw_is_in_the_bundle() -> None:
    registered = set(re.findall(rb'moduleType:"trace",name:"(\w+)"', plotlyjs.BUNDLE.read_bytes()))
    assert {b"scatter", b"bar"} <= registered and b"scatter3d" not in registered
    v = view(LIVE_NGRAM)
    used = (
        _types(figure_dict(timeline_chart(v)))
        | _types(waiting_figure(v))
        | _types(gantt_figure(v, v.session.request_lanes()))
        | _types(
            build_figure(
                compare_chart(compare(v.session, view("dflash_k7_separate.jsonl").session))
            ).to_dict()
        )
        | _types(sweep_figure(_doc()).to_dict())
    )
    assert used == {"scatter", "bar"}
    assert {t.encode() for t in used} <= registered
