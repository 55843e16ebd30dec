"""Flag detectors: true positives and negatives on traces recorded from vLLM's real
scheduler (sample_traces/), plus unit tests of each rule on hand-made steps for
faults a correct vLLM never produces."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import pytest

from tests.conftest import ROOT
from tracer.analysis import flags as F
from tracer.analysis.budget import MethodModel, simulate_without_excess
from tracer.analysis.flags import detect
from tracer.cli import main
from tracer.render.flags import WORDS, message, messages
from tracer.trace.reader import load

SAMPLES = ROOT / "sample_traces"
FAULT_KINDS = {F.ADDITIVE, F.QUERY_OVERFLOW, F.SHARED_OVERFLOW, F.NEGATIVE, F.PREEMPTION_LEAK}


def test_dflash_additive_is_flagged_with_seven_tokens_a_step() -> None:
    report = detect(load(SAMPLES / "dflash_k7_additive.jsonl"))
    assert [f.step for f in report.flags] == [1, 2, 3, 4]
    assert {f.kind for f in report.flags} == {F.ADDITIVE}
    for f in report.flags:
        assert f.numbers["tokens_withheld"] == 7 and f.numbers["exact"]
        assert f.numbers["target_used"] == 8185 and f.numbers["input_used"] == 8192
        assert "withheld 7 target tokens (8185 scheduled instead of 8192)" in message(f)
        assert f.severity == "warning"
    assert report.tokens_withheld == 28


def test_dspark_additive_clips_the_second_prefill() -> None:
    report = detect(load(SAMPLES / "dspark_k4_additive.jsonl"))
    first = report.flags[0]
    assert (first.step, first.kind, first.numbers["tokens_withheld"]) == (1, F.ADDITIVE, 6)
    assert first.numbers["target_used"] == 10  # 8 + 2 instead of 8 + 8


@pytest.mark.parametrize(
    "name",
    [
        "dflash_k7_separate.jsonl",
        "dflash_k7_cap.jsonl",
        "dspark_k4_separate.jsonl",
        "ngram_preempt.jsonl",
        "priority_preempt.jsonl",
        "draft_model.jsonl",
        "live_cpu_ngram.jsonl",
    ],
)
def test_correct_accounting_is_not_flagged(name: str) -> None:
    report = detect(load(SAMPLES / name))
    assert not [f for f in report.flags if f.kind in FAULT_KINDS]
    assert report.tokens_withheld == 0


def test_flags_cli_json(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["flags", str(SAMPLES / "dflash_k7_additive.jsonl"), "--json"]) == 0
    doc = orjson.loads(capsys.readouterr().out)
    assert doc["counts"] == {F.ADDITIVE: 4} and doc["tokens_withheld"] == 28
    assert set(doc["flags"][0]) == {"step", "kind", "severity", "message", "numbers"}


# -- unit tests on hand-made traces -------------------------------------------------


def make_trace(tmp_path: Path, config: dict[str, Any], steps: list[dict[str, Any]]) -> Any:
    header = {
        "kind": "header",
        "schema": "1.0",
        "config": {
            "buffer_capacity": config["max_num_batched_tokens"],
            "max_num_scheduled_tokens": config["max_num_batched_tokens"],
            **config,
        },
    }
    lines = [header] + [{"kind": "step", "t": float(i), "step": i + 1, **s} for i, s in enumerate(steps)]
    path = tmp_path / "t.jsonl"
    path.write_bytes(b"".join(orjson.dumps(x) + b"\n" for x in lines))
    return load(path)


def step(used: int, reserved: int, cap: int, running: list[list[Any]], **extra: Any) -> dict[str, Any]:
    return {
        "target": {"cap": cap, "used": used, "left": cap - used},
        "input": {"cap": cap, "used": used + reserved, "reserved": reserved, "left": cap - used - reserved},
        "running": running,
        **extra,
    }


def test_withheld_is_an_upper_bound_when_several_requests_bind() -> None:
    cfg = {"spec_method": "dflash", "draft_slots": 2, "query_rows_per_req": 3, "max_num_batched_tokens": 10}
    model = MethodModel.from_config(cfg)
    # Two requests, 2 slots each: vLLM scheduled 3 + 3 (3+2 + 3+2 = 10).
    rec = step(6, 4, 10, [["a", 3, 0, 5], ["b", 3, 0, 5]], new=[], resumed=[], waiting_demand=[])
    result = simulate_without_excess(rec, cfg, model)
    assert (result.would_schedule, result.tokens, result.exact) == (10, 4, False)


def test_query_overflow(tmp_path: Path) -> None:
    cfg = {
        "spec_method": "dflash",
        "num_speculative_tokens": 3,
        "query_rows_per_req": 4,
        "max_num_batched_tokens": 8,
    }
    trace = make_trace(tmp_path, cfg, [step(3, 0, 8, [["a", 1, 0, 1], ["b", 1, 0, 1], ["c", 1, 0, 1]])])
    flags = detect(trace).flags
    assert [(f.kind, f.numbers["query_rows"], f.numbers["query_cap"]) for f in flags] == [
        (F.QUERY_OVERFLOW, 12, 8)
    ]


def test_shared_buffer_overflow(tmp_path: Path) -> None:
    cfg = {"spec_method": "draft_model", "draft_slots": 1, "max_num_batched_tokens": 8}
    trace = make_trace(tmp_path, cfg, [step(8, 1, 8, [["a", 8, 0, 8]])])
    kinds = [f.kind for f in detect(trace).flags]
    assert F.SHARED_OVERFLOW in kinds and F.NEGATIVE in kinds


def test_negative_budget(tmp_path: Path) -> None:
    cfg = {"spec_method": None, "max_num_batched_tokens": 8}
    trace = make_trace(tmp_path, cfg, [step(9, 0, 8, [["a", 9, 0, 9]])])
    flags = detect(trace).flags
    assert [(f.kind, f.numbers["budget"], f.numbers["left"]) for f in flags] == [
        (F.NEGATIVE, "target", -1),
        (F.NEGATIVE, "input", -1),
    ]


def test_preemption_budget_leak(tmp_path: Path) -> None:
    cfg = {"spec_method": None, "max_num_batched_tokens": 16}
    rec = step(8, 0, 16, [["a", 4, 0, 4], ["b", 4, 0, 4]], preempted=["b"])
    (flag,) = detect(make_trace(tmp_path, cfg, [rec])).flags
    assert flag.kind == F.PREEMPTION_LEAK and flag.numbers["leaked"] == ["b"]


def test_admission_cap_binding(tmp_path: Path) -> None:
    cfg = {
        "spec_method": "dflash",
        "num_speculative_tokens": 3,
        "query_rows_per_req": 4,
        "max_num_batched_tokens": 64,
        "max_num_seqs": 16,
        "max_num_active_seqs": 2,
    }
    # At the cap with requests waiting and room for their query rows: binding.
    binding = step(2, 0, 64, [["a", 1, 0, 1], ["b", 1, 0, 1]], num_running=2, num_waiting=3)
    below_cap = step(1, 0, 64, [["a", 1, 0, 1]], num_running=1, num_waiting=3)
    flags = detect(make_trace(tmp_path, cfg, [binding, below_cap])).flags
    assert [(f.step, f.kind) for f in flags] == [(1, F.CAP_BINDING)]
    assert flags[0].numbers == {"cap": 2, "num_running": 2, "num_waiting": 3, "input_left": 62}


@pytest.mark.parametrize("path", sorted(SAMPLES.glob("*.jsonl")), ids=lambda p: p.stem)
def test_flag_list_columns_agree_with_its_flags(path: Path) -> None:
    """The columns (steps, kinds, sentences, tokens withheld) say what the Flag objects say, in
    the order views list them: by step, then by kind in the registry's order."""
    report = F.detect(load(path))
    listed = report.flags
    made = list(listed)
    assert len(made) == len(listed)
    rank = {kind: i for i, kind in enumerate(F.KINDS)}
    assert [(f.step, rank[f.kind]) for f in made] == sorted((f.step, rank[f.kind]) for f in made)
    assert listed.steps.tolist() == [f.step for f in made]
    assert listed.kinds.tolist() == [f.kind for f in made]
    assert messages(listed) == [message(f) for f in made]
    assert listed.severities() == [f.severity for f in made]
    withheld = [f.numbers.get("tokens_withheld", 0) for f in made]
    assert listed.withheld().tolist() == withheld and report.tokens_withheld == sum(withheld)
    assert report.counts() == dict(Counter(f.kind for f in made))
    assert listed[1:3] == made[1:3] and listed[len(made) :] == [] and listed[-1:] == made[-1:]
    for kind in set(listed.kinds.tolist()):
        at = listed.positions([kind])
        assert listed.take(at) == [f for f in made if f.kind == kind]
    with pytest.raises(IndexError):
        listed[len(made)]
    for f in made:
        if f.kind == F.LIMIT_HOLDS:
            assert f" and {1 - f.numbers['kv_usage']:.0%} of KV were free" in message(f)


