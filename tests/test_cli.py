"""The command line's reading commands on the bundled sample traces."""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

import orjson
import pytest

from tests.conftest import ROOT
from tracer.cli import build_parser, main
from tracer.opening.door import Spec

SAMPLE = str(ROOT / "sample_traces" / "dflash_k7_additive.jsonl")


def test_summary_shows_the_budget_arithmetic_and_flags(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["summary", SAMPLE]) == 0
    out = capsys.readouterr().out
    assert "busiest  step 1: input 8192 = 8185 target + 7 reserved draft slots" in out
    assert "flags    additive-double-reservation ×4; 28 tokens withheld" in out
    assert "     1  8185/8192   8192(+7)/8192" in out


def test_step_prints_the_record(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["step", SAMPLE, "1"]) == 0
    record = orjson.loads(capsys.readouterr().out)
    assert record["target"] == {"cap": 8192, "used": 8185, "left": 7}
    assert main(["step", SAMPLE, "99"]) == 2


def test_bad_files_get_a_clear_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["summary", str(tmp_path / "nope.jsonl")]) == 2
    assert "nope.jsonl: no such file" in capsys.readouterr().err
    torn = tmp_path / "torn.jsonl"
    torn.write_bytes(Path(SAMPLE).read_bytes()[:-40])
    assert main(["summary", str(torn)]) == 0
    out = capsys.readouterr().out
    assert "torn     torn at line" in out and "no footer" in out


def test_gaps_from_a_live_stream_are_shown(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    lines = Path(SAMPLE).read_bytes().splitlines(keepends=True)
    gap = (
        orjson.dumps({"kind": "gap", "after": 1, "before": 4, "reason": "left the server's backlog"}) + b"\n"
    )
    path = tmp_path / "attached.jsonl"
    path.write_bytes(lines[0] + lines[1] + gap + b"".join(lines[4:]))
    assert main(["summary", str(path)]) == 0
    assert "gaps     steps 2–3 missing from the live stream" in capsys.readouterr().out


def test_the_door_makes_live_sources_from_follow_attach_save_and_lenient(tmp_path: Path) -> None:
    """--follow FILE and --attach URL (--save FILE) become a source through the one way in
    (tracer.opening.door), made but not started; what may not go together is refused."""
    from tracer.inputs import viewer_inputs
    from tracer.opening.door import open_input
    from tracer.trace.source import Mode

    def spec(**kw: object) -> Spec:
        base = {"trace": None, "trace_b": None, "engines": None, "attach": None, "follow": None}
        args = argparse.Namespace(**{**base, "save": None, "token": None, "lenient": False, **kw})
        return viewer_inputs(args, "tui")

    followed = open_input(spec(follow=str(tmp_path / "f.jsonl"), lenient=True)).live
    assert followed is not None and followed.mode is Mode.FOLLOW and not followed.strict
    assert not followed.alive  # made, not started: the viewer binds its callbacks first
    attached = open_input(spec(attach="http://127.0.0.1:1/trace", save=str(tmp_path / "s.jsonl"))).live
    assert attached is not None and attached.mode is Mode.STREAM and attached.save == tmp_path / "s.jsonl"
    with pytest.raises(ValueError, match="not both"):
        spec(attach="http://127.0.0.1:1/trace", follow="f.jsonl")
    with pytest.raises(ValueError, match="give --attach too"):
        spec(save="s.jsonl", trace=SAMPLE)


@pytest.mark.parametrize(
    ("argv", "error"),
    [
        ([], "tui needs a TRACE, two to compare, --engines TRACE..., --follow FILE or --attach URL"),
        ([SAMPLE, "--engines", SAMPLE], "--engines opens one run's traces: give no other trace"),
        (["--follow", SAMPLE, "--engines", SAMPLE], "--engines opens one run's traces: give no other trace"),
        ([SAMPLE, "--follow", SAMPLE], "--follow and --attach open a trace alone: give no other trace"),
        (["--engines", SAMPLE, "gone.jsonl"], "gone.jsonl: no such file"),
        ([str(ROOT)], f"{ROOT}: is a directory, not a trace file"),
        (["--save", "x.jsonl", SAMPLE], "--save FILE keeps what --attach URL receives: give --attach too"),
    ],
)
def test_viewer_inputs_are_checked_before_any_view_opens(argv: list[str], error: str) -> None:
    """One rule for both viewers' inputs (tracer.opening.door.check, through
    tracer.inputs.viewer_inputs), told before the terminal switches screens or anything is served."""
    from tracer.cli import build_parser
    from tracer.inputs import viewer_inputs

    args = build_parser().parse_args(["tui", *argv])
    with pytest.raises(ValueError) as exc:
        viewer_inputs(args, "tui")
    assert str(exc.value) == error


def test_the_web_app_may_show_a_live_source_beside_a_trace() -> None:
    from tracer.cli import build_parser
    from tracer.inputs import viewer_inputs

    args = build_parser().parse_args(["web", SAMPLE, "--follow", SAMPLE])
    inputs = viewer_inputs(args, "web", live_beside=True)
    assert inputs.traces == (SAMPLE,) and inputs.follow == SAMPLE and inputs.engines == ()
    with pytest.raises(ValueError, match="open a trace alone"):
        viewer_inputs(args, "tui")


def test_the_ui_commands_are_found_unless_a_built_in_one_runs() -> None:
    """`tui` and `web` come from entry points, scanned unless the command is tracer's own."""

    def commands(parser: argparse.ArgumentParser) -> set[str]:
        sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
        return set(sub.choices)

    every = commands(build_parser())
    assert {"tui", "web", "flags", "summary", "diff"} <= every
    assert commands(build_parser("web")) == every
    assert commands(build_parser("flags")) == every - {"tui", "web"}
    out = subprocess.run(
        [sys.executable, "-m", "tracer.cli", "--help"], capture_output=True, text=True, check=True
    ).stdout
    assert " web " in out and " tui " in out


def test_what_the_command_line_prints_while_it_opens_is_worded_in_render(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """tracer.inputs' loading progress and attaching line take their words from
    render.command_lines."""
    from tracer.inputs import progress, viewer_args, viewer_inputs

    monkeypatch.setattr(sys.stderr, "isatty", lambda: True)
    progress(5 << 20, 100 << 20)
    progress(100 << 20, 100 << 20)
    progress(1, 2)  # a small trace: nothing
    p = argparse.ArgumentParser()
    viewer_args(p)
    viewer_inputs(p.parse_args(["--attach", "http://127.0.0.1:9/trace", "--save", "s.jsonl"]), "tui")
    assert capsys.readouterr().err == (
        "\rloading   5.0%\rloading 100.0%\n"
        "schedscope: attaching to http://127.0.0.1:9/trace; saving to s.jsonl\n"
    )
