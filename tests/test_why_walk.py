"""The walk of `schedscope why TRACE REQUEST`: how often it crosses a layer boundary, and how
often one request's story reads the trace's request index (issue 34).

The command runs under a profile hook that records every Python call whose caller and callee
are in different layers of tracer/ (docs/architecture.md, "Layers"): a crossing site is the
pair (caller function, callee function), counted once however often it is called, per
ordered pair of layers. Each pair should cross at most `MOST` sites; `KNOWN_OVER` holds the
pairs not yet brought down, at today's figure, so a pair's count can only go down.
"""

from __future__ import annotations

import gc
import sys
import threading
from collections import defaultdict
from collections.abc import Callable
from types import FrameType
from typing import Any

import pytest

from tests.conftest import ROOT
from tracer.cli import main

TRACE = ROOT / "sample_traces" / "priority_preempt.jsonl"
REQUEST = "mid"  # waits, is preempted twice and resumed, and finishes: a story of every kind
STEPS = 60  # the trace's

MOST = 2
# Pairs still crossed at more sites than MOST, at the figure reached: lower it when a change
# brings one down (the test fails on a rise, never on a fall). None is left: analysis->trace
# went from 30 to 8, 4, 3, and is 2 since the opening of inputs left analysis for a layer of
# its own (tracer.opening): the load is opening->trace (door.open_input -> reader.load), and
# analysis reads what it is handed at 2 sites, the entry pass's bundle
# (entry_features.computed -> trace_type.entry_columns) and the story's span
# (request_story -> Trace.steps_containing). commands->analysis was 4, then 2, now 1.
KNOWN_OVER: dict[str, int] = {}
# Finalizers run where an object happens to die (a Trace's memo dropped, its file closed when
# main returns): not calls the walk makes.
FINALIZERS = ("tracer.analysis.memo.memo.<locals>.<lambda>", "tracer.trace.store._LazyFile.__del__")

# tracer.commands, tracer.cli and tracer.inputs are the command line's layer; every other
# subpackage or top-level module of tracer/ is its own.
_COMMANDS = ("commands", "cli", "inputs")


def layer_of(module: str | None) -> str | None:
    """The layer a module belongs to; None outside tracer/ (the standard library, NumPy)."""
    if not module or not module.startswith("tracer."):
        return None
    part = module.split(".")[1]
    return "commands" if part in _COMMANDS else part


class Walk:
    """What one profiled run crossed: sites per ordered layer pair, and calls per function."""

    def __init__(self) -> None:
        self.sites: dict[str, set[tuple[str, str]]] = defaultdict(set)
        self.calls: dict[str, int] = defaultdict(int)
        self.rows_read: list[int] = []  # the rows asked of each Trace.raw_many call

    def profile(self, frame: FrameType, event: str, arg: Any) -> None:
        if event != "call":
            return
        module = frame.f_globals.get("__name__")
        callee = f"{module}.{frame.f_code.co_qualname}"
        self.calls[callee] += 1
        if callee == "tracer.trace.trace_type.Trace.raw_many":
            rows = frame.f_locals.get("rows")
            self.rows_read.append(len(rows) if hasattr(rows, "__len__") else -1)
        to = layer_of(module)
        caller = frame.f_back
        if to is None or caller is None or callee in FINALIZERS:
            return
        source = caller.f_globals.get("__name__")
        came = layer_of(source)
        if came is not None and came != to:
            self.sites[f"{came}->{to}"].add((f"{source}.{caller.f_code.co_qualname}", callee))


def walk(argv: list[str]) -> tuple[int, Walk]:
    """Run `schedscope ARGV` once profiled (the cyclic collector off, so no finalizer of an
    earlier object runs inside the walk and counts as one of its calls)."""
    seen = Walk()
    hook: Callable[..., None] = seen.profile
    gc.collect()
    gc.disable()
    sys.setprofile(hook)
    threading.setprofile(hook)
    try:
        code = main(argv)
    finally:
        sys.setprofile(None)
        threading.setprofile(None)  # type: ignore[arg-type]
        gc.enable()
    return code, seen


@pytest.fixture(scope="module")
def story_walk() -> Walk:
    # A first run imports what the command imports lazily: the walk is the steady state's,
    # not the modules' own first execution.
    assert main(["why", str(TRACE), REQUEST]) == 0
    code, seen = walk(["why", str(TRACE), REQUEST])
    assert code == 0
    return seen


def test_why_request_crosses_each_layer_boundary_at_most_twice(story_walk: Walk) -> None:
    counts = {pair: len(sites) for pair, sites in story_walk.sites.items()}
    over = {pair: n for pair, n in counts.items() if n > KNOWN_OVER.get(pair, MOST)}
    detail = {pair: sorted(story_walk.sites[pair]) for pair in over}
    assert not over, f"crossings above the allowed figure: {over}\n{detail}"


def test_the_known_figures_are_still_reached(story_walk: Walk) -> None:
    """A pair brought down below its KNOWN_OVER figure: lower the figure, so it stays down."""
    counts = {pair: len(sites) for pair, sites in story_walk.sites.items()}
    now = {pair: counts.get(pair, 0) for pair in KNOWN_OVER}
    stale = {pair: (known, now[pair]) for pair, known in KNOWN_OVER.items() if now[pair] < known}
    assert not stale, f"KNOWN_OVER figures (known, now) to lower: {stale}"


def test_one_story_reads_the_request_index_once(story_walk: Walk) -> None:
    """The index is asked for once, built once (here from the entry pass, no sidecar for a
    small file), and the trace's records are never read whole: the load's own parse collects
    the entry columns the pass reads, and the story itself reads only its span."""
    calls = story_walk.calls
    assert calls["tracer.analysis.requests.request_index"] == 1
    assert calls["tracer.analysis.requests._build"] == 1
    assert calls["tracer.analysis.entry_features.entry_pass"] == 1
    whole = [n for n in story_walk.rows_read if n < 0 or n >= STEPS]
    assert not whole, story_walk.rows_read


@pytest.mark.parametrize(
    ("argv", "error"),
    [
        ([], "give a REQUEST_ID or --step N (one of them)"),
        ([REQUEST, "--step", "3"], "give a REQUEST_ID or --step N (one of them)"),
    ],
    ids=["neither", "both"],
)
def test_why_checks_its_arguments_before_it_opens_the_trace(
    argv: list[str], error: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """What can be wrong without the trace is refused before it is opened: the trace exists
    here, and opening it would fail the test."""
    from tracer.opening import door

    def refused(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("the trace was opened before the arguments were checked")

    monkeypatch.setattr(door, "open_input", refused)
    assert main(["why", str(TRACE), *argv]) == 2
    assert capsys.readouterr().err.strip() == f"schedscope: error: {error}"


def test_layers_are_named_as_the_layer_table_names_them() -> None:
    assert layer_of("tracer.analysis.why") == "analysis"
    assert layer_of("tracer.inputs") == layer_of("tracer.cli") == "commands"
    assert layer_of("numpy.core") is None and layer_of("tracer") is None
