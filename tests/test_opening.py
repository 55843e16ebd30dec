"""The one way in (tracer.opening.door): every kind of input opens into Sessions and sources."""

from __future__ import annotations

import pytest

from tests.conftest import ROOT
from tracer.analysis.engines import Run
from tracer.analysis.session import Session
from tracer.opening.door import Spec, Upload, check, open_input
from tracer.trace.errors import TraceError
from tracer.trace.reader import load
from tracer.trace.source import Mode, TraceSource

SAMPLES = ROOT / "sample_traces"
ADDITIVE = SAMPLES / "dflash_k7_additive.jsonl"
SEPARATE = SAMPLES / "dflash_k7_separate.jsonl"


def test_one_trace_opens_whole_or_as_a_source_shown_while_it_loads() -> None:
    whole = open_input(Spec(traces=(ADDITIVE,), entries=True))
    assert len(whole.session) == len(load(ADDITIVE)) and whole.session.trace.entries is not None
    assert whole.source is None and whole.live is None and whole.run is None
    shown = open_input(Spec(traces=(ADDITIVE,), shown_while_loading=True, strict=False))
    assert shown.sessions == [] and shown.source is not None
    assert shown.source.mode is Mode.FILE and not shown.source.strict and not shown.source.alive


def test_a_pair_opens_with_the_viewers_session_class_and_keeps_it() -> None:
    class Warm(Session):
        made = 0

        @classmethod
        def build(cls, trace: object) -> Warm:
            cls.made += 1
            return cls(trace)  # type: ignore[arg-type]

    a, b = open_input(Spec(traces=(ADDITIVE, SEPARATE), session=Warm.build)).pair
    assert isinstance(a, Warm) and isinstance(b, Warm) and Warm.made == 2
    assert (len(a), len(b)) == (7, 6)


def test_engines_open_as_one_run_and_other_runs_are_refused() -> None:
    opened = open_input(Spec(engines=(ADDITIVE,)))
    assert isinstance(opened.run, Run) and opened.sessions == [opened.run.engines[0].session]
    with pytest.raises(TraceError, match="not an engine of the same run"):
        open_input(Spec(engines=(ADDITIVE, SEPARATE)))


def test_an_upload_opens_from_bytes_and_its_bad_content_is_named() -> None:
    session = open_input(Spec(upload=Upload(ADDITIVE.read_bytes(), "up.jsonl"))).session
    assert session.trace.path == "up.jsonl" and len(session) == 7
    with pytest.raises(TraceError, match=r"bad\.jsonl"):
        open_input(Spec(upload=Upload(b"not json\n", "bad.jsonl")))


def test_a_live_input_is_made_not_started_and_one_at_a_time() -> None:
    live = open_input(Spec(follow=ADDITIVE, source_options={"poll": 0.5})).live
    assert live is not None and live.mode is Mode.FOLLOW and live.poll == 0.5 and not live.alive
    followed = TraceSource.follow(ADDITIVE)
    with pytest.raises(ValueError, match="not both"):
        check(Spec(sources=(followed,), follow=ADDITIVE, live_beside=True))
    # Beside a live input, a complete file's source is a trace where the viewer shows both.
    shown = TraceSource.file(ADDITIVE)
    both = open_input(Spec(sources=(shown, followed), live_beside=True))
    assert both.source is shown and both.live is followed
    with pytest.raises(ValueError, match="not both"):
        check(Spec(sources=(shown,), follow=ADDITIVE))  # the TUI shows one source at a time


def test_the_viewers_checks_name_the_viewer_and_the_missing_file() -> None:
    with pytest.raises(ValueError, match=r"^web needs a TRACE"):
        check(Spec(viewer="web"))
    with pytest.raises(ValueError, match=r"gone\.jsonl: no such file"):
        check(Spec(traces=(SAMPLES / "gone.jsonl",)), files=True)
    check(Spec(traces=(SAMPLES / "gone.jsonl",)))  # a command's reader names it instead
    with pytest.raises(TraceError, match=r"gone\.jsonl"):
        open_input(Spec(traces=(SAMPLES / "gone.jsonl",)))
