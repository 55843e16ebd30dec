"""pytest plugin: vLLM's own scheduler tests with schedscope's tracing schedulers switched in.

Loaded by .ci/upstream_tests.py (`-p upstream_plugin`) into a pytest run of the test files
of vLLM's sdist, which stay as vLLM wrote them. Once those files are imported, every name
`Scheduler` / `AsyncScheduler` in vLLM's `tests.*` modules is rebound to
tracer.scheduler.TracingScheduler / TracingAsyncScheduler, so `create_scheduler()` and the
tests' own `Scheduler(...)` calls build the tracing classes. Each tracing scheduler records
to its own trace file; after each test every trace is closed and checked:

  - it loads with tracer.trace.reader.load (strict), with a footer;
  - the tracer counted no error of its own (footer `errors`) and dropped no record;
  - it holds one step per schedule() call that returned.

A failed check fails the test, so a tracer fault cannot hide behind vLLM's own assertions
(the tracer never raises into vLLM: it only counts its errors). A test that builds a plain
Scheduler or AsyncScheduler fails too: it would pass without the tracer having run.

With SCHEDSCOPE_UPSTREAM_STOCK=1 nothing is switched (the same tests on vLLM's own classes),
to tell apart tests that fail whatever scheduler runs them.
"""

from __future__ import annotations

import functools
import json
import os
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from vllm.v1.core.sched.async_scheduler import AsyncScheduler
from vllm.v1.core.sched.scheduler import Scheduler

from tracer.record.config import RecorderConfig, configured
from tracer.render.text import footer_mismatch
from tracer.scheduler import TracingAsyncScheduler, TracingMixin, TracingScheduler
from tracer.trace.reader import load

STOCK = os.environ.get("SCHEDSCOPE_UPSTREAM_STOCK") == "1"
SWITCH = {Scheduler: TracingScheduler, AsyncScheduler: TracingAsyncScheduler}
# JSON lines, one per test: what it built and what its traces held (the runner's summary).
REPORT = os.environ.get("SCHEDSCOPE_UPSTREAM_REPORT")


@dataclass
class Built:
    """The schedulers one test built: their classes, and per tracing one its trace."""

    traces: Path
    classes: list[str] = field(default_factory=list)
    traced: list[tuple[Any, Path]] = field(default_factory=list)
    schedules: dict[int, int] = field(default_factory=dict)  # id(scheduler) -> schedule() returns


_current: Built | None = None