def test_free_percent_rounds_as_a_float_format_does() -> None:
    """The bulk percent equals `f"{1 - kv:.0%}"`, ties (x.5 after * 100) included."""
    rng = np.random.default_rng(7)
    kv = np.concatenate(
        [
            rng.random(200_000),
            np.round(rng.random(100_000), 3),  # many exact-looking ties: 0.125, 0.875, ...
            np.arange(0, 1001) / 1000,
            [0.0, 1.0, 0.005, 0.015, 0.125, 0.375, 0.625, 0.995, 1 - 1e-17],
        ]
    )
    assert [f"{p}%" for p in F.free_percent(kv).tolist()] == [f"{1 - x:.0%}" for x in kv.tolist()]


# Each kind's sentence as a user reads it, on the scenarios above (pinned from the words the
# detectors made before the sentences moved to tracer.render.flags).
SENTENCES = {
    F.QUERY_OVERFLOW: (
        "12 query rows exceed the drafter buffer of 8: bound admission so that requests × 4 ≤ 8."
    ),
    F.SHARED_OVERFLOW: (
        "target tokens plus draft_model draft rows (9) exceed the shared input buffer of 8: the "
        "reservation must stay additive for this method."
    ),
    F.NEGATIVE: (
        "the target budget ended the step at -1: the scheduler handed out more than its 8; its final "
        "assert would fail."
    ),
    F.PREEMPTION_LEAK: (
        "preempted request(s) b still hold this step's budget (4 tokens): restore both the target and "
        "the input/query budget when preempting a request scheduled earlier in the step."
    ),
    F.CAP_BINDING: (
        "the admission cap of 2 running requests kept 3 waiting while 62 input rows were free; a "
        "per-step query budget would admit more as long as their query rows fit."
    ),
}


