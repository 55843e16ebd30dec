"""Pilot tests: open, navigate, jump between flags, search, compare, follow a growing file, errors."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from textual.pilot import Pilot
from textual.widget import Widget

from tests.stream_support import records
from tests.tui.helpers import ADDITIVE, SAMPLES, SEPARATE, SIZE, drive, wait_until
from tracer.cli import main as cli_main
from tracer.trace.reader import load
from tui import make_app
from tui.screens.compare import CompareScreen
from tui.screens.error import ErrorScreen
from tui.screens.help import HelpScreen, help_sections
from tui.screens.main import MainScreen
from tui.widgets.tables import FlagList, StepTable
from tui.widgets.textview import TextView
from tui.widgets.timeline import Timeline


def text(widget: Widget) -> str:
    if isinstance(widget, TextView):
        return widget.plain
    visual = widget.render()
    return getattr(visual, "plain", str(visual))


def main_screen(pilot: Pilot) -> MainScreen:
    screen = pilot.app.screen_stack[0]
    assert isinstance(screen, MainScreen)
    return screen


def test_open_shows_config_steps_and_the_first_step() -> None:
    async def body(pilot: Pilot) -> None:
        screen = main_screen(pilot)
        assert screen.model is not None and len(screen.model) == 7
        assert "dflash K=7 · draft slots 7 · query rows/req 8 · B 8192" in text(screen.query_one("#engine"))
        assert "28 tokens withheld" in text(screen.query_one("#run"))
        assert screen.query_one(StepTable).count == 7
        inspector = text(screen.query_one("#inspector"))
        assert "input 8192 = 8185 target + 1×7 reserved draft slots" in inspector
        assert "withheld exactly 7 target tokens" in inspector

    drive(make_app(ADDITIVE), body)


def test_step_navigation_moves_every_view() -> None:
    async def body(pilot: Pilot) -> None:
        screen = main_screen(pilot)
        await pilot.press("right", "right")
        assert screen.cursor == 2
        assert screen.query_one(StepTable).cursor == 2
        assert screen.query_one(Timeline).cursor == 2
        assert "Step 3" in text(screen.query_one("#inspector"))
        await pilot.press("down")  # the focused step table moves the same cursor
        assert screen.cursor == 3
        await pilot.press("end")
        assert screen.cursor == 6
        await pilot.press("left", "home")
        assert screen.cursor == 0
        await pilot.press("g")
        await pilot.press(*"5", "enter")
        assert screen.cursor == 4

    drive(make_app(ADDITIVE), body)


def test_zoom_and_pan_keep_the_cursor_in_the_window() -> None:
    async def body(pilot: Pilot) -> None:
        screen = main_screen(pilot)
        total = len(screen.model or [])
        await pilot.press("end", "plus", "plus")
        assert screen.window.span < total and screen.window.start <= screen.cursor < screen.window.end
        await pilot.press("left_square_bracket")
        assert screen.window.start <= screen.cursor < screen.window.end
        await pilot.press("0")
        assert screen.fit and screen.window.span == total

    drive(make_app(SAMPLES / "priority_preempt.jsonl"), body)


def test_flag_jumps_visit_each_flagged_step_and_read_why() -> None:
    async def body(pilot: Pilot) -> None:
        screen = main_screen(pilot)
        await pilot.press("end")
        visited = []
        for _ in range(4):
            await pilot.press("N")
            visited.append(screen.cursor)
        assert visited == [3, 2, 1, 0]
        await pilot.press("n")
        assert screen.cursor == 1
        inspector = text(screen.query_one("#inspector"))
        assert "additive-double-reservation" in inspector
        assert "this withheld 7 target tokens (8185 scheduled instead of 8192)" in inspector
        await pilot.press("n", "n", "n")  # past the last flag: stays, says so
        assert screen.cursor == 3

    drive(make_app(ADDITIVE), body)


def test_flag_list_filters_by_kind_and_jumps() -> None:
    async def body(pilot: Pilot) -> None:
        screen = main_screen(pilot)
        flags = screen.query_one(FlagList)
        assert flags.count == 6
        await pilot.press("k")  # all -> the one kind present
        assert screen.kind == "additive-double-reservation" and flags.count == 6
        await pilot.press("k")  # back to all kinds
        assert screen.kind is None
        flags.focus()
        await pilot.press("down", "down")
        assert screen.cursor == 3  # the third flag is on step 4 (row 3)

    drive(make_app(SAMPLES / "dspark_k4_additive.jsonl"), body)


def test_a_new_flag_kind_draws_in_every_view(monkeypatch: pytest.MonkeyPatch) -> None:
    """A kind added to the registry (one entry) and a kind no registry knows: the step table,
    the flag list, the kind filter and the inspector all show them (no KeyError)."""
    from tests.flag_support import FAKE, STRAY, add_fake_kinds

    add_fake_kinds(monkeypatch)

    async def body(pilot: Pilot) -> None:
        screen = main_screen(pilot)
        assert pilot.app.error is None
        row = "".join(t for t, _ in screen.query_one(StepTable).row_cells(0))
        assert FAKE in row and STRAY in row
        flags = screen.query_one(FlagList)
        listed = ["".join(t for t, _ in flags.row_cells(i)) for i in range(flags.count)]
        assert any(FAKE in line for line in listed) and any(STRAY in line for line in listed)
        inspector = text(screen.query_one("#inspector"))
        assert f"▲ {FAKE}" in inspector and f"● {STRAY}" in inspector
        await pilot.press("k", "k")  # all -> additive -> the made-up kind
        assert screen.kind == FAKE and flags.count == 1
        await pilot.press("k")
        assert screen.kind == STRAY and flags.count == 1

    drive(make_app(ADDITIVE), body)


def test_search_shows_a_request_lifetime_and_moves_to_it() -> None:
    async def body(pilot: Pilot) -> None:
        screen = main_screen(pilot)
        await pilot.press("end", "slash")
        await pilot.press(*"low", "enter")
        await wait_until(pilot, lambda: "Request low" in text(screen.query_one("#life")))
        life = text(screen.query_one("#life"))
        assert "preempted   4, 6" in life and "resumed     5, 33" in life and "finished    step 60" in life
        assert screen.cursor == 0  # admitted in step 1
        await pilot.press("slash", *"nobody", "enter")
        await wait_until(pilot, lambda: "No request nobody" in text(screen.query_one("#life")))

    drive(make_app(SAMPLES / "priority_preempt.jsonl"), body)


def test_replay_plays_and_pauses() -> None:
    async def body(pilot: Pilot) -> None:
        screen = main_screen(pilot)
        await pilot.press("full_stop", "full_stop", "comma")  # faster, faster, slower: 10 steps/s
        assert screen.speed == 10
        await pilot.press("space")
        assert screen.playing
        await wait_until(pilot, lambda: screen.cursor >= 3)
        await pilot.press("space")
        assert not screen.playing
        stopped = screen.cursor
        await pilot.pause(0.2)
        assert screen.cursor == stopped
        assert "paused" in str(screen.query_one(Timeline).border_title)

    drive(make_app(SAMPLES / "priority_preempt.jsonl"), body)


def test_help_lists_every_binding_and_the_palette_has_commands() -> None:
    async def body(pilot: Pilot) -> None:
        screen = main_screen(pilot)
        await pilot.press("question_mark")
        assert isinstance(pilot.app.screen, HelpScreen)
        shown = text(pilot.app.screen.query_one("#help-text"))
        for _title, bindings in help_sections(screen):
            for binding in bindings:
                assert (binding.tooltip or binding.description) in shown
        await pilot.press("escape")
        titles = [c.title for c in pilot.app.get_system_commands(screen)]
        wanted = {"Next flag", "Search request…", "Play / pause replay"}
        wanted.add("Flags: only additive-double-reservation")
        assert wanted <= set(titles)
        await pilot.press("ctrl+p")
        await pilot.press(*"Next flag")
        await pilot.pause(0.3)
        await pilot.press("enter")
        await wait_until(pilot, lambda: screen.cursor == 1)

    drive(make_app(ADDITIVE), body)


def test_light_theme_renders() -> None:
    async def body(pilot: Pilot) -> None:
        await pilot.press("d")
        assert not pilot.app.current_theme.dark
        await pilot.pause()
        assert "dflash" in text(main_screen(pilot).query_one("#engine"))

    drive(make_app(ADDITIVE), body)


def test_compare_aligns_both_traces_with_one_cursor() -> None:
    async def body(pilot: Pilot) -> None:
        screen = pilot.app.screen_stack[0]
        assert isinstance(screen, CompareScreen) and screen.model is not None
        headline = text(screen.query_one("#headline"))
        assert "B (separate) drained the workload in 5 steps instead of 6" in headline
        assert "withheld 7 target tokens in each of 4 steps (28 in all)" in headline
        await pilot.press("n", "N")  # the next differing step, and back to the first
        assert screen.cursor == 0
        a, b = (screen.query_one(f"#timeline-{side}", Timeline) for side in "ab")
        assert a.cursor == b.cursor == 0
        assert "8185 target + 1×7" in text(screen.query_one("#arith-a"))
        assert "8192 target + 1×0" in text(screen.query_one("#arith-b"))
        await pilot.press("end")
        assert "B has no step 7" in text(screen.query_one("#arith-b"))

    drive(make_app(ADDITIVE, SEPARATE), body, size=(140, 48))


def test_a_zstd_trace_without_the_suffix_opens_alone_and_compared(tmp_path: Path) -> None:
    """The codec tells zstd by its magic bytes: the file opens (through a TraceSource) and
    compares (through load) exactly as the plain sample does."""
    import zstandard

    packed = []
    for src in (ADDITIVE, SEPARATE):
        path = tmp_path / src.name  # .jsonl: no .zst suffix
        path.write_bytes(zstandard.ZstdCompressor().compress(src.read_bytes()))
        packed.append(path)

    async def alone(pilot: Pilot) -> None:
        screen = main_screen(pilot)
        assert pilot.app.error is None and screen.model is not None and len(screen.model) == 7
        assert "28 tokens withheld" in text(screen.query_one("#run"))

    async def compared(pilot: Pilot) -> None:
        screen = pilot.app.screen_stack[0]
        assert isinstance(screen, CompareScreen) and screen.model is not None
        headline = text(screen.query_one("#headline"))
        assert "B (separate) drained the workload in 5 steps instead of 6" in headline

    drive(make_app(packed[0]), alone)
    drive(make_app(*packed), compared, size=(140, 48))


def test_follow_a_growing_file(tmp_path: Path) -> None:
    lines = ADDITIVE.read_bytes().splitlines(keepends=True)
    path = tmp_path / "live.jsonl"
    path.write_bytes(b"".join(lines[:3]))  # header and two steps

    async def body(pilot: Pilot) -> None:
        screen = main_screen(pilot)
        await wait_until(pilot, lambda: screen.total == 2)
        await pilot.press("home")
        with path.open("ab") as f:  # two more steps, then half a line: torn, not an error
            f.write(b"".join(lines[3:5]) + lines[5][:40])
        await wait_until(pilot, lambda: screen.total == 4)
        assert screen.cursor == 0 and pilot.app.error is None  # the view stays where the user is
        assert "+2 new" in str(screen.query_one(Timeline).border_title)
        await pilot.press("t")  # follow the tail
        assert screen.tail and screen.cursor == 3
        with path.open("ab") as f:
            f.write(lines[5][40:] + b"".join(lines[6:]))
        await wait_until(pilot, lambda: screen.total == 7)
        assert screen.cursor == 6
        await pilot.press("left")  # moving away from the tail stops following
        assert not screen.tail

    async def main() -> None:
        app = make_app(follow=path)
        async with app.run_test(size=SIZE) as pilot:
            await body(pilot)

    asyncio.run(main())


def test_follow_waits_for_a_file_that_does_not_exist_yet(tmp_path: Path) -> None:
    path = tmp_path / "later.jsonl"

    async def main() -> None:
        app = make_app(follow=path)
        async with app.run_test(size=SIZE) as pilot:
            screen = main_screen(pilot)
            await wait_until(pilot, lambda: "waiting for" in text(screen.query_one("#waiting")))
            path.write_bytes(b"".join(ADDITIVE.read_bytes().splitlines(keepends=True)[:2]))
            await wait_until(pilot, lambda: screen.total == 1)

    asyncio.run(main())


def test_a_missing_file_shows_a_clear_message() -> None:
    async def body(pilot: Pilot) -> None:
        assert isinstance(pilot.app.screen, ErrorScreen)
        assert "nowhere.jsonl: no such file" in text(pilot.app.screen.query_one("#error-message"))
        await pilot.press("q")

    app = make_app(SAMPLES / "nowhere.jsonl")
    drive(app, body)
    assert app.error is not None


def test_a_bad_file_shows_where_and_why(tmp_path: Path) -> None:
    path = tmp_path / "bad.jsonl"
    lines = ADDITIVE.read_bytes().splitlines(keepends=True)
    path.write_bytes(lines[0] + lines[1] + b'{"kind":"step","step":2,"t":1,"target":{"cap":1}}\n')

    async def body(pilot: Pilot) -> None:
        assert isinstance(pilot.app.screen, ErrorScreen)
        message = text(pilot.app.screen.query_one("#error-message"))
        assert "bad.jsonl:3: field 'input': missing" in message
        assert "--lenient" in text(pilot.app.screen.query_one("#error-hint"))

    drive(make_app(path), body)
    # --lenient skips the line and shows the rest.
    lenient = make_app(path, strict=False)

    async def shown(pilot: Pilot) -> None:
        assert main_screen(pilot).total == 1 and lenient.error is None

    drive(lenient, shown)


def test_cli_reports_a_missing_file_without_starting_the_ui(capsys) -> None:  # type: ignore[no-untyped-def]
    assert cli_main(["tui", str(SAMPLES / "nowhere.jsonl")]) == 2
    assert "nowhere.jsonl: no such file" in capsys.readouterr().err
    assert cli_main(["tui"]) == 2


def test_the_step_table_is_virtual_over_many_rows() -> None:
    """A 7-step trace repeated as 200k rows: still only the visible lines are formatted."""
    trace = load(ADDITIVE)

    async def body(pilot: Pilot) -> None:
        table = main_screen(pilot).query_one(StepTable)
        calls = []
        original = table.row_cells
        table.row_cells = lambda row: (calls.append(row), original(row % len(trace)))[1]  # type: ignore[method-assign]
        table.set_count(200_000)
        table.set_cursor(150_000)
        await pilot.pause()
        assert calls and max(calls) >= 150_000 and len(set(calls)) < 100
        assert not list(table.children)

    drive(make_app(ADDITIVE), body)


def test_run_line_names_live_stream_gaps(tmp_path) -> None:  # type: ignore[no-untyped-def]
    from tracer.trace.reader import load
    from tui.data import TraceModel
    from tui.widgets.inspector import run_line

    sample = (Path(__file__).resolve().parents[2] / "sample_traces" / "dflash_k7_additive.jsonl").read_bytes()
    lines = sample.splitlines(keepends=True)
    gap = b'{"kind":"gap","after":1,"before":4}\n'
    path = tmp_path / "attached.jsonl"
    path.write_bytes(lines[0] + lines[1] + gap + b"".join(lines[4:]))
    assert "steps 2–3 missing from the live stream" in run_line(TraceModel.build(load(path)))


def test_attach_shows_the_stream_state_and_follows_a_new_run(tmp_path: Path) -> None:
    """--attach --save against the real stream server: the status line says idle, then the
    server restarts and the screen moves to the new run (saved to its own file) and says so."""
    import orjson

    from tracer.live.stream import StreamHub, StreamServer
    from tracer.trace.source import TraceSource

    lines = ADDITIVE.read_bytes().splitlines(keepends=True)
    head = orjson.loads(lines[0])
    restarted = orjson.dumps({**head, "pid": head["pid"] + 1, "start_time": head["start_time"] + 60}) + b"\n"
    hub_a = StreamHub()
    hub_a.publish(records(lines[:4]))  # header and three steps
    server_a = StreamServer(hub_a, "127.0.0.1", 0, heartbeat=0.1)
    port = server_a.address[1]
    source = TraceSource.stream(server_a.url, save=tmp_path / "live.jsonl", timeout=0.4, backoff=(0.01, 0.05))
    servers = [server_a]

    async def main() -> None:
        app = make_app(source)
        async with app.run_test(size=SIZE) as pilot:
            screen = main_screen(pilot)
            title = lambda: str(screen.query_one(Timeline).border_title)  # noqa: E731
            await wait_until(pilot, lambda: screen.total == 3 and "idle since" in title())
            assert "(last step 3)" in title()
            server_a.close()
            hub_b = StreamHub()
            hub_b.publish(records([restarted, *lines[1:3]]))
            servers.append(StreamServer(hub_b, "127.0.0.1", port, heartbeat=0.1))
            await wait_until(
                pilot, lambda: screen.model is not None and "live.1.jsonl" in screen.model.trace.path
            )
            await wait_until(pilot, lambda: screen.total == 2 and "new run 2" in title())
            assert "→ live.1.jsonl" in title() and pilot.app.error is None

    try:
        asyncio.run(main())
    finally:
        source.close()
        for server in servers:
            server.close()
    assert (tmp_path / "live.jsonl").read_bytes() == b"".join(lines[:4])


def test_attach_with_a_wrong_token_says_unauthorised(tmp_path: Path) -> None:
    from tracer.live.stream import StreamHub, StreamServer
    from tracer.trace.source import TraceSource

    hub = StreamHub()
    hub.publish(records(ADDITIVE.read_bytes().splitlines(keepends=True)[:3]))
    server = StreamServer(hub, "127.0.0.1", 0, token="s3cret", heartbeat=0.1)
    source = TraceSource.stream(server.url, token="wrong", timeout=0.4, backoff=(0.01, 0.05))

    async def main() -> None:
        async with make_app(source).run_test(size=SIZE) as pilot:
            screen = main_screen(pilot)
            waiting = lambda: text(screen.query_one("#waiting"))  # noqa: E731
            await wait_until(pilot, lambda: "unauthorised: HTTP 401" in waiting())
            assert "header" not in waiting() and screen.total == 0
            assert "unauthorised" in str(screen.query_one(Timeline).border_title)

    try:
        asyncio.run(main())
    finally:
        source.close()
        server.close()