def _switch_names() -> int:
    """Rebind Scheduler/AsyncScheduler in every imported module of vLLM's test tree."""
    n = 0
    for name, module in list(sys.modules.items()):
        if module is None or not (name == "tests" or name.startswith("tests.")):
            continue
        for attr, value in list(vars(module).items()):
            if isinstance(value, type) and value in SWITCH:
                setattr(module, attr, SWITCH[value])
                n += 1
    return n


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Leave out the node ids SCHEDSCOPE_UPSTREAM_DESELECT lists, exactly (not as prefixes)."""
    listed = set(filter(None, os.environ.get("SCHEDSCOPE_UPSTREAM_DESELECT", "").splitlines()))
    if not listed:
        return
    kept = [item for item in items if item.nodeid not in listed]
    left_out = [item for item in items if item.nodeid in listed]
    if unknown := listed - {item.nodeid for item in left_out}:
        # A listed test vLLM renamed or dropped: say so rather than keep a stale list quietly.
        print(f"schedscope: {len(unknown)} deselected node ids not collected: {sorted(unknown)}")
    config.hook.pytest_deselected(items=left_out)
    items[:] = kept


def pytest_collection_finish(session: pytest.Session) -> None:
    if STOCK:
        return
    if session.items and _switch_names() == 0:
        raise pytest.UsageError("no Scheduler/AsyncScheduler name found in vLLM's test modules")


def _wrap_scheduler_init() -> None:
    """Note every scheduler built (vLLM's base __init__ runs for all of them), and give each
    tracing one a trace file of its own."""
    base_init = Scheduler.__init__
    tracing_init = TracingMixin.__init__

    @functools.wraps(base_init)
    def noted_init(self: Any, *args: Any, **kwargs: Any) -> None:
        if _current is not None:
            _current.classes.append(type(self).__qualname__)
        base_init(self, *args, **kwargs)

    @functools.wraps(tracing_init)
    def recorded_init(self: Any, *args: Any, **kwargs: Any) -> None:
        built = _current
        if built is None:
            tracing_init(self, *args, **kwargs)
            return
        path = built.traces / f"{len(built.traced)}.jsonl"
        with configured(RecorderConfig(trace=path)):
            tracing_init(self, *args, **kwargs)
        built.traced.append((self, path))

    original_schedule = TracingMixin.schedule

    @functools.wraps(original_schedule)
    def counted_schedule(self: Any, *args: Any, **kwargs: Any) -> Any:
        out = original_schedule(self, *args, **kwargs)
        if _current is not None:
            _current.schedules[id(self)] = _current.schedules.get(id(self), 0) + 1
        return out

    Scheduler.__init__ = noted_init  # type: ignore[method-assign]
    TracingMixin.__init__ = recorded_init  # type: ignore[method-assign]
    TracingMixin.schedule = counted_schedule  # type: ignore[method-assign]


def _waive_triton_cpu_check() -> None:
    """vLLM 0.34's CPU platform refuses an x86 machine without triton-cpu when a config is
    built (its CPU model runner's kernels need it). These tests run no model: the check is
    waived, only where that check exists and Triton has no backend here."""
    import inspect

    import vllm.triton_utils
    from vllm.platforms import current_platform

    if not current_platform.is_cpu() or vllm.triton_utils.HAS_TRITON:
        return
    check = type(current_platform).check_and_update_config
    if "requires Triton (triton-cpu)" in inspect.getsource(check):
        vllm.triton_utils.HAS_TRITON = True


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "cpu_test: vLLM's marker (tests that run on CPU)")
    config.addinivalue_line("markers", "skip_global_cleanup: vLLM's marker")
    _waive_triton_cpu_check()
    _wrap_scheduler_init()


def _check(built: Built) -> list[str]:
    """What is wrong with the traces of one test; [] when they are all sound."""
    problems = []
    for name in built.classes:
        if name in ("Scheduler", "AsyncScheduler") and not STOCK:
            problems.append(f"a stock {name} was built: the tracing one was not switched in")
    for sched, path in built.traced:
        rec = sched._schedscope
        if rec is None:
            problems.append(f"{path.name}: the tracing scheduler did not record")
            continue
        rec.close()
        trace = load(path)  # strict: raises TraceError on a malformed file
        footer = trace.footer or {}
        if trace.footer is None:
            problems.append(f"{path.name}: no footer")
        if footer.get("errors"):
            problems.append(f"{path.name}: the tracer counted {footer['errors']} errors")
        if footer.get("records_dropped"):
            problems.append(f"{path.name}: {footer['records_dropped']} records dropped")
        if mismatch := footer_mismatch(trace.footer_count()):
            problems.append(f"{path.name}: {mismatch}")
        calls = built.schedules.get(id(sched), 0)
        if len(trace) != calls:
            problems.append(f"{path.name}: {len(trace)} steps recorded, schedule() returned {calls} times")
    return problems


@pytest.fixture(autouse=True)
def _schedscope_traced(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[None]:
    global _current
    built = _current = Built(tmp_path_factory.mktemp("schedscope"))
    try:
        yield
    finally:
        _current = None
    problems = _check(built)
    if REPORT:
        steps = sum(built.schedules.get(id(s), 0) for s, _ in built.traced)
        line = {"test": request.node.nodeid, "built": built.classes, "traces": len(built.traced)}
        with open(REPORT, "a") as f:
            f.write(json.dumps({**line, "steps": steps, "problems": problems}) + "\n")
    if problems:
        pytest.fail("schedscope: " + "; ".join(problems), pytrace=False)
