"""A made-up flag kind, registered as a new kind is (one KIND_INFO entry), and a stray kind in
no registry (a newer trace's): both flagged at the first step, so every view has to draw them."""

from __future__ import annotations

from typing import Any

import pytest

FAKE = "fake-kind"  # registered: one entry in tracer.analysis.flags.KIND_INFO
FAKE_SHORT = "fake short"
STRAY = "stray-kind"  # in no registry


def add_fake_kinds(monkeypatch: pytest.MonkeyPatch) -> None:
    from tracer.analysis import flags, session

    monkeypatch.setitem(flags.KIND_INFO, FAKE, flags.KindInfo("warning", FAKE_SHORT, "#123456"))
    monkeypatch.setattr(flags, "KINDS", tuple(flags.KIND_INFO))
    real = session.detect

    def detect(trace: Any, analysis: Any = None, **kw: Any) -> flags.FlagReport:
        report = real(trace, analysis, **kw)
        step = int(trace.columns["step"][0])
        extra = [
            flags.Flag(step, FAKE, "warning", {"tokens_withheld": 3}, text="a made-up kind's sentence"),
            flags.Flag(step, STRAY, "info", text="a kind no registry knows"),
        ]
        # stable: by step only
        report.flags = flags.FlagList.of(sorted([*report.flags, *extra], key=lambda f: f.step))
        return report

    monkeypatch.setattr(session, "detect", detect)
