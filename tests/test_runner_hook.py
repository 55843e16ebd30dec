"""The runner hook's wrappers, without vLLM: stand-ins shaped like vLLM's classes.

tests/test_runner_hook_v2.py runs the same hook on vLLM 0.33's real classes; here the
stand-ins let each contract be checked in isolation: what is noted, what is attached
to the output, that dummy runs note nothing, that a moved signature gives one warning
and no patch, and that a fault never reaches the runner.
"""

from __future__ import annotations

import logging
import pickle
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import orjson
import pytest

from tests.hook_support import fresh_hook, restore_attrs
from tracer.record import runner_notes, speculator_hook
from tracer.record.encoder import runner_record
from tracer.record.snapshot import RunnerNote, RunnerPass
from tracer.trace import schema
from tracer.trace.reader import load

__all__ = ["fresh_hook", "restore_attrs"]  # fixtures

CAPACITY = 64
EMPTY = SimpleNamespace(req_ids=[])  # vLLM's shared empty output


def dispatch_cg_and_sync_dp(manager: Any, num_reqs: int, num_tokens: int, *args: Any, **kw: Any) -> Any:
    """Stand-in for vLLM's dispatch: pads to a multiple of 8, as a captured graph size."""
    return SimpleNamespace(num_tokens=-(-num_tokens // 8) * 8), None


class Output:
    """A ModelRunnerOutput: plain attributes, picklable."""

    def __init__(self, req_ids: list[str]) -> None:
        self.req_ids = req_ids


class AsyncOutput:
    """The V2 AsyncOutput: holds the ModelRunnerOutput its get_output() returns."""

    def __init__(self, output: Output) -> None:
        self.model_runner_output = output

    def get_output(self) -> Output:
        return self.model_runner_output


def scheduled(tokens: dict[str, int]) -> Any:
    return SimpleNamespace(num_scheduled_tokens=tokens, total_num_scheduled_tokens=sum(tokens.values()))


def make_runner_cls() -> type:
    """A fresh stand-in V2 runner class (the hook patches at class level)."""

    class StandinV2Runner:
        def __init__(self, speculator: Any = None) -> None:
            self.input_buffers = SimpleNamespace(input_ids=SimpleNamespace(shape=(CAPACITY,)))
            self.max_num_tokens = CAPACITY
            self.speculator = speculator
            self.batch: Any = None

        def execute_model(
            self, scheduler_output: Any, intermediate_tensors: Any = None, dummy_run: bool = False
        ) -> Any:
            if not dummy_run and scheduler_output.total_num_scheduled_tokens == 0:
                return EMPTY
            desc = dispatch_cg_and_sync_dp(None, 0, scheduler_output.total_num_scheduled_tokens)[0]
            self.batch = self.prepare_inputs(scheduler_output, None, desc, 0)
            return None

        def prepare_inputs(
            self, scheduler_output: Any, batch_req_state: Any, batch_desc: Any, num_active_loras: int
        ) -> Any:
            total = scheduler_output.total_num_scheduled_tokens
            return SimpleNamespace(
                num_reqs=len(scheduler_output.num_scheduled_tokens),
                num_tokens=total,
                num_tokens_after_padding=max(total, batch_desc.num_tokens),
            )

        def sample_tokens(self, grammar_output: Any) -> Any:
            if self.speculator is not None:
                self.speculator.propose(self.batch, None, num_speculative_tokens=3)
            return AsyncOutput(Output([f"r{i}" for i in range(self.batch.num_reqs)]))

    return StandinV2Runner


def make_speculator_cls(name: str = "DFlashSpeculator") -> type:
    """A stand-in speculator whose class is named as a vLLM base (the hook picks its
    rule by the names in the MRO)."""

    def propose(
        self: Any,
        input_batch: Any,
        attn_metadata: Any = None,
        dummy_run: bool = False,
        num_speculative_tokens: Any = None,
    ) -> Any:
        dispatch_cg_and_sync_dp(None, input_batch.num_reqs, input_batch.num_reqs * self.num_query_per_req)
        dispatch_cg_and_sync_dp(None, input_batch.num_reqs, 1)  # a later pass: not the one noted
        return "drafts"

    def init(self: Any) -> None:
        self.input_buffers = SimpleNamespace(input_ids=SimpleNamespace(shape=(CAPACITY,)))

    return type(name, (), {"num_query_per_req": 4, "__init__": init, "propose": propose})


def one_step(runner: Any, tokens: dict[str, int]) -> Any:
    runner.execute_model(scheduled(tokens))
    return runner.sample_tokens(None)


@pytest.fixture
def module_dispatch(restore_attrs: Any) -> None:
    restore_attrs(sys.modules[__name__], "dispatch_cg_and_sync_dp")


def test_v2_notes_target_and_query_rows_with_their_padding(fresh_hook: Any, module_dispatch: None) -> None:
    rh = fresh_hook
    runner_cls = make_runner_cls()
    assert rh.install_v2(runner_cls)
    runner = runner_cls(make_speculator_cls()())
    out = one_step(runner, {"a": 5, "b": 4, "c": 1})
    # Pickled as the mp executor ships it to EngineCore.
    got = pickle.loads(pickle.dumps(out.get_output()))
    notes = getattr(got, runner_notes.ATTR)
    assert notes == [
        RunnerNote("target", 10, CAPACITY, 3, 16, True),
        RunnerNote("draft", 12, CAPACITY, 3, 16, True),
    ]
    assert {type(note) for note in notes} == {RunnerNote}  # typed after the trip, not bare tuples
    hooks = getattr(got, runner_notes.HOOKS_ATTR)
    assert hooks["runner"] == "v2" and hooks["runner_cls"].endswith("StandinV2Runner")
    assert hooks["speculator"].endswith("DFlashSpeculator") and hooks["speculator_rows"] == "query"
    assert hooks["padded"] == ["target", "draft"] and hooks["inactive"] == []
    # The state went out once; the next step carries notes only.
    again = one_step(runner, {"a": 1}).get_output()
    assert getattr(again, runner_notes.ATTR) == [
        RunnerNote("target", 1, CAPACITY, 1, 8, True),
        RunnerNote("draft", 4, CAPACITY, 1, 8, True),
    ]
    assert not hasattr(again, runner_notes.HOOKS_ATTR)


def test_v2_dummy_and_empty_steps_note_nothing(fresh_hook: Any) -> None:
    rh = fresh_hook
    runner_cls = make_runner_cls()
    rh.install_v2(runner_cls)
    runner = runner_cls()
    runner.execute_model(scheduled({"warmup": 8}), dummy_run=True)
    assert runner_notes.passes == [] and runner_notes._state["runner"] is None
    assert runner.execute_model(scheduled({})) is EMPTY
    assert not hasattr(EMPTY, runner_notes.ATTR), "vLLM's shared empty output must stay untouched"


def test_v2_signature_that_moved_is_not_patched_and_warns_once(
    fresh_hook: Any, caplog: pytest.LogCaptureFixture
) -> None:
    rh = fresh_hook

    class Moved:
        def execute_model(self, scheduler_output: Any) -> None:  # no dummy_run any more
            return None

        def sample_tokens(self, grammar_output: Any) -> None:
            return None

    original = Moved.execute_model
    with caplog.at_level(logging.WARNING, logger="schedscope"):
        assert rh.install_v2(Moved) is False
        assert rh.install_v2(Moved) is False
    assert Moved.execute_model is original
    warnings = [r for r in caplog.records if "V2 runner not hooked" in r.getMessage()]
    assert len(warnings) == 1
    assert runner_notes.hook_state()["inactive"] == [
        warnings[0].getMessage().removeprefix("schedscope: ").split(";")[0]
    ]


def test_v2_without_prepare_inputs_notes_scheduled_rows_unpadded(fresh_hook: Any) -> None:
    rh = fresh_hook
    runner_cls = make_runner_cls()
    original_prepare = runner_cls.prepare_inputs
    del runner_cls.prepare_inputs
    runner_cls._prepare = original_prepare

    def execute_model(
        self: Any, scheduler_output: Any, intermediate_tensors: Any = None, dummy_run: bool = False
    ):
        self.batch = self._prepare(scheduler_output, None, SimpleNamespace(num_tokens=0), 0)

    runner_cls.execute_model = execute_model
    assert rh.install_v2(runner_cls)
    got = one_step(runner_cls(), {"a": 3, "b": 2}).get_output()
    assert getattr(got, runner_notes.ATTR) == [RunnerNote("target", 5, CAPACITY, 2)]
    state = getattr(got, runner_notes.HOOKS_ATTR)
    assert state["padded"] == [] and "prepare_inputs" in state["inactive"][0]


def test_a_fault_in_the_hook_never_reaches_the_runner(
    fresh_hook: Any, module_dispatch: None, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    rh = fresh_hook
    runner_cls = make_runner_cls()
    rh.install_v2(runner_cls)

    def broken(spec: Any, batch: Any, k: Any) -> int:
        raise RuntimeError("a vLLM attribute changed meaning")

    monkeypatch.setitem(
        speculator_hook.SPECULATOR_RULES, "DFlashSpeculator", ("query", broken, speculator_hook._buffer_rows)
    )
    runner = runner_cls(make_speculator_cls()())
    with caplog.at_level(logging.ERROR, logger="schedscope"):
        for _ in range(3):
            got = one_step(runner, {"a": 2}).get_output()
    assert got.req_ids == ["r0"]
    # The draft note is lost, not the step.
    assert getattr(got, runner_notes.ATTR) == [RunnerNote("target", 2, CAPACITY, 1, 8, True)]
    assert len([r for r in caplog.records if "runner hook error" in r.getMessage()]) == 1


def test_speculator_rules_follow_vllm_base_classes(fresh_hook: Any, caplog: pytest.LogCaptureFixture) -> None:
    dflash = make_speculator_cls("DFlashSpeculator")
    dspark = type("DSparkSpeculator", (dflash,), {})
    assert speculator_hook.speculator_rule(dspark)[0] == "DFlashSpeculator"
    assert speculator_hook.speculator_rule(type("NgramGPUSpeculator", (), {})) == ("NgramGPUSpeculator", None)
    with caplog.at_level(logging.WARNING, logger="schedscope"):
        assert speculator_hook.patch_speculator_class(make_speculator_cls("BrandNewSpeculator")) is None
    assert any("no known base" in r.getMessage() for r in caplog.records)
    assert runner_notes.hook_state()["speculator_rows"] is None


def test_v1_async_output_gets_notes_through_get_output(fresh_hook: Any) -> None:
    rh = fresh_hook

    class V1Async:
        def get_output(self) -> Output:
            return Output(["x"])

    class V1Runner:
        input_ids = SimpleNamespace(shape=(CAPACITY,))

        def execute_model(self, scheduler_output: Any) -> None:
            return None

        def sample_tokens(self, grammar_output: Any) -> Any:
            return V1Async()

    assert rh.install_v1(V1Runner)
    runner = V1Runner()
    runner.execute_model(scheduled({"x": 7}))
    got = runner.sample_tokens(None).get_output()
    assert getattr(got, runner_notes.ATTR) == [RunnerNote("target", 7, CAPACITY, 1)]
    assert getattr(got, runner_notes.HOOKS_ATTR)["runner"] == "v1"


def test_recorder_writes_padded_rows_and_hooks_records(tmp_path: Path) -> None:
    """The recorder's side: a `padded` key only where the note has one, `hooks` as its
    own record kind; the reader sums padded rows per step and keeps the hooks records."""

    def runner(step: int, *note: Any) -> dict[str, Any]:
        return runner_record(RunnerPass(step, RunnerNote(*note)))

    padded = runner(3, "target", 10, 64, 2, 16, True)
    assert padded == {
        "kind": "runner",
        "step": 3,
        "pass": "target",
        "rows": 10,
        "cap": 64,
        "reqs": 2,
        "padded": 16,
    }
    assert list(padded)[:2] == ["kind", "step"]  # written first, as in every record
    assert "padded" not in runner(3, "draft", 4, 64, 1)
    # A hook that observes padding but did not see it this pass says so: null, not absent.
    assert runner(3, "draft", 4, 64, 1, None, True)["padded"] is None
    header = {"kind": "header", "schema": schema.SCHEMA_VERSION, "config": {}}

    def step(n: int) -> dict[str, Any]:
        return {"kind": "step", "step": n, "t": float(n), "target": {"cap": 64, "used": 10, "left": 54},
                "input": {"cap": 64, "used": 10, "left": 54}}  # fmt: skip

    records = [
        header,
        step(1),
        {"kind": "hooks", "step": 1, "runner": "v2", "inactive": []},
        runner(1, "target", 6, 64, 1, 8, True),
        runner(1, "target", 4, 64, 1, 8, True),
        step(2),
        runner(2, "target", 10, 64, 2),
    ]
    path = tmp_path / "t.jsonl"
    path.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in records))
    trace = load(path)
    assert list(trace.runner["target_rows"]) == [10, 10]
    assert list(trace.runner["target_padded"]) == [16, -1]
    assert list(trace.runner["draft_padded"]) == [-1, -1]
    assert [h["runner"] for h in trace.hooks] == ["v2"]


def test_a_runner_class_that_moved_gives_one_warning_not_a_crash(
    fresh_hook: Any, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    rh = fresh_hook
    monkeypatch.setattr(rh, "V1_RUNNER", ("tests.no_such_module", "GPUModelRunner"))  # an older/newer vLLM
    monkeypatch.setattr(rh, "V2_RUNNER", (__name__, "GPUModelRunner"))  # the module is there, the class moved
    with caplog.at_level(logging.WARNING, logger="schedscope"):
        assert rh.install() is False
        assert rh.install() is False
    moved = [r.getMessage() for r in caplog.records if "has no class GPUModelRunner" in r.getMessage()]
    assert len(moved) == 1
    assert any("has no class GPUModelRunner" in reason for reason in runner_notes.hook_state()["inactive"])
