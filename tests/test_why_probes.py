"""The reasons of tracer.analysis.why, proven on vLLM's real Scheduler (issue 19, item 5).

Each scenario makes one constraint bind. It is recorded with the tracing scheduler,
analysed with tracer.analysis.why, and replayed exactly (tracer.whatif.probe): right
before each step's schedule(), a deep copy of the scheduler has ONE constraint relaxed
and schedules. For every waiting or clipped request whose reason is exact (or derived):

- relaxing the named constraint admits it (more tokens, for a clipped one; for a request
  behind the head of the queue, the head is admitted);
- relaxing any other single constraint does not.

The real schedule() of every probed step still re-makes the record (the copies leave
the original untouched).
"""

from __future__ import annotations

import dataclasses
import logging
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from tracer.analysis.reasons import DERIVED, EXACT
from tracer.trace.reader import load
from tracer.trace.trace_type import Trace
from tracer.whatif.offline import EngineSpec, RequestSpec

pytestmark = pytest.mark.vllm


def _minor() -> str:
    import vllm

    return ".".join(vllm.__version__.split(".")[:2])


@dataclass
class Report:
    """What the probes found on one trace."""

    proven: Counter[str] = field(default_factory=Counter)  # code -> requests proven
    unprobed: Counter[str] = field(default_factory=Counter)  # exact, but nothing to relax
    failures: list[str] = field(default_factory=list)
    # (step, request, code, the constraints binding with it): no single relaxation admits
    cobound: list[tuple[int, str, str, tuple[str, ...]]] = field(default_factory=list)
    steps: int = 0


def check_reasons(trace: Trace, rows: list[int] | None = None) -> Report:
    """Probe every listed step (all by default) and check every exact or derived reason."""
    from tracer.analysis.why import step_why
    from tracer.whatif.probe import RELAXES, co_binding, probe_steps, verdict

    report = Report()
    whys = [step_why(trace, row) for row in (range(len(trace)) if rows is None else rows)]
    targets = {
        w.step: [r for r in w.requests if r.cause.certainty in (EXACT, DERIVED)]
        for w in whys
        if any(r.cause.certainty in (EXACT, DERIVED) for r in w.requests)
    }
    probes = probe_steps(trace, targets)
    report.steps = len(probes)
    failed: list[tuple[Any, Any, tuple[str, int] | None, Any]] = []
    for w in whys:
        held = targets.get(w.step, [])
        # schedule()'s order: the running loop's clips, then the waiting queue.
        order = [r for r in held if r.state != "waiting"] + [r for r in held if r.state == "waiting"]
        leads: dict[str, tuple[str, int]] = {}
        for r in order:
            if r.cause.code != "behind":
                leads.setdefault(r.cause.code, (r.id, r.tokens if r.state == "clipped" else 0))
        for r in order:
            code = r.cause.root
            if code not in RELAXES:
                report.unprobed[code] += 1
                continue
            have = r.tokens if r.state == "clipped" else 0
            lead = (r.cause.behind, 0) if r.cause.code == "behind" and r.cause.behind else leads.get(code)
            v = verdict(probes[w.step], code, r.id, have, lead=lead)
            if not v.own:
                report.unprobed[code] += 1
            elif code == "preemption" and probes[w.step]["kv"].preempted:
                report.failures.append(f"step {w.step}: with more KV blocks it still preempts")
            elif v.proven:
                kind = (
                    ""
                    if lead is None or lead[0] == r.id
                    else ("behind:" if r.cause.code == "behind" else "after:")
                )
                report.proven[f"{kind}{code}"] += 1
            else:
                failed.append((w, r, lead, v))
    # Where the reason's own relaxation does not admit alone: which constraint binds with it.
    pairs = probe_steps(trace, sorted({w.step for w, *_ in failed}), pairs=True) if failed else {}
    for w, r, lead, v in failed:
        target, have = lead or (r.id, r.tokens if r.state == "clipped" else 0)
        with_ = co_binding(pairs[w.step], r.cause.root, target, have)
        # A second constraint binds too: the reason must name it ("also").
        named = {RELAXES[c][0] for c in r.cause.numbers.get("also", ()) if c in RELAXES}
        if v.by is None and not v.others and with_ and named & set(with_):
            report.cobound.append((w.step, r.id, r.cause.root, with_))
            continue
        outcomes = {k: o.scheduled for k, o in probes[w.step].items()}
        report.failures.append(
            f"step {w.step} {r.id} ({r.state}, demand {r.demand}, tokens {r.tokens}): "
            f"reason {r.cause.as_dict()}; lead {lead}; relaxations {v.own} admit: {v.by}; "
            f"others admitting: {v.others}; facts {w.facts}; probes {outcomes}"
        )
    return report


