"""Snapshot tests (pytest-textual-snapshot): fixed terminal sizes, no clock, no blinking cursor.

Update after an intended change with `.venv/bin/python -m pytest tests/tui --snapshot-update`
and review the SVGs in __snapshots__/ (snapshot_report.html shows the differences).
"""

from __future__ import annotations

from typing import Any

from tests.tui.helpers import ADDITIVE, SEPARATE, SIZE, wait_loaded
from tui import make_app

COMPARE_SIZE = (140, 48)


def test_main_screen(snap_compare: Any) -> None:
    """dflash K=7 additive: the 7 withheld tokens under each prefill step, the flags, step 1 inspected."""
    assert snap_compare(make_app(ADDITIVE), terminal_size=SIZE, run_before=wait_loaded)


def test_inspector_on_a_flagged_dflash_step(snap_compare: Any) -> None:
    """`n` jumps to the next flagged step; the inspector says why it was flagged."""
    assert snap_compare(make_app(ADDITIVE), terminal_size=SIZE, run_before=wait_loaded, press=["n"])


def test_flag_list(snap_compare: Any) -> None:
    assert snap_compare(make_app(ADDITIVE), terminal_size=SIZE, run_before=wait_loaded, press=["f"])


def test_main_screen_light_theme(snap_compare: Any) -> None:
    assert snap_compare(make_app(ADDITIVE), terminal_size=SIZE, run_before=wait_loaded, press=["d"])


def test_compare_screen(snap_compare: Any) -> None:
    """Additive against the separate query budget: one step fewer, 28 tokens withheld in A."""
    app = make_app(ADDITIVE, SEPARATE)
    assert snap_compare(app, terminal_size=COMPARE_SIZE, run_before=wait_loaded, press=["right"])


def test_help_screen(snap_compare: Any) -> None:
    app = make_app(ADDITIVE)
    assert snap_compare(app, terminal_size=SIZE, run_before=wait_loaded, press=["question_mark"])


def test_requests_screen(snap_compare: Any) -> None:
    """The live sample's requests view: the 4 requests waiting at steps 3–19 in max_num_seqs' colour."""
    from tests.tui.helpers import SAMPLES, wait_until
    from tui.screens.requests import RequestsScreen

    async def open_lanes(pilot: Any) -> None:
        await wait_loaded(pilot)
        await pilot.press("right", "right", "right", "right", "w")
        await wait_until(
            pilot, lambda: isinstance(pilot.app.screen, RequestsScreen) and pilot.app.screen.loaded
        )
        await pilot.press("down", "down", "down", "down", "down", "down", "down", "down")

    app = make_app(SAMPLES / "live_cpu_ngram.jsonl")
    assert snap_compare(app, terminal_size=SIZE, run_before=open_lanes)
