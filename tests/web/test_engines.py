"""--engines in the web app: a lane per engine of one run, the totals, opening an engine, two runs refused."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from dash import Dash
from dash.exceptions import PreventUpdate

from tests.engine_support import engine_copy
from tracer.cli import main
from tracer.opening.door import Spec, open_input
from web import layout as ids
from web.app import engines_figure, make_app

from .helpers import ADDITIVE

TOTALS = "2 engines · 12 steps · 65544 target tokens · 0 preempted · 56 tokens withheld · 8 flags"


@pytest.fixture
def paths(tmp_path: Path) -> list[Path]:
    # Engine 0 records all 7 steps, engine 1 only the first 5.
    return [
        engine_copy(ADDITIVE, tmp_path / "run.5918.jsonl", pid=5918),
        engine_copy(ADDITIVE, tmp_path / "run.5919.jsonl", pid=5919, steps=5),
    ]


@pytest.fixture
def app(paths: list[Path]) -> Iterator[Dash]:
    made = make_app(engines=open_input(Spec(engines=tuple(paths))).run)
    yield made
    for feed in made.feeds:  # type: ignore[attr-defined]
        feed.stop()


def test_one_lane_per_engine_on_a_shared_axis(app: Dash) -> None:
    fig = engines_figure(app.handlers.run)  # type: ignore[attr-defined]
    lanes = {t.name: t for t in fig.data if t.name.startswith("engine ")}
    assert list(lanes) == ["engine 0 (pid 5918)", "engine 1 (pid 5919)"]
    assert (
        list(lanes["engine 0 (pid 5918)"].x) == list(lanes["engine 1 (pid 5919)"].x) == [1, 2, 3, 4, 5, 6, 7]
    )
    assert list(lanes["engine 0 (pid 5918)"].y) == [8185, 8185, 8185, 8185, 28, 8, 0]
    # Engine 1 recorded no steps 6 and 7: gaps, not zeros.
    assert list(lanes["engine 1 (pid 5919)"].y) == [8185, 8185, 8185, 8185, 28, None, None]
    withheld = [list(t.y) for t in fig.data if t.name == "tokens withheld"]
    assert withheld == [[7, 7, 7, 7, None, None, None]] * 2
    titles = [a.text for a in fig.layout.annotations]
    assert titles[0].startswith("engine 0 (pid 5918)") and titles[1].startswith("engine 1 (pid 5919)")
    # Each lane has its own subplot: its traces sit on its own y axis.
    assert {t.yaxis for t in fig.data if t.name != "tokens withheld"} == {"y", "y2"}


def test_layout_opens_on_the_engines_tab_with_the_totals(app: Dash) -> None:
    tabs = app.layout[ids.TABS]
    assert tabs.value == "engines"
    totals = app.layout[ids.ENG_TOTALS]
    assert totals.children[1].children == TOTALS
    assert app.layout[ids.TRACE].options == [
        {"label": "engine 0 (pid 5918)", "value": "engine-0"},
        {"label": "engine 1 (pid 5919)", "value": "engine-1"},
    ]
    assert app.layout[ids.TRACE].value == "engine-0"


def test_a_click_on_a_lane_opens_that_engine(app: Dash) -> None:
    h = app.handlers  # type: ignore[attr-defined]
    # Figure traces 0-2 are engine 0's lane, 3-5 engine 1's.
    assert h.engines_open({"points": [{"curveNumber": 4, "x": 2}]}) == ("engine-1", "timeline")
    assert h.engines_open({"points": [{"curveNumber": 0, "x": 2}]}) == ("engine-0", "timeline")
    with pytest.raises(PreventUpdate):
        h.engines_open({"points": [{"curveNumber": 99}]})
    # The timeline page then shows that engine's own trace.
    _, state, _, _ = h.timeline(ids.TRACE, "engine-1", None, None, None, None)
    assert state["key"] == "engine-1" and state["rows"] == 5


def test_zoom_re_decimates_every_lane(app: Dash) -> None:
    patch = app.handlers.engines_zoom({"xaxis2.range[0]": 1.5, "xaxis2.range[1]": 3.5})  # type: ignore[attr-defined]
    ops = {tuple(op["location"]): op["params"]["value"] for op in patch.to_plotly_json()["operations"]}
    # Steps 2 and 3, and one step either side so the lines reach the edges; engine 1's lane too.
    assert ops[("data", 0, "x")] == ops[("data", 3, "x")] == [1, 2, 3, 4]
    assert ops[("data", 3, "y")] == [8185] * 4


def test_download_on_the_engines_tab(app: Dash) -> None:
    out = app.handlers.download(ids.DOWNLOAD_HTML, "engines", None, None)  # type: ignore[attr-defined]
    assert out["filename"] == "schedscope-engines.html" and "engine 1 (pid 5919)" in out["content"]


def test_traces_of_different_runs_are_refused(paths: list[Path], capsys: pytest.CaptureFixture[str]) -> None:
    other = engine_copy(
        ADDITIVE, paths[0].with_name("other.6000.jsonl"), pid=6000, config={"max_num_batched_tokens": 4096}
    )
    assert main(["web", "--engines", str(paths[0]), str(other)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"schedscope: error: {other}:1: field 'config.max_num_batched_tokens'")
    assert "4096 here, 8192 there" in err


def test_cli_checks_engine_files_first(paths: list[Path], capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["web", "--engines", str(paths[0]), str(paths[0].with_name("gone.jsonl"))]) == 2
    assert "gone.jsonl: no such file" in capsys.readouterr().err
    assert main(["web", str(ADDITIVE), "--engines", str(paths[0])]) == 2
    assert "give no other trace" in capsys.readouterr().err


ENGINES_DATA_JS = """
const gd = document.querySelector('#engines-graph .js-plotly-plot');
return gd.data.map(t => ({name: t.name, y: Array.from(t.y || [])}));
"""
# A click on engine 1's lane, as plotly reports one (a click by position would depend on the layout).
CLICK_JS = """
const gd = document.querySelector('#engines-graph .js-plotly-plot');
gd.emit('plotly_click', {points: [{curveNumber: 3, pointNumber: 1, x: 2, y: 8185,
                                   data: gd.data[3], fullData: gd._fullData[3]}]});
"""


@pytest.mark.usefixtures("needs_chromium")
def test_browser_shows_the_lanes_and_opens_an_engine(dash_duo: Any, app: Dash, artifacts: Path) -> None:
    dash_duo.start_server(app)
    dash_duo.wait_for_element("#engines-graph .js-plotly-plot", timeout=10)
    dash_duo.wait_for_text_to_equal("#engines-totals-line", TOTALS, timeout=10)
    names = [t["name"] for t in dash_duo.driver.execute_script(ENGINES_DATA_JS)]
    assert [n for n in names if n.startswith("engine ")] == ["engine 0 (pid 5918)", "engine 1 (pid 5919)"]
    dash_duo.driver.save_screenshot(str(artifacts / "engines.png"))
    dash_duo.driver.execute_script(CLICK_JS)
    dash_duo.wait_for_contains_text("#summary", "engine 1 (pid 5919)", timeout=10)
    assert dash_duo.find_element("#timeline .js-plotly-plot")
    assert dash_duo.get_logs() == []