def sample_rows(trace: Trace, per_code: int = 6) -> list[int]:
    """Rows that cover every reason the trace gives (exact or derived), `per_code` of each at
    most, spread over the run: probing every step of a long live trace costs too much."""
    from tracer.analysis.why import steps_why

    by_code: dict[str, list[int]] = {}
    for w in steps_why(trace, range(len(trace))):
        for code in {r.cause.root for r in w.requests if r.cause.certainty in (EXACT, DERIVED)}:
            by_code.setdefault(code, []).append(w.row)
    rows: set[int] = set()
    for found in by_code.values():
        stride = max(1, len(found) // per_code)
        rows.update(found[::stride][:per_code])
    return sorted(rows)


def record(spec: EngineSpec, requests: list[RequestSpec], path: Path, policy: str = "stock") -> Trace:
    from tracer.policies import scheduler_class
    from tracer.whatif.offline import build_scheduler, run_workload
    from tracer.whatif.replay import recording_to

    logging.disable(logging.WARNING)
    try:
        with recording_to(path):
            sched = build_scheduler(spec, scheduler_class(policy))
        run_workload(sched, requests)
        sched.shutdown()
    finally:
        logging.disable(logging.NOTSET)
    return load(path)


def _spread(n: int, prompt: int, out: int, every: int = 1, prefix: str = "r") -> list[RequestSpec]:
    return [
        RequestSpec(f"{prefix}{i}", prompt + (i * 37) % 50, out, arrival_step=1 + i * every) for i in range(n)
    ]


# DFlash K=7 under a 64-token budget: twelve short prompts, admitted beside decoders.
_DFLASH = (
    EngineSpec(
        method="dflash",
        num_speculative_tokens=7,
        max_num_batched_tokens=64,
        max_num_seqs=16,
        max_model_len=512,
    ),
    [RequestSpec(f"d{i}", 6, 30) for i in range(12)],
)

# DFlash K=3, a 64-token budget and a 40-block KV cache (640 tokens): prompts longer than the
# budget, whose first chunk fits the free blocks while the whole prompt does not (issue 32).
_WHOLE_PROMPT = EngineSpec(
    method="dflash",
    num_speculative_tokens=3,
    max_num_batched_tokens=64,
    num_kv_blocks=40,
    max_model_len=1024,
)


def _long_prompts(prefix: str, *, priority: bool = False) -> list[RequestSpec]:
    return [
        RequestSpec(
            f"{prefix}{i}", 150 + 40 * i, 20, arrival_step=1 + 2 * i, priority=i % 3 if priority else 0
        )
        for i in range(6)
    ]


# name -> (engine, requests, the reasons that must be proven, per vLLM minor ("*": any))
SCENARIOS: dict[str, tuple[EngineSpec, list[RequestSpec], dict[str, tuple[str, ...]]]] = {
    "max_num_seqs": (
        EngineSpec(max_num_seqs=4, max_num_batched_tokens=512, num_kv_blocks=2000),
        _spread(12, 40, 12),
        {"*": ("max_num_seqs",)},
    ),
    "kv_pressure": (
        EngineSpec(max_num_seqs=16, max_num_batched_tokens=256, num_kv_blocks=30),
        _spread(10, 60, 40),
        {"*": ("kv_blocks", "preemption")},
    ),
    "target_budget": (
        EngineSpec(max_num_seqs=16, max_num_batched_tokens=64, num_kv_blocks=2000),
        _spread(6, 300, 6, every=2),
        {"*": ("target_budget",)},
    ),
    "dflash": (
        *_DFLASH,
        {
            "0.31": ("input_budget",),
            "0.32": ("input_budget",),
            "0.33": ("max_num_active_seqs",),
            "0.34": ("max_num_active_seqs",),
        },
    ),
    # 0.33's rule on 0.32 through the `cap` policy layer (no slots, admission at B // lookahead).
    "dflash_cap_policy": (
        *_DFLASH,
        {"*": ("max_num_active_seqs",)},
    ),
    "dspark_padding": (
        EngineSpec(
            method="dspark",
            num_speculative_tokens=4,
            max_num_batched_tokens=21,
            max_num_seqs=8,
            max_model_len=256,
        ),
        [
            RequestSpec("a", 8, 40),
            RequestSpec("b", 8, 40),
            *(RequestSpec(f"o{i}", 1, 4, arrival_step=4) for i in range(5)),
        ],
        {"*": ("spec_padding",)},
    ),
    "long_prefill": (
        EngineSpec(long_prefill_token_threshold=32, max_num_batched_tokens=256, num_kv_blocks=2000),
        _spread(4, 200, 4),
        {"*": ("long_prefill",)},
    ),
    "chunked_off": (
        EngineSpec(
            enable_chunked_prefill=False, max_num_batched_tokens=160, max_model_len=160, num_kv_blocks=2000
        ),
        _spread(6, 90, 8, every=0),
        {"*": ("chunked_prefill_off",)},
    ),
    "kv_whole_prompt": (_WHOLE_PROMPT, _long_prompts("w"), {"*": ("kv_blocks",)}),
    "kv_whole_prompt_priority": (
        dataclasses.replace(_WHOLE_PROMPT, scheduling_policy="priority"),
        _long_prompts("p", priority=True),
        {"*": ("kv_blocks",)},
    ),
    # A tenth of the pool (4 blocks) kept free while any request runs: vLLM's KV watermark.
    "kv_watermark": (
        EngineSpec(max_num_batched_tokens=64, num_kv_blocks=40, max_model_len=1024, kv_watermark=0.1),
        [RequestSpec(f"m{i}", 60 + 30 * i, 30, arrival_step=1 + 2 * i) for i in range(6)],
        {"*": ("kv_blocks",)},
    ),
    "priority_preempt": (
        EngineSpec(
            max_num_batched_tokens=256,
            num_kv_blocks=20,
            scheduling_policy="priority",
            max_model_len=512,
        ),
        [
            RequestSpec(f"p{i}", 40 + (i * 29) % 60, 30, arrival_step=1 + 2 * i, priority=(7 - i) % 4)
            for i in range(8)
        ],
        {"*": ("preemption",)},
    ),
}


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_each_reason_is_the_one_constraint_that_admits(name: str, tmp_path: Path) -> None:
    spec, requests, expected = SCENARIOS[name]
    policy = "cap" if name.endswith("_cap_policy") else "stock"
    trace = record(spec, requests, tmp_path / f"{name}.jsonl", policy=policy)
    report = check_reasons(trace)
    print(name, dict(report.proven), dict(report.unprobed), len(report.failures), report.cobound[:3])
    assert not report.failures, "\n".join(report.failures[:5])
    assert _minor() in expected or "*" in expected, f"{name}: no expectation for vLLM {_minor()}"
    for code in expected.get(_minor(), expected.get("*", ())):
        assert report.proven[code], f"{name}: no {code} reason was proven: {dict(report.proven)}"


def _as_format_12(src: Path, dst: Path) -> Trace:
    """The trace as a 1.2 recorder wrote it: without the 1.3 facts a reason rests on."""
    import orjson

    from tracer.trace import schema

    lines = []
    for line in src.read_bytes().splitlines():
        rec = orjson.loads(line)
        if rec["kind"] == "header":
            rec["schema"] = "1.2"
        elif rec["kind"] == "step":
            for key in schema.WHY_STEP_KEYS:
                rec.pop(key, None)
        lines.append(orjson.dumps(rec))
    dst.write_bytes(b"\n".join(lines) + b"\n")
    return load(dst)


def test_exact_settles_an_older_traces_likely_reasons(tmp_path: Path) -> None:
    """`why --exact` (tracer.whatif.probe.settle): on a 1.2 trace the KV cache is only
    `likely` (no free-block counts); the probes settle it, to the 1.3 trace's exact answer."""
    from tracer.analysis.reasons import LIKELY
    from tracer.analysis.request_story import request_story
    from tracer.analysis.why import step_why
    from tracer.whatif.probe import settle, settle_story

    spec, requests, _ = SCENARIOS["kv_pressure"]
    new = record(spec, requests, tmp_path / "new.jsonl")
    old = _as_format_12(tmp_path / "new.jsonl", tmp_path / "old.jsonl")
    likely = [row for row in range(len(old)) if step_why(old, row).binding.certainty == LIKELY]
    assert likely, "the 1.2 trace must leave some reason likely"
    for row in likely[:4]:
        settled = settle(old, step_why(old, row))
        truth = step_why(new, row)
        assert settled.binding.certainty == EXACT and settled.binding.numbers["proven"] == "probe"
        assert settled.binding.code == truth.binding.code == "kv_blocks"
        assert [r.cause.root for r in settled.requests] == [r.cause.root for r in truth.requests]
    rid = step_why(old, likely[0]).binding.numbers["request"]
    story = request_story(old, rid)
    assert story is not None
    settled_story = settle_story(old, story)
    causes = [s.cause for s in settled_story.steps if s.cause is not None and s.state == "waiting"]
    assert causes and all(c.certainty in (EXACT, DERIVED) for c in causes)
    assert "kv_blocks" in settled_story.waiting_by_reason
    assert sum(n for n, _ in settled_story.waiting_by_reason.values()) == len(causes)


def test_probes_leave_the_scheduler_and_its_trace_untouched(tmp_path: Path) -> None:
    """Probing every step of a recording (each relaxation on a deep copy) changes neither
    the scheduler's decisions nor its trace: the copies record nothing."""
    import orjson

    from tracer.policies import scheduler_class
    from tracer.whatif.fidelity import decisions
    from tracer.whatif.offline import build_scheduler, run_workload
    from tracer.whatif.probe import probe_all
    from tracer.whatif.replay import recording_to

    spec, requests, _ = SCENARIOS["priority_preempt"]
    plain = record(spec, requests, tmp_path / "plain.jsonl")
    probed_path = tmp_path / "probed.jsonl"
    probed: list[int] = []

    def schedule(sched: Any) -> Any:
        probed.append(len(probe_all(sched)))
        return sched.schedule()

    with recording_to(probed_path):
        sched = build_scheduler(spec, scheduler_class("stock"))
    run_workload(sched, requests, schedule=schedule)
    sched.shutdown()
    got = load(probed_path)
    assert len(got) == len(plain) == len(probed) and all(n >= 3 for n in probed)
    footer = orjson.loads(probed_path.read_bytes().splitlines()[-1])
    assert footer["steps_written"] == len(plain) and footer["errors"] == 0
    assert [decisions(s) for s in got.steps()] == [decisions(s) for s in plain.steps()]


def test_exact_on_a_trace_the_replay_cannot_re_make_is_an_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A trace whose header does not match its steps (max_num_seqs edited from 4 to 3): the
    probes would run on a state the recording never had, so `why --exact` refuses (each
    probed step's real schedule() is checked against its record)."""
    import orjson

    from tracer.cli import main

    spec, requests, _ = SCENARIOS["max_num_seqs"]
    record(spec, requests, tmp_path / "t.jsonl")
    lines = (tmp_path / "t.jsonl").read_bytes().splitlines()
    header = orjson.loads(lines[0])
    header["config"]["max_num_seqs"] = header["config"]["max_num_active_seqs"] = 3
    (tmp_path / "bad.jsonl").write_bytes(b"\n".join([orjson.dumps(header), *lines[1:]]) + b"\n")
    from tracer.analysis.why import steps_why

    bad = _as_format_12(tmp_path / "bad.jsonl", tmp_path / "bad12.jsonl")  # derived reasons: --exact probes
    step = next(w.step for w in steps_why(bad, range(len(bad))) if w.binding.code == "max_num_seqs")
    assert main(["why", str(tmp_path / "bad12.jsonl"), "--step", str(step), "--exact"]) == 2
    assert f"the replay diverged from the record at step {step}" in capsys.readouterr().err


def _kv_rows(trace: Trace, decides: str) -> list[int]:
    """Rows whose head request waited for KV blocks its first chunk alone would have found
    (`decides` "prompt": the whole prompt's blocks did not fit; "watermark": the prompt's
    did, not with the watermark's beside them); each such reason must be exact."""
    from tracer.analysis.why import step_why

    rows = []
    for row in range(len(trace)):
        b = step_why(trace, row).binding
        if b.code != "kv_blocks":
            continue
        n = b.numbers
        free, watermark = n["kv_free"], n.get("kv_watermark_blocks", 0)
        need = max(n["kv_chunk_blocks"], n.get("kv_prompt_blocks", 0))
        if decides == "prompt":
            hit = n["kv_chunk_blocks"] + watermark <= free < n["kv_prompt_blocks"] + watermark
        else:
            hit = need <= free < need + watermark
        if hit:
            assert b.certainty == EXACT, (row, b)
            rows.append(row)
    return rows


def _without_admission_keys(src: Path, dst: Path) -> Trace:
    """The trace as a 1.3 recorder wrote it: no reserve_full_isl or watermark in its header."""
    import orjson

    lines = src.read_bytes().splitlines()
    header = orjson.loads(lines[0])
    header["schema"] = "1.3"
    for key in ("scheduler_reserve_full_isl", "kv_watermark", "kv_watermark_blocks"):
        header["config"].pop(key)
    dst.write_bytes(b"\n".join([orjson.dumps(header), *lines[1:]]) + b"\n")
    return load(dst)


@pytest.mark.parametrize(
    "name, decides",
    [("kv_whole_prompt", "prompt"), ("kv_whole_prompt_priority", "prompt"), ("kv_watermark", "watermark")],
)
def test_kv_admission_counts_the_whole_prompt_and_the_watermark(
    name: str, decides: str, tmp_path: Path
) -> None:
    """Where the head's first chunk fits the free blocks but its whole prompt (vLLM's
    scheduler_reserve_full_isl) or the watermark beside it does not, the KV cache is the
    exact reason, with those numbers, and more KV blocks alone admit it. A trace without the
    two settings (1.3) says `likely` (the prompt) or leaves KV as an alternative (the watermark)."""
    from tracer.analysis.reasons import CODES, LIKELY
    from tracer.analysis.step_bindings import bindings
    from tracer.analysis.why import step_why
    from tracer.render.why import cause_text

    spec, requests, _ = SCENARIOS[name]
    trace = record(spec, requests, tmp_path / "t.jsonl")
    assert trace.config["scheduler_reserve_full_isl"] is True
    assert trace.config["kv_watermark_blocks"] == (4 if decides == "watermark" else 0)
    rows = _kv_rows(trace, decides)
    assert rows, f"{name}: no step where the {decides} decides the KV cache"
    report = check_reasons(trace, rows)
    assert not report.failures, "\n".join(report.failures[:5])
    assert report.proven["kv_blocks"] >= len(rows)
    first = step_why(trace, rows[0]).binding
    text, n = cause_text(first), first.numbers
    assert f"{n['kv_free']} free" in text and "whole prompt" in text
    assert ("watermark keeps 4 free" in text) == (decides == "watermark")
    old = _without_admission_keys(tmp_path / "t.jsonl", tmp_path / "old.jsonl")
    for t in (trace, old):  # the vectorised pass decides as step by step
        assert [CODES[c] for c in bindings(t).tolist()] == [
            step_why(t, r).binding.code for r in range(len(t))
        ]
    for row in rows:
        b = step_why(old, row).binding
        if decides == "prompt":
            assert b.code == "kv_blocks" and b.certainty == LIKELY and "unknown" in b.alternatives
        else:
            assert b.code == "unknown" and "kv_blocks" in b.alternatives


def test_exact_settles_the_whole_prompt_on_a_trace_without_the_setting(tmp_path: Path) -> None:
    """`why --exact` replays a 1.3 trace with vLLM's default (the whole prompt reserved), and
    its probes prove the likely KV reason."""
    from tracer.analysis.why import step_why
    from tracer.whatif.probe import settle

    spec, requests, _ = SCENARIOS["kv_whole_prompt"]
    trace = record(spec, requests, tmp_path / "t.jsonl")
    row = _kv_rows(trace, "prompt")[0]
    old = _without_admission_keys(tmp_path / "t.jsonl", tmp_path / "old.jsonl")
    settled = settle(old, step_why(old, row)).binding
    assert settled.code == "kv_blocks" and settled.certainty == EXACT and settled.numbers["proven"] == "probe"


def test_without_the_whole_prompt_reservation_the_first_chunk_decides(tmp_path: Path) -> None:
    """With --no-scheduler-reserve-full-isl vLLM admits a prompt whose first chunk fits: a KV
    reason then counts the chunk alone, and more KV blocks admit the head."""
    from tracer.analysis.why import step_why

    spec = dataclasses.replace(_WHOLE_PROMPT, num_kv_blocks=24, scheduler_reserve_full_isl=False)
    requests = [RequestSpec(f"o{i}", 150 + 20 * i, 20, arrival_step=1 + 2 * i) for i in range(6)]
    trace = record(spec, requests, tmp_path / "t.jsonl")
    assert trace.config["scheduler_reserve_full_isl"] is False
    causes = {row: step_why(trace, row).binding for row in range(len(trace))}
    rows = [row for row, b in causes.items() if b.code == "kv_blocks"]
    assert rows
    for row in rows:
        n = causes[row].numbers
        assert "kv_prompt_blocks" not in n and n["kv_free"] < n["kv_chunk_blocks"] == n["kv_needed_at_most"]
    report = check_reasons(trace, rows)
    assert not report.failures, "\n".join(report.failures[:5])
    assert report.proven["kv_blocks"] >= len(rows)


def test_the_header_records_vllms_admission_settings(tmp_path: Path) -> None:
    """scheduler_reserve_full_isl and the watermark in the header are what vLLM's scheduler
    and KV cache manager hold, with vLLM's defaults and with both changed."""
    from tracer.whatif.offline import build_scheduler

    for full, watermark in ((None, 0.0), (False, 0.25)):
        spec = EngineSpec(num_kv_blocks=40, scheduler_reserve_full_isl=full, kv_watermark=watermark)
        trace = record(spec, [RequestSpec("a", 20, 2)], tmp_path / f"{full}.jsonl")
        sched = build_scheduler(spec)
        try:
            assert trace.config["scheduler_reserve_full_isl"] is sched.scheduler_reserve_full_isl
            assert trace.config["kv_watermark"] == sched.scheduler_config.watermark == watermark
            assert trace.config["kv_watermark_blocks"] == sched.kv_cache_manager.watermark_blocks
        finally:
            sched.shutdown()
    assert trace.config["scheduler_reserve_full_isl"] is False and trace.config["kv_watermark_blocks"] == 10


def test_a_preemption_names_the_cap_that_would_have_held_the_queue_too(tmp_path: Path) -> None:
    """A step that preempted admits nothing; had its victims kept running, `max_num_seqs` would
    have stopped the waiting loop as well. The reason says so ("also"), and the probes agree:
    more KV alone admits no one, more KV with a higher cap does."""
    spec = EngineSpec(max_num_seqs=4, max_num_batched_tokens=256, num_kv_blocks=24)
    trace = record(spec, _spread(10, 60, 40), tmp_path / "preempt_at_cap.jsonl")
    from tracer.analysis.why import step_why

    both = [
        w.step
        for w in (step_why(trace, row) for row in range(len(trace)))
        if w.binding.code == "preemption" and w.binding.numbers.get("also") == ["max_num_seqs"]
    ]
    assert both, "the scenario must preempt with the cap full"
    report = check_reasons(trace)
    assert not report.failures, "\n".join(report.failures[:5])
    assert any(step in both and code == "preemption" for step, _, code, _ in report.cobound)