@pytest.mark.parametrize(
    ("kind", "config", "steps"),
    [
        (
            F.QUERY_OVERFLOW,
            {"spec_method": "dflash", "num_speculative_tokens": 3, "query_rows_per_req": 4,
             "max_num_batched_tokens": 8},
            [step(3, 0, 8, [["a", 1, 0, 1], ["b", 1, 0, 1], ["c", 1, 0, 1]])],
        ),
        (
            F.SHARED_OVERFLOW,
            {"spec_method": "draft_model", "draft_slots": 1, "max_num_batched_tokens": 8},
            [step(8, 1, 8, [["a", 8, 0, 8]])],
        ),
        (F.NEGATIVE, {"spec_method": None, "max_num_batched_tokens": 8}, [step(9, 0, 8, [["a", 9, 0, 9]])]),
        (
            F.PREEMPTION_LEAK,
            {"spec_method": None, "max_num_batched_tokens": 16},
            [step(8, 0, 16, [["a", 4, 0, 4], ["b", 4, 0, 4]], preempted=["b"])],
        ),
        (
            F.CAP_BINDING,
            {"spec_method": "dflash", "num_speculative_tokens": 3, "query_rows_per_req": 4,
             "max_num_batched_tokens": 64, "max_num_seqs": 16, "max_num_active_seqs": 2},
            [step(2, 0, 64, [["a", 1, 0, 1], ["b", 1, 0, 1]], num_running=2, num_waiting=3)],
        ),
    ],
    ids=lambda v: v if isinstance(v, str) else "",
)  # fmt: skip
def test_each_kind_is_worded_in_render(
    tmp_path: Path, kind: str, config: dict[str, Any], steps: list
) -> None:
    """One flag's sentence and the bulk sentences agree, and read as pinned; every kind the
    detectors make has its words in tracer.render.flags."""
    listed = detect(make_trace(tmp_path, config, steps)).flags
    first = listed.positions([kind])[0]
    assert message(listed[int(first)]) == SENTENCES[kind]
    assert messages(listed) == [message(f) for f in listed]
    assert set(WORDS) == set(F.KINDS)
