"""Several traces of one data-parallel run: `tracer.analysis.engines`, `summary` and `flags`."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.engine_support import engine_copy
from tracer.analysis.engines import Run, check_one_run
from tracer.analysis.session import Session
from tracer.opening.door import Spec, open_input
from tracer.render.summary import summary_lines
from tracer.trace.errors import TraceHeaderError
from tracer.trace.reader import load

ROOT = Path(__file__).resolve().parent.parent
ADDITIVE = ROOT / "sample_traces" / "dflash_k7_additive.jsonl"
PREEMPT = ROOT / "sample_traces" / "ngram_preempt.jsonl"


def schedscope(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tracer.cli", *args], capture_output=True, text=True, cwd=ROOT, timeout=120
    )


@pytest.fixture
def engines(tmp_path: Path) -> list[Path]:
    return [engine_copy(PREEMPT, tmp_path / f"run.{pid}.jsonl", pid=pid) for pid in (4101, 4102, 4103)]


def test_a_run_is_its_engines_in_order_with_the_totals_of_all(engines: list[Path]) -> None:
    run = open_input(Spec(engines=tuple(engines))).run
    assert [e.label for e in run.engines] == [f"engine {i} (pid {4101 + i})" for i in range(3)]
    one = Session(load(PREEMPT))
    totals = run.totals()
    assert totals.engines == 3 and totals.steps == 3 * len(one)
    assert totals.target_tokens == 3 * int(one.trace.columns["target_used"].sum())
    assert totals.preempted == 3 * int(one.trace.columns["n_preempted"].sum()) > 0
    assert totals.flags == 3 * len(one.report.flags)


def test_a_runs_axis_and_totals_are_kept_for_its_sessions(engines: list[Path]) -> None:
    """Kept in the one memo (tracer.analysis.memo.joint_memo), keyed by the engines'
    Sessions: another Run over the same Sessions reads them; new Sessions compute afresh."""
    run = open_input(Spec(engines=tuple(engines))).run
    again = Run.of([e.session for e in run.engines])
    assert again.axis is run.axis and again.totals() is run.totals()
    other = Run.of([Session(e.trace) for e in run.engines])
    assert other.axis is not run.axis and other.totals() == run.totals()


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"config": {"max_num_batched_tokens": 4096}}, "config.max_num_batched_tokens"),
        ({"config": {"model": "another"}}, "config.model"),
        ({"vllm_version": "0.33.0"}, "vllm_version"),
        ({"pid": 4101}, "pid"),  # the same engine twice
    ],
)
def test_traces_of_different_runs_are_refused_naming_file_and_field(
    engines: list[Path], tmp_path: Path, change: dict, field: str
) -> None:
    other = engine_copy(PREEMPT, tmp_path / "other.jsonl", **{"pid": 9999, **change})
    with pytest.raises(TraceHeaderError) as caught:
        check_one_run([load(engines[0]), load(other)])
    assert caught.value.path == str(other) and caught.value.field == field and caught.value.line == 1


def test_summary_of_several_engines_is_each_engines_summary_then_the_run(engines: list[Path]) -> None:
    out = schedscope("summary", *map(str, engines[:2]), "--limit", "3")
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0] == f"== engine 0 (pid 4101): {engines[0]}"
    first = list(summary_lines(Session(load(engines[0])), limit=3))
    assert lines[1 : 1 + len(first)] == first
    assert f"== engine 1 (pid 4102): {engines[1]}" in lines
    steps = 2 * len(load(PREEMPT))
    assert lines[-1].startswith(f"run: 2 engines · {steps} steps · ")


def test_flags_of_several_engines_name_the_engine_of_each_flag(engines: list[Path], tmp_path: Path) -> None:
    a = engine_copy(ADDITIVE, tmp_path / "a.jsonl", pid=1)
    b = engine_copy(ADDITIVE, tmp_path / "b.jsonl", pid=2)
    out = schedscope("flags", str(a), str(b))
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    per_engine = len(Session(load(ADDITIVE)).report.flags)
    assert sum(line.startswith("engine 0 (pid 1)  step") for line in lines) == per_engine > 0
    assert sum(line.startswith("engine 1 (pid 2)  step") for line in lines) == per_engine
    withheld = 2 * Session(load(ADDITIVE)).report.tokens_withheld
    assert lines[-1].endswith(f"{withheld} tokens withheld · {2 * per_engine} flags")
    doc = json.loads(schedscope("flags", str(a), str(b), "--json").stdout)
    assert [e["engine"] for e in doc["engines"]] == ["engine 0 (pid 1)", "engine 1 (pid 2)"]
    assert all(len(e["flags"]) == per_engine for e in doc["engines"])
    # One trace keeps its old JSON shape.
    assert set(json.loads(schedscope("flags", str(a), "--json").stdout)) >= {"trace", "flags", "counts"}


def test_a_mismatch_is_one_error_line_without_the_lenient_hint(engines: list[Path], tmp_path: Path) -> None:
    other = engine_copy(PREEMPT, tmp_path / "other.jsonl", pid=7, config={"max_num_seqs": 1})
    out = schedscope("summary", str(engines[0]), str(other))
    assert out.returncode == 2 and out.stdout == ""
    assert out.stderr.strip() == (
        f"schedscope: error: {other}:1: field 'config.max_num_seqs': not an engine of the same run as "
        f"{engines[0]}: 1 here, {load(PREEMPT).config['max_num_seqs']} there"
    )


def test_the_lenient_hint_comes_only_for_errors_lenient_would_skip(tmp_path: Path) -> None:
    broken = tmp_path / "broken.jsonl"
    lines = PREEMPT.read_bytes().splitlines(keepends=True)
    broken.write_bytes(lines[0] + b'{"kind": "step", "step": "x"}\n' + b"".join(lines[1:]))
    assert schedscope("summary", str(broken)).stderr.rstrip().endswith("(--lenient skips malformed lines)")
    assert "--lenient" not in schedscope("summary", str(tmp_path / "missing.jsonl")).stderr
