"""--engines: the engines of one data-parallel run as lanes, their totals, opening one, refusing two runs."""

from __future__ import annotations

from pathlib import Path

import pytest
from textual.pilot import Pilot

from tests.engine_support import engine_copy
from tests.tui.helpers import ADDITIVE, drive, wait_until
from tracer.cli import main as cli_main
from tui import make_app
from tui.screens.engines import EngineScreen, EnginesScreen
from tui.screens.error import ErrorScreen
from tui.screens.help import HelpScreen
from tui.widgets.timeline import Timeline


@pytest.fixture
def engines(tmp_path: Path) -> list[Path]:
    # Engine 0 records all 7 steps, engine 1 only the first 5: lanes of different lengths.
    return [
        engine_copy(ADDITIVE, tmp_path / "run.5918.jsonl", pid=5918),
        engine_copy(ADDITIVE, tmp_path / "run.5919.jsonl", pid=5919, steps=5),
    ]


def lane_text(screen: EnginesScreen) -> list[str]:
    timeline = screen.query_one(Timeline)
    return [timeline.render_line(y).text for y in range(timeline.size.height)]


def test_one_lane_per_engine_and_the_run_totals(engines: list[Path]) -> None:
    async def body(pilot: Pilot) -> None:
        screen = pilot.app.screen
        assert isinstance(screen, EnginesScreen) and screen.model is not None
        # Each prefill step schedules 8185 of 8192 and withholds 7; steps 5-7 drain (28, 8, 0).
        totals = str(screen.query_one("#run-totals").render())
        assert totals == (
            "2 engines · 12 steps · 65544 target tokens · 0 preempted · 56 tokens withheld · 8 flags"
        )
        lines = lane_text(screen)
        e0 = next(i for i, line in enumerate(lines) if "engine 0 (pid 5918)" in line)
        e1 = next(i for i, line in enumerate(lines) if "engine 1 (pid 5919)" in line)
        assert lines[e0].startswith("▶ engine 0") and lines[e1].startswith("  engine 1")
        assert lines[e0].rstrip().endswith("8185/8192") and lines[e1].rstrip().endswith("8185/8192")
        assert lines[e0 + 2].startswith("    withheld") and lines[e0 + 2].rstrip().endswith("7 tok withheld")
        assert lines[-1].startswith("step") and lines[-1].rstrip().endswith("step 1")
        # The shared axis: step 6 exists only in engine 0's trace.
        await pilot.press("right", "right", "right", "right", "right")
        lines = lane_text(screen)
        assert lines[e0].rstrip().endswith("8/8192")
        assert lines[e1].rstrip().endswith("no such step")
        assert lines[-1].rstrip().endswith("step 6")

    drive(make_app(engines=engines), body)


def test_select_a_lane_and_open_that_engine(engines: list[Path]) -> None:
    async def body(pilot: Pilot) -> None:
        app = pilot.app
        screen = app.screen
        assert isinstance(screen, EnginesScreen)
        await pilot.press("e")
        assert screen.selected == 1 and lane_text(screen)[3].startswith("▶ engine 1 (pid 5919)")
        await pilot.press("o")
        opened = app.screen
        assert isinstance(opened, EngineScreen)
        await wait_until(pilot, lambda: opened.loaded)
        assert opened.model is not None and len(opened.model) == 5
        assert opened.model.trace.path == str(engines[1])
        # The engine's Trace, as the run read it: not the file read again.
        assert opened.model.trace is screen.model.run.engines[1].trace
        await pilot.press("escape")
        assert app.screen is screen

    drive(make_app(engines=engines), body)


def test_help_lists_the_engine_keys(engines: list[Path]) -> None:
    async def body(pilot: Pilot) -> None:
        await pilot.press("question_mark")
        assert isinstance(pilot.app.screen, HelpScreen)
        help_text = str(pilot.app.screen.query_one("#help-text").render())
        assert "Select the next engine's lane" in help_text
        assert "Open the selected engine alone" in help_text

    drive(make_app(engines=engines), body)


def test_traces_of_different_runs_are_refused(engines: list[Path], tmp_path: Path) -> None:
    other = engine_copy(ADDITIVE, tmp_path / "other.6000.jsonl", pid=6000, config={"model": "another-model"})

    async def body(pilot: Pilot) -> None:
        app = pilot.app
        assert isinstance(app.screen, ErrorScreen)
        assert app.error is not None
        assert str(other) in app.error and "config.model" in app.error
        assert "'another-model' here" in app.error

    drive(make_app(engines=[engines[0], other]), body)


def test_cli_checks_engine_files_first(engines: list[Path], capsys: pytest.CaptureFixture[str]) -> None:
    assert cli_main(["tui", "--engines", str(engines[0]), str(engines[0].with_name("gone.jsonl"))]) == 2
    assert "gone.jsonl: no such file" in capsys.readouterr().err
    assert cli_main(["tui", str(ADDITIVE), "--engines", str(engines[0])]) == 2
    assert "give no other trace" in capsys.readouterr().err
