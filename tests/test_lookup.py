"""tracer.analysis.lookup: per-request search that parses only the steps naming the request."""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

import numpy as np
import pytest

from tests.conftest import ROOT
from tracer.analysis.detail import rows_of_steps
from tracer.analysis.flags import detect
from tracer.analysis.lookup import flag_rows, matching_ids, request_life
from tracer.analysis.requests import lifetimes
from tracer.trace.reader import load
from tracer.trace.trace_type import Trace

SAMPLES = sorted((ROOT / "sample_traces").glob("*.jsonl"))


@pytest.mark.parametrize("path", SAMPLES, ids=lambda p: p.stem)
def test_request_life_equals_the_full_lifetimes(path) -> None:  # type: ignore[no-untyped-def]
    trace = load(path)
    lives = lifetimes(trace)
    for rid, life in lives.items():
        assert request_life(trace, rid) == life
    assert request_life(trace, "no-such-request") is None
    assert set(matching_ids(trace, "", limit=10_000)) >= set(lives)


def test_request_life_reads_its_rows_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """The rows from the request's first mention on are read once: searched and parsed in one pass."""
    trace = load(ROOT / "sample_traces" / "priority_preempt.jsonl")
    read: list[int] = []
    real = Trace.raw_many

    def counted(self: Trace, rows: Any) -> Any:
        rows = list(rows)
        read.extend(rows)
        return real(self, rows)

    monkeypatch.setattr(Trace, "raw_many", counted)
    life = request_life(trace, "mid")
    assert life is not None and life.preempted
    assert len(read) == len(set(read)) == len(trace)


def test_matching_ids_takes_prefixes_not_keys_or_values() -> None:
    trace = load(ROOT / "sample_traces" / "priority_preempt.jsonl")
    assert matching_ids(trace, "l") == ["low"]
    assert matching_ids(trace, "st") == []  # "step", "stock" are a key and a value, not ids
    assert matching_ids(trace, "ki") == []


def test_rows_of_steps_and_flag_rows() -> None:
    trace = load(ROOT / "sample_traces" / "dspark_k4_additive.jsonl")
    assert rows_of_steps(trace, [1, 6, 999]).tolist() == [0, 5, -1]
    rows, kinds = flag_rows(trace, detect(trace))
    assert rows.tolist() == [0, 1, 3, 4, 5, 7]  # steps 1, 2, 4, 5, 6 and 8
    assert set(kinds.tolist()) == {"additive-double-reservation"}
    assert rows_of_steps(trace, np.array([], dtype=np.int64)).size == 0


def test_lookup_and_cli_import_no_ui() -> None:
    script = "import tracer.analysis.lookup, tracer.cli, json, sys; print(json.dumps(sorted(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, check=True)
    roots = {m.split(".")[0] for m in json.loads(out.stdout)}
    assert not roots & {"textual", "dash", "plotly", "tui", "web"}
