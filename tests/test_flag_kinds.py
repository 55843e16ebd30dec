"""One list of flag kinds (tracer.analysis.flags.KIND_INFO): KINDS, severities, short names,
colours and glyphs all come from it, and a kind it lacks still has all of them. The views'
own checks are tests/tui/test_app.py and tests/web/test_figures.py (a made-up kind draws)."""

from __future__ import annotations

import pytest

from tests.conftest import ROOT
from tests.flag_support import FAKE, FAKE_SHORT, STRAY, add_fake_kinds
from tracer.analysis import flags
from tracer.analysis.session import Session
from tracer.render.text import flag_counts
from tracer.trace.reader import load

ADDITIVE = ROOT / "sample_traces" / "dflash_k7_additive.jsonl"


def test_every_kind_has_one_entry_and_everything_derives_from_it() -> None:
    assert tuple(flags.KIND_INFO) == flags.KINDS
    assert {k: info.severity for k, info in flags.KIND_INFO.items()} == flags.SEVERITY
    assert len({info.color for info in flags.KIND_INFO.values()}) == len(flags.KINDS)
    assert len({info.short for info in flags.KIND_INFO.values()}) == len(flags.KINDS)
    for info in flags.KIND_INFO.values():
        assert info.severity in flags.GLYPH


def test_a_kind_no_registry_knows_still_has_a_name_a_colour_and_a_glyph() -> None:
    info = flags.kind_info("from-a-newer-trace")
    assert info.short == "from-a-newer-trace" and info.color.startswith("#")
    assert flags.glyph(info.severity) == "●" and flags.glyph("nonsense") == "?"


def test_a_made_up_kind_is_listed_and_counted(monkeypatch: pytest.MonkeyPatch) -> None:
    add_fake_kinds(monkeypatch)
    session = Session(load(ADDITIVE))
    assert session.kinds_present == [flags.ADDITIVE, FAKE, STRAY]
    assert f"{FAKE} ×1" in flag_counts(session.report) and f"{STRAY} ×1" in flag_counts(session.report)
    assert flags.kind_info(FAKE).short == FAKE_SHORT
