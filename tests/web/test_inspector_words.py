"""Both step inspectors print one step status line, and one heading place, from tracer.render.step
as it words them: the web's panel and the TUI's lines, on the same step (no browser, no app)."""

from __future__ import annotations

from typing import Any

import pytest
from textual.markup import escape

from tracer.render.step import step_place, step_status
from tui.data import TraceModel
from tui.widgets.inspector import Inspector
from web.inspector import inspector

from .helpers import LIVE_NGRAM, view


def _by_id(children: list[Any]) -> dict[str, str]:
    return {c.id: c.children for c in children if getattr(c, "id", None)}


@pytest.mark.parametrize("name", [None, LIVE_NGRAM])
def test_both_inspectors_print_one_status_line(name: Any) -> None:
    v = view() if name is None else view(name)
    model = TraceModel.build(v.trace)
    for row in (0, len(v.trace) - 1):
        rec = v.trace.step(row)
        status, place = step_status(rec), step_place(v.trace, row, rec)
        web = _by_id(inspector(v, int(v.steps[row])))
        assert web["inspector-status"] == status and web["inspector-place"] == place
        tui = Inspector.lines(model, row)
        assert f"  {escape(status)}" in tui
        assert tui[0].endswith(f"[$text-muted]({escape(place)})[/]")
