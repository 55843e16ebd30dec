"""The TUI's why views: the inspector's reason column, the requests view (one lane per request,
coloured by state and reason) and a request's why from it, on the bundled live sample."""

from __future__ import annotations

from typing import Any

from textual.pilot import Pilot

from tests.tui.helpers import SAMPLES, drive, wait_until
from tracer.analysis.reasons import color
from tui import make_app
from tui.screens.help import HelpScreen
from tui.screens.main import MainScreen
from tui.screens.requests import LaneList, RequestsScreen, StoryScreen, lane_columns
from tui.widgets.textview import TextView

LIVE = SAMPLES / "live_cpu_ngram.jsonl"
SAMPLE_ID = "cmpl-b451ef580968e36c-0-8e741a70"


def main_screen(pilot: Pilot) -> MainScreen:
    screen = pilot.app.screen_stack[0]
    assert isinstance(screen, MainScreen)
    return screen


async def requests_screen(pilot: Pilot) -> RequestsScreen:
    await pilot.press("w")
    await wait_until(pilot, lambda: isinstance(pilot.app.screen, RequestsScreen) and pilot.app.screen.loaded)
    screen = pilot.app.screen
    assert isinstance(screen, RequestsScreen)
    return screen


def test_inspector_gives_each_waiting_request_its_reason() -> None:
    async def body(pilot: Pilot) -> None:
        screen = main_screen(pilot)
        for step in range(3, 20):
            screen.set_cursor(step - 1)
            await pilot.pause()
            inspector = screen.query_one("#inspector", TextView).plain
            assert "Why max_num_seqs=8: 8 running" in inspector, step
            waiting = inspector.split("Waiting, not admitted (4)")[1].splitlines()[1:6]
            assert waiting[0].split() == ["demand", "reason", "id"]
            assert [line.split()[2] for line in waiting[1:]] == ["max_num_seqs"] * 4, step

    drive(make_app(LIVE), body)


def test_inspector_reason_column_on_a_clipped_running_request() -> None:
    async def body(pilot: Pilot) -> None:
        inspector = main_screen(pilot).query_one("#inspector", TextView).plain
        head, row = inspector.split("Requests (1 scheduled)")[1].splitlines()[1:3]
        assert "reason" in head
        assert "input budget after draft-slot reservations" in row and row.rstrip().endswith("long")

    drive(make_app(SAMPLES / "dflash_k7_additive.jsonl"), body)


def _cell_colour(lanes: LaneList, row: int, step_row: int) -> tuple[str, str]:
    assert lanes.lanes is not None and lanes.columns is not None
    cols = lane_columns(lanes.lanes.lanes[row], lanes.columns)
    c = int(next(i for i in range(lanes.columns.n) if lanes.columns.lo[i] == step_row))
    return cols[c]


def test_requests_view_lanes_are_coloured_by_state_and_reason_and_open_the_why() -> None:
    async def body(pilot: Pilot) -> None:
        main = main_screen(pilot)
        await pilot.press("right", "right", "right")  # step 4
        screen = await requests_screen(pilot)
        lanes = screen.query_one(LaneList)
        assert lanes.lanes is not None and lanes.count == 12
        assert "12 requests, steps 1–52" in str(screen.query_one("#note").render())
        ids = [lane.id for lane in lanes.lanes.lanes]
        # Every request waiting at steps 3–19 is drawn as waiting, in max_num_seqs' colour.
        for step in range(3, 20):
            waiting = [i for i in range(12) if _cell_colour(lanes, i, step - 1)[0] == "waiting"]
            assert len(waiting) == 4, step
            assert {_cell_colour(lanes, i, step - 1)[1] for i in waiting} == {"max_num_seqs"}
        row = ids.index(SAMPLE_ID)
        cells = lanes.row_cells(row)
        step5 = next(i for i in range(lanes.columns.n) if lanes.columns.lo[i] == 4)  # type: ignore[union-attr]
        glyph, style = cells[1 + step5]
        assert glyph == "▒" and style.startswith(color("max_num_seqs"))
        # Pick that lane: the readout says its state and reason at the cursor.
        lanes.focus()
        for _ in range(row):
            await pilot.press("down")
        assert lanes.cursor == row
        readout = str(screen.query_one("#readout").render())
        assert f"{SAMPLE_ID}: steps 3–23 waiting: max_num_seqs" in readout
        # Enter opens its why: tracer.render.why.story_lines.
        await pilot.press("enter")
        await wait_until(pilot, lambda: isinstance(pilot.app.screen, StoryScreen))
        story = pilot.app.screen.query_one(TextView).plain
        assert f"request {SAMPLE_ID}" in story
        assert "steps 3–23       waiting            needs 18: max_num_seqs=8" in story
        await pilot.press("escape")
        assert pilot.app.screen is screen
        # The step cursor moves on the lanes and comes back to the main screen.
        await pilot.press("right", "right")
        assert screen.cursor == 5
        await pilot.press("escape")
        assert pilot.app.screen is main and main.cursor == 5

    drive(make_app(LIVE), body)


def test_a_click_on_a_lane_opens_its_why() -> None:
    async def body(pilot: Pilot) -> None:
        screen = await requests_screen(pilot)
        lanes = screen.query_one(LaneList)
        assert lanes.lanes is not None
        await pilot.click(LaneList, offset=(30, 1 + 1 + 8))  # border, header, then the 9th lane
        await wait_until(pilot, lambda: isinstance(pilot.app.screen, StoryScreen))
        story = pilot.app.screen.query_one(TextView).plain
        assert f"request {lanes.lanes.lanes[8].id}" in story

    drive(make_app(LIVE), body)


def test_requests_view_help_lists_its_keys() -> None:
    async def body(pilot: Pilot) -> None:
        await requests_screen(pilot)
        await pilot.press("question_mark")
        assert isinstance(pilot.app.screen, HelpScreen)
        shown = pilot.app.screen.query_one("#help-text").render()
        plain: Any = getattr(shown, "plain", str(shown))
        assert "Open the selected request's why (or click its lane)" in plain
        assert "Back to the main screen, at this step" in plain

    drive(make_app(LIVE), body)


def test_main_help_lists_the_requests_key() -> None:
    async def body(pilot: Pilot) -> None:
        await pilot.press("question_mark")
        shown = pilot.app.screen.query_one("#help-text").render()
        plain: Any = getattr(shown, "plain", str(shown))
        assert "Requests view: lanes by state and reason" in plain

    drive(make_app(LIVE), body)


def test_inspector_names_the_draft_input_budget_under_the_draft_budget_policy() -> None:
    """The fork's policy in the TUI: its header names it, and at step 4 the inspector says the
    fifth one-token DSpark request waits on the draft-input budget, with its numbers."""

    async def body(pilot: Pilot) -> None:
        screen = main_screen(pilot)
        engine = str(screen.query_one("#engine").render())
        assert "draft budget 16 rows" in engine
        screen.set_cursor(3)
        await pilot.pause()
        inspector = screen.query_one("#inspector", TextView).plain
        assert "draft-input budget: 0 of 16 drafter rows left" in inspector
        waiting = inspector.split("Waiting, not admitted (1)")[1].splitlines()[2]
        assert "draft-input budget" in waiting and waiting.rstrip().endswith("o4")

    drive(make_app(SAMPLES / "dspark_k4_draft_budget.jsonl"), body)
