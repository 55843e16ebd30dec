"""Why: the reasons on the bundled traces, in every output of the model layer, the format 1.3
facts against vLLM's own state, and bad input.

The counterfactual proof (relax the named constraint on a copy of vLLM's scheduler and the
request is admitted; relax any other and it is not) is tests/test_why_probes.py.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import re
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import pytest

from tests.conftest import ROOT
from tracer.analysis import request_story, step_bindings, why
from tracer.analysis.reasons import CODES, DERIVED, EXACT, REASONS
from tracer.analysis.session import Session
from tracer.cli import main
from tracer.trace import schema
from tracer.trace.reader import load

SAMPLES = ROOT / "sample_traces"
LIVE = SAMPLES / "live_cpu_ngram.jsonl"


def _codes(trace: Any) -> dict[int, str]:
    return dict(
        zip(
            trace.columns["step"].tolist(),
            (CODES[c] for c in step_bindings.bindings(trace).tolist()),
            strict=True,
        )
    )


def test_live_sample_steps_3_to_19_are_held_by_max_num_seqs() -> None:
    trace = load(LIVE)
    codes = _codes(trace)
    assert all(codes[s] == "max_num_seqs" for s in range(3, 20))
    assert codes[1] == "none" and codes[2] == "target_budget"  # step 2 spent all 128 tokens
    for step in range(3, 20):
        w = why.step_why(trace, step - 1)
        assert w.binding.code == "max_num_seqs" and w.binding.certainty == DERIVED  # a 1.1 trace
        assert w.binding.numbers["cap"] == 8 and w.binding.numbers["running"] == 8
        waiting = w.waiting
        assert len(waiting) == 4 and all(r.cause.code == "max_num_seqs" for r in waiting)


@pytest.mark.parametrize("path", sorted(SAMPLES.glob("*.jsonl")), ids=lambda p: p.stem)
def test_bindings_equal_the_step_by_step_reference(path: Path) -> None:
    """The vectorised pass equals step_why's binding at every step, and every waiting request is
    explained (listed ones each get a reason; the waiting weights count every waiting request)."""
    trace = load(path)
    codes = step_bindings.bindings(trace)
    for row in range(len(trace)):
        w = why.step_why(trace, row)
        assert CODES[codes[row]] == w.binding.code, (path.name, row)
        rec = trace.step(row)
        assert [r.id for r in w.waiting] == [e[0] for e in rec["waiting_demand"]]
        assert all(r.cause.code in REASONS for r in w.requests)
    summary = step_bindings.waiting_summary(trace, codes)
    assert summary.total == int(step_bindings.waiting_weights(trace).sum())
    assert sum(summary.by_reason.values()) == summary.total


def test_summary_flags_and_why_say_max_num_seqs_on_the_live_sample(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["summary", str(LIVE)]) == 0
    out = capsys.readouterr().out
    assert "held by max_num_seqs=8" in out and "raise --max-num-seqs" in out
    assert main(["flags", str(LIVE), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    held = [f for f in doc["flags"] if f["kind"] == "limit-holds-waiting"]
    assert {f["step"] for f in held} >= set(range(3, 20))
    assert all(f["numbers"]["reason"] == "max_num_seqs" for f in held)
    assert main(["why", str(LIVE), "--step", "4", "--json"]) == 0
    step = json.loads(capsys.readouterr().out)
    assert step["binding"]["reason"] == "max_num_seqs" and step["binding"]["cap"] == 8
    assert [r["reason"] for r in step["requests"]] == ["max_num_seqs"] * 4
    rid = step["requests"][2]["id"]
    assert main(["why", str(LIVE), rid]) == 0
    text = capsys.readouterr().out
    assert "max_num_seqs=8" in text and "TTFT" in text


def test_a_request_story_splits_waiting_and_ttft() -> None:
    trace = load(LIVE)
    rid = why.step_why(trace, 3).waiting[-1].id
    story = request_story.request_story(trace, rid)
    assert story is not None
    waited = story.waiting_by_reason
    assert waited["max_num_seqs"][0] >= 17  # steps 3..19 at least
    admitted = next(s for s in story.steps if s.state.startswith("admitted"))
    waiting_steps = [s.step for s in story.steps if s.state == "waiting"]
    assert max(waiting_steps) < admitted.step
    ttft = story.ttft
    assert ttft["first_token_step"] >= admitted.step
    parts = sum(ttft["waiting"].values()) + ttft["prefill_seconds"] + ttft["first_token_seconds"]
    parts += ttft["frontend_seconds"] + ttft["unlisted_seconds"]
    assert ttft["total_seconds"] == pytest.approx(parts, abs=1e-5)
    # The live trace records arrivals: the story starts at the request's arrival, whose part
    # before the scheduler had it is its arrival_time on the steps' clock up to its step.
    assert ttft["from"] == "arrival"
    arrival = next(e for r in trace.iter_steps() for e in r["inputs"] if e[0] == "a" and e[1] == rid)
    row = next(i for i, r in enumerate(trace.iter_steps()) if arrival in r["inputs"])
    h = trace.header
    expected = trace.columns["t"][row] - (arrival[5] - h["start_time"] + h["t0"])
    assert ttft["frontend_seconds"] == pytest.approx(expected, abs=1e-6)
    assert story.finished is not None


def test_priority_preemptions_name_trigger_lost_work_and_cost(tmp_path: Path) -> None:
    """Recorded on vLLM's real scheduler: each preemption's trigger and lost tokens are vLLM's
    (the victim's computed tokens before schedule(), a running request as trigger), and its
    resume cost is what the trace shows after."""
    pytest.importorskip("vllm")
    path, computed = _record_priority(tmp_path)
    trace = load(path)
    assert trace.header["schema"] == schema.SCHEMA_VERSION
    seen = 0
    for row in np.flatnonzero(trace.columns["n_preempted"] > 0).tolist():
        w = why.step_why(trace, row)
        step = w.step
        for p in w.preemptions:
            seen += 1
            assert p.certainty == EXACT and p.policy == "priority"
            assert p.lost == computed[step][p.victim]
            assert p.trigger in computed[step]  # a request that was running before schedule()
            assert p.kv_before is not None and p.kv_after is not None and p.kv_after < p.kv_before
            assert why.trigger_kind(p) in ("priority", "self")
            if p.resumed_step is not None:
                assert p.steps_until_resumed == p.resumed_step - step
                assert 0 <= p.recomputed <= p.lost
    assert seen == int(trace.columns["n_preempted"].sum()) > 0
    # The vectorised pass reads a 1.3 step's facts by region: the same as step by step.
    codes = step_bindings.bindings(trace).tolist()
    assert [CODES[c] for c in codes] == [why.step_why(trace, r).binding.code for r in range(len(trace))]
    assert "kv_blocks" in {CODES[c] for c in codes}


def _record_priority(tmp_path: Path) -> tuple[Path, dict[int, dict[str, int]]]:
    from tracer.policies import scheduler_class
    from tracer.whatif.offline import build_scheduler, run_workload
    from tracer.whatif.replay import recording_to
    from tracer.whatif.scenarios import SCENARIOS, mixed_accept

    spec, requests = SCENARIOS["priority_preempt"]
    path = tmp_path / "p.jsonl"
    computed: dict[int, dict[str, int]] = {}
    with recording_to(path):
        sched = build_scheduler(spec, scheduler_class("stock"))

        def schedule(s: Any) -> Any:
            computed[s._schedscope.step + 1] = {r.request_id: r.num_computed_tokens for r in s.running}
            return s.schedule()

        run_workload(sched, requests, accept=mixed_accept, schedule=schedule)
        sched.shutdown()
    return path, computed


def test_kv_free_and_prefix_hits_are_vllms_own(tmp_path: Path) -> None:
    """kv_free is the block pool's free count around schedule(); `cached` is the prefix hit
    vLLM scheduled each new request from (NewRequestData.num_computed_tokens)."""
    pytest.importorskip("vllm")
    from tracer.scheduler import TracingScheduler
    from tracer.whatif.offline import Driver, EngineSpec, build_scheduler, make_request, prompt_tokens
    from tracer.whatif.replay import recording_to
    from tracer.whatif.scenarios import mixed_accept

    spec = EngineSpec(
        method="ngram",
        num_speculative_tokens=3,
        max_num_batched_tokens=256,
        num_kv_blocks=64,
        enable_prefix_caching=True,
    )
    free: dict[int, tuple[int, int]] = {}
    hits: dict[str, int] = {}
    path = tmp_path / "t.jsonl"
    with recording_to(path):
        sched = build_scheduler(spec, TracingScheduler)
        block = int(sched.block_size)
        shared = prompt_tokens([(None, "a")], 200, block)
        driver = Driver(sched, mixed_accept)
        arrivals = {1: ["a"], 3: ["b0", "b1"], 5: ["b2", "b3"]}

        def schedule() -> Any:
            pool = sched.kv_cache_manager.block_pool
            before = pool.get_num_free_blocks()
            out = sched.schedule()
            free[sched._schedscope.step] = (before, pool.get_num_free_blocks())
            hits.update({new.req_id: new.num_computed_tokens for new in out.scheduled_new_reqs})
            return out

        for step in range(1, 40):
            for rid in arrivals.get(step, ()):
                prompt = (
                    shared if rid == "a" else shared[: 4 * block] + prompt_tokens([(None, rid)], 60, block)
                )
                sched.add_request(make_request(rid, len(prompt), 6, prompt=prompt, block_size=block))
            if sched.has_requests():
                driver.step(schedule)
        sched.shutdown()
    recorded_hits: dict[str, int] = {}
    steps = 0
    for line in path.read_bytes().splitlines():
        rec = orjson.loads(line)
        if rec["kind"] != "step":
            continue
        steps += 1
        assert tuple(rec["kv_free"]) == free[rec["step"]]
        recorded_hits.update(rec["cached"] or {})
    assert steps == len(free) > 0
    assert recorded_hits == {rid: n for rid, n in hits.items() if n > 0}
    assert recorded_hits, "the workload must hit the prefix cache"


def _with_fields(tmp_path: Path, edit: Any) -> Path:
    """The live sample with its header made 1.3 and `edit(step_record)` applied to step 4."""
    lines = []
    for line in LIVE.read_bytes().splitlines():
        rec = orjson.loads(line)
        if rec["kind"] == "header":
            rec["schema"] = "1.3"
        if rec["kind"] == "step" and rec["step"] == 4:
            edit(rec)
        lines.append(orjson.dumps(rec))
    path = tmp_path / "t.jsonl"
    path.write_bytes(b"\n".join(lines) + b"\n")
    return path


def test_a_skipped_request_gets_its_own_reason_and_the_next_one_is_the_head(tmp_path: Path) -> None:
    def edit(rec: dict[str, Any]) -> None:
        rec["waiting_status"] = {rec["waiting_demand"][0][0]: "WAITING_FOR_STRUCTURED_OUTPUT_GRAMMAR"}
        rec["num_running"] = 7  # the cap did not bind: the loop reached the queue

    trace = load(_with_fields(tmp_path, edit))
    w = why.step_why(trace, 3)
    first, second, *rest = w.waiting
    assert first.cause.code == "grammar" and first.cause.certainty == EXACT
    assert second.cause.code != "behind" and second.cause.numbers.get("request") == second.id
    assert all(r.cause.code == "behind" and r.cause.behind == second.id for r in rest)


@pytest.mark.parametrize(
    "bad",
    [
        {"kv_free": "lots"},
        {"kv_free": [5]},
        {"waiting_status": ["WAITING"]},
        {"preemptions": [["a", "b"]]},
        {"cached": {"x": "y"}},
        {"kv_free": [5, 2049]},  # more free blocks than the header's pool of 2048
    ],
    ids=[
        "kv_free-type",
        "kv_free-short",
        "status-type",
        "preemption-short",
        "cached-type",
        "kv_free-over-pool",
    ],
)
def test_torn_why_fields_are_a_named_error(tmp_path: Path, bad: dict[str, Any]) -> None:
    from tracer.trace.errors import TraceError

    path = _with_fields(tmp_path, lambda rec: rec.update(copy.deepcopy(bad)))
    with pytest.raises(TraceError) as err:
        load(path)
    text = str(err.value)
    assert re.match(rf"{re.escape(str(path))}:\d+: field '{next(iter(bad))}'", text), text
    lenient = load(path, strict=False)  # the step is left out, every other one loads
    assert len(lenient) == len(load(LIVE)) - 1 and lenient.problems


def test_session_keeps_one_binding_pass() -> None:
    session = Session(load(LIVE))
    assert session.bindings is session.bindings
    assert session.waiting_summary.by_reason["max_num_seqs"] > 0
    assert session.report.counts().get("limit-holds-waiting", 0) >= 17


def test_the_draft_budget_holds_the_fifth_one_token_dspark_request() -> None:
    """Under the draft-budget policy, four one-token DSpark requests take the 16 drafter rows
    (4 each) while 12 target tokens sit idle: the waiting loop stopped on the draft-input
    budget, exactly, and the vectorised pass agrees with the step's own answer everywhere."""
    trace = load(SAMPLES / "dspark_k4_draft_budget.jsonl")
    answer = why.step_why(trace, 3)
    assert answer.binding.code == "draft_budget"
    assert answer.binding.certainty == EXACT
    assert answer.binding.numbers == {"cap": 16, "left": 0, "rows_per_request": 4}
    assert [(r.id, r.cause.code) for r in answer.waiting] == [("o4", "draft_budget")]
    assert answer.facts["target_left"] == 12 and answer.facts["admission_cap"] == 8
    steps = trace.columns["step"].tolist()
    assert _codes(trace) == {steps[row]: why.step_why(trace, row).binding.code for row in range(len(trace))}
    # The same workload under `separate` is held by its cap on running requests instead.
    assert why.step_why(load(SAMPLES / "dspark_k4_separate.jsonl"), 3).binding.code == "max_num_active_seqs"


def test_why_checks_its_arguments_before_it_reads_the_trace(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Neither a request nor --step: a usage error at once, not after reading (here: failing
    to read) the trace."""
    assert main(["why", str(tmp_path / "not-there.jsonl")]) == 2
    assert capsys.readouterr().err.strip() == "schedscope: error: give a REQUEST_ID or --step N (one of them)"


def test_one_request_story_reads_the_index_once_and_only_its_rows(monkeypatch: pytest.MonkeyPatch) -> None:
    """`mid` is preempted twice, resumed, and lives from row 2 to 37 of 60: its story reads
    the request index once (its preemptions' costs included, the other victims' never), and
    no record outside its span, each record of it once (the index built before, as a
    session's is)."""
    trace = load(SAMPLES / "priority_preempt.jsonl")
    span = request_story.story_span(trace, "mid")
    assert (span.first, span.stop) == (2, 38)
    reads: list[str] = []
    rows: list[int] = []
    # The story's own reads, and resume_cost's (one step's answer reads the index per victim).
    patched = ((request_story, "request_index"), (request_story, "step_pass"), (why, "request_index"))
    for module, name in patched:
        real = getattr(module, name)
        monkeypatch.setattr(module, name, lambda t, real=real, name=name: reads.append(name) or real(t))
    raw_many = type(trace).raw_many

    def counted(self: Any, wanted: Any) -> Any:
        for row, raw in raw_many(self, wanted):
            rows.append(row)
            yield row, raw

    monkeypatch.setattr(type(trace), "raw_many", counted)
    story = request_story.request_story(trace, "mid")
    assert story is not None and [p.resumed_step for p in story.preemptions] == [20, 33]
    assert reads == ["request_index", "step_pass"]
    assert rows == list(range(span.first, span.stop))


def test_what_a_probe_relaxed_is_a_fact_render_words() -> None:
    """`tracer.whatif.probe.relax` returns a Change (which relaxation, by how much); the words
    `why --exact --json` keeps in a cause's `relaxed` field are render's."""
    from tracer.render.why import change_text, step_document
    from tracer.whatif.probe import ASYNC_DONE, Change

    assert change_text((Change("budget", 97),)) == "token budget +97"
    assert change_text((Change("seqs", 2), Change("kv", 40))) == "admission cap +2, +40 free KV blocks"
    assert change_text((Change("chunked"),)) == "chunked prefill on"
    assert change_text((Change(ASYNC_DONE),)) == "read on the state: max_tokens in flight"
    step = why.step_why(load(LIVE), 3)
    proven = why.Cause("target_budget", EXACT, {"proven": "probe", "relaxed": (Change("budget", 9),)})
    doc = step_document(dataclasses.replace(step, binding=proven))
    assert doc["binding"]["relaxed"] == "token budget +9"
    assert orjson.dumps(doc)  # every fact in words or numbers


def test_a_causes_detail_is_a_fact_render_words() -> None:
    """analysis.why gives a cause's `why` as a Detail; render.why words it, in the lines and in
    the `why --json` document (the same words the field always had)."""
    from tracer.render.why import cause_text, step_document, step_lines

    trace = load(SAMPLES / "ngram_preempt.jsonl")
    row = {int(s): i for i, s in enumerate(trace.columns["step"])}

    def at(step: int, **changes: Any) -> why.StepWhy:
        return why.step_why(trace, row[step], {**trace.step(row[step]), **changes})

    nothing = at(3)
    assert nothing.binding.numbers["why"] is why.Detail.NOTHING_WAITING
    assert cause_text(nothing.binding).startswith("nothing held back: nothing waiting")
    assert step_document(nothing)["binding"]["why"] == "nothing waiting"
    unlisted = at(9, waiting_demand=[])
    assert unlisted.binding.numbers["why"] is why.Detail.NONE_LISTED
    assert step_document(unlisted)["binding"]["why"] == "no waiting request listed"
    cut = at(7, unscheduled=[["r1", 4]])
    [r1] = [r for r in cut.requests if r.id == "r1"]
    assert r1.cause.numbers["why"] is why.Detail.AT_PREEMPTION
    assert "likely KV blocks (the loop ended at a preemption)" in "\n".join(step_lines(cut))
    assert step_document(cut)["requests"][0]["why"] == "the loop ended at a preemption"
