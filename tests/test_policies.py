"""The fix's contract, point by point, on vLLM's real Scheduler under each policy layer."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import probe_schedule
from tracer.policies import scheduler_class
from tracer.trace.reader import load
from tracer.trace.trace_type import Trace
from tracer.whatif.offline import build_scheduler, run_workload
from tracer.whatif.replay import recording_to
from tracer.whatif.scenarios import SCENARIOS, mixed_accept

pytestmark = pytest.mark.vllm
POLICIES = ("additive", "cap", "separate", "draft-budget")


def run_policy(
    scenario: str, policy: str, path: Path, **engine: Any
) -> tuple[Trace, list[Any], list[dict[str, int]]]:
    spec, requests = SCENARIOS[scenario]
    spec = replace(spec, **engine)
    budgets: list[dict[str, int]] = []

    def schedule(s: Any) -> Any:
        out, seen = probe_schedule(s)
        budgets.append(seen)
        return out

    with recording_to(path):
        sched = build_scheduler(spec, scheduler_class(policy))
        steps = run_workload(sched, requests, accept=mixed_accept, schedule=schedule)
        sched.shutdown()
    return load(path), steps, budgets


def n_scheduled(trace: Trace) -> Any:
    col = trace.columns
    return col["n_new"] + col["n_resumed"] + col["n_running"]


def assert_budgets_are_vllms(trace: Trace, budgets: list[dict[str, int]]) -> None:
    assert len(trace) == len(budgets)
    assert list(trace.columns["target_left"]) == [b["token_budget"] for b in budgets]
    assert list(trace.columns["input_left"]) == [b["input_budget"] for b in budgets]


@pytest.mark.parametrize("policy", POLICIES)
@pytest.mark.parametrize(("scenario", "slots"), [("draft_model", 1), ("ngram_preempt", 0)])
def test_ordinary_methods_stay_additive(policy: str, scenario: str, slots: int, tmp_path: Path) -> None:
    trace, _, budgets = run_policy(scenario, policy, tmp_path / "t.jsonl")
    assert trace.header["policy"] == policy
    assert trace.config["draft_slots"] == slots
    col = trace.columns
    assert (col["input_used"] == col["target_used"] + slots * n_scheduled(trace)).all()
    assert_budgets_are_vllms(trace, budgets)


def test_dspark_takes_k_query_rows_from_a_separate_budget(tmp_path: Path) -> None:
    trace, steps, budgets = run_policy("dspark_k4", "separate", tmp_path / "t.jsonl")
    cfg = trace.config
    assert (cfg["draft_slots"], cfg["query_rows_per_req"], cfg["max_num_active_seqs"]) == (0, 4, 4)
    # Both 8-token prefills get their full 8 tokens in step 1 (additive gives 8 and 2).
    assert dict(steps[0][0].num_scheduled_tokens) == {"a": 8, "b": 8}
    col = trace.columns
    assert (col["query_rows"] == 4 * n_scheduled(trace)).all()
    assert (col["query_rows"] <= 16).all()
    # Five one-token requests: at most four at once.
    assert max(len(out.num_scheduled_tokens) for out, _ in steps) == 4
    assert_budgets_are_vllms(trace, budgets)


def test_dflash_takes_k_plus_one_query_rows(tmp_path: Path) -> None:
    trace, _, budgets = run_policy("dflash_k7", "separate", tmp_path / "t.jsonl")
    cfg = trace.config
    assert (cfg["draft_slots"], cfg["query_rows_per_req"]) == (0, 8)
    assert cfg["max_num_active_seqs"] == min(cfg["max_num_seqs"], 8192 // 8)
    assert list(trace.columns["target_used"][:4]) == [8192] * 4
    assert list(trace.columns["query_rows"][:4]) == [8] * 4
    assert_budgets_are_vllms(trace, budgets)


@pytest.mark.parametrize(("method", "k"), [("draft_model", 2), ("dspark", 2), ("dflash", 2)])
def test_preemption_restores_both_budgets(method: str, k: int, tmp_path: Path) -> None:
    """A request preempted after it was scheduled in the same step gives back its
    target tokens and its draft slots (vLLM's restore path) and its query rows."""
    trace, steps, budgets = run_policy(
        "priority_preempt", "separate", tmp_path / "t.jsonl", method=method, num_speculative_tokens=k
    )
    assert any(out.preempted_req_ids for out, _ in steps), "the scenario must preempt"
    assert_budgets_are_vllms(trace, budgets)
    q = trace.config["query_rows_per_req"]
    for rec, (out, _) in zip(trace.steps(), steps, strict=True):
        held = {e[0] for e in rec["new"] + rec["resumed"] + rec["running"]}
        assert not held & set(rec["preempted"])  # a preempted request holds no budget
        assert rec["target"]["used"] == out.total_num_scheduled_tokens
        if q:
            assert rec["query"]["rows"] == q * len(held)


@pytest.mark.parametrize("policy", (*POLICIES, "stock"))
@pytest.mark.parametrize("scenario", sorted(SCENARIOS))
def test_budgets_end_every_step_nonnegative(policy: str, scenario: str, tmp_path: Path) -> None:
    trace, _, budgets = run_policy(scenario, policy, tmp_path / "t.jsonl")
    col = trace.columns
    assert (col["target_left"] >= 0).all() and (col["input_left"] >= 0).all()
    if policy in ("separate", "draft-budget") and trace.config["query_rows_per_req"]:
        assert (col["query_rows"] <= col["query_cap"]).all()
    if policy == "draft-budget":
        assert_draft_budget_is_vllms(trace, budgets)
    assert_budgets_are_vllms(trace, budgets)


def assert_draft_budget_is_vllms(trace: Trace, budgets: list[dict[str, int]]) -> None:
    """The rewritten schedule()'s own draft budget, as it returns, is B minus the step's
    recorded query rows (q per scheduled request), and never negative."""
    col = trace.columns
    left = [b["draft_budget"] for b in budgets]
    assert left == list(trace.config["max_num_batched_tokens"] - col["query_rows"])
    assert min(left) >= 0


# The regression cases of the fork's pull request (vllm#52996 and its DFlash extension), on
# vLLM's real Scheduler with the draft-input budget added to its own schedule().
def test_draft_budget_gives_both_dspark_prefills_their_8_tokens(tmp_path: Path) -> None:
    trace, steps, budgets = run_policy("dspark_k4", "draft-budget", tmp_path / "t.jsonl")
    cfg = trace.config
    assert trace.header["policy"] == "draft-budget"
    assert (cfg["draft_slots"], cfg["query_rows_per_req"], cfg["max_num_active_seqs"]) == (0, 4, 8)
    assert dict(steps[0][0].num_scheduled_tokens) == {"a": 8, "b": 8}
    assert budgets[0] == {"token_budget": 0, "input_budget": 0, "draft_budget": 8}
    assert_draft_budget_is_vllms(trace, budgets)


def test_draft_budget_still_admits_only_four_one_token_dspark_requests(tmp_path: Path) -> None:
    trace, steps, budgets = run_policy("dspark_k4", "draft-budget", tmp_path / "t.jsonl")
    ones = [out for out, _ in steps if any(r.startswith("o") for r in out.num_scheduled_tokens)]
    assert max(len(out.num_scheduled_tokens) for out in ones) == 4  # 4 x 4 rows fill the 16
    # The fifth is held by the draft budget, not by a cap: max_num_seqs is 8.
    assert trace.config["max_num_active_seqs"] == 8
    col = trace.columns
    full = col["query_rows"] == 16
    assert full.any() and (col["num_waiting"][full] > 0).any()
    assert_draft_budget_is_vllms(trace, budgets)


def test_draft_budget_lets_a_dflash_k7_32k_prefill_advance_8192_a_step(tmp_path: Path) -> None:
    trace, _, budgets = run_policy("dflash_k7", "draft-budget", tmp_path / "t.jsonl")
    cfg = trace.config
    assert (cfg["draft_slots"], cfg["query_rows_per_req"]) == (0, 8)
    assert list(trace.columns["target_used"][:4]) == [8192] * 4
    assert [b["draft_budget"] for b in budgets[:4]] == [8192 - 8] * 4
    assert_budgets_are_vllms(trace, budgets)


@pytest.mark.parametrize(("method", "k"), [("dspark", 2), ("dflash", 2), ("draft_model", 2)])
def test_draft_budget_preemption_gives_back_both_budgets(method: str, k: int, tmp_path: Path) -> None:
    """A victim scheduled earlier in the same step gives back its target tokens and its
    draft rows: at every step's end vLLM's own draft budget is B - q x (requests still held)."""
    trace, steps, budgets = run_policy(
        "priority_preempt", "draft-budget", tmp_path / "t.jsonl", method=method, num_speculative_tokens=k
    )
    assert any(out.preempted_req_ids for out, _ in steps), "the scenario must preempt"
    restored = [
        rec["step"] for rec in trace.steps() if set(rec["preempted"]) and trace.config["query_rows_per_req"]
    ]
    assert restored or method == "draft_model"
    assert_draft_budget_is_vllms(trace, budgets)
    assert_budgets_are_vllms(trace, budgets)


def test_separate_bounds_running_not_scheduled(tmp_path: Path) -> None:
    """Pins where the thin layer differs from the fix's per-step query budget: it
    bounds how many requests may be *running* (B // q), not how many are scheduled
    in a step. With max_num_seqs 8 the fork would let more requests run; here no
    more than 4 ever do. In these synchronous runs every running request is
    scheduled each step, so the two rules pick the same requests."""
    trace, _, _ = run_policy("dspark_k4", "separate", tmp_path / "t.jsonl")
    col = trace.columns
    assert trace.config["max_num_seqs"] == 8
    assert col["num_running"].max() == 4 < trace.config["max_num_seqs"]
    assert (col["num_waiting"][col["num_running"] == 4] > 0).any()  # someone was kept waiting
    assert (n_scheduled(trace) == col["num_running"]).all()


def test_policy_classes_by_name() -> None:
    from tracer.policies import CapScheduler, SeparateAsyncScheduler
    from tracer.scheduler import TracingScheduler

    assert scheduler_class("stock") is TracingScheduler
    assert scheduler_class("cap") is CapScheduler
    assert scheduler_class("separate", async_scheduling=True) is SeparateAsyncScheduler
    with pytest.raises(ValueError, match="unknown policy 'fair'"):
        scheduler_class("fair")


def test_diff_of_the_dflash_sample_names_the_tokens_draft_budget_wins_per_step(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from tracer.cli import main

    src = Path(__file__).resolve().parent.parent / "sample_traces" / "dflash_k7_additive.jsonl"
    out = tmp_path / "draft_budget.jsonl"
    assert main(["replay", str(src), "--policy", "draft-budget", "-o", str(out)]) == 0
    replayed = load(out)
    assert replayed.header["policy"] == "draft-budget"
    assert list(replayed.columns["target_used"][:4]) == [8192] * 4
    capsys.readouterr()
    assert main(["diff", str(src), str(out)]) == 0
    text = capsys.readouterr().out
    assert "B (draft-budget) drained the workload in 5 steps instead of 6" in text
    # The per-step table: each of the four full prefill steps wins the 7 withheld tokens.
    rows = [line.split() for line in text.splitlines() if line.strip()[:1].isdigit()]
    won = {int(r[0]): int(r[3]) for r in rows if len(r) == 7}
    assert [won[s] for s in (1, 2, 3, 4)] == [7, 7, 7, 7]


def run_async(policy: str, path: Path) -> Trace:
    """DSpark K=4, B=16, max_num_seqs 8, one- to three-token prompts arriving two a step, under
    async scheduling: each request sits out the step its last token is in flight (vLLM's
    async max_tokens short-circuit)."""
    from tracer.whatif.offline import EngineSpec, RequestSpec
    from tracer.whatif.replay import Replayer
    from tracer.whatif.workload import Workload

    engine = EngineSpec(method="dspark", num_speculative_tokens=4, max_num_batched_tokens=16, max_num_seqs=8)
    requests = [RequestSpec(f"r{i}", 1 + i % 3, 2 + i % 2, arrival_step=1 + i // 2) for i in range(10)]
    with recording_to(path):
        sched = build_scheduler(engine, scheduler_class(policy, async_scheduling=True))
    try:
        workload = Workload(engine, requests, async_scheduling=True)
        Replayer(sched, workload, num_drafts=4, is_async=True).run(1000)
    finally:
        sched.shutdown()
    return load(path)


def test_draft_budget_counts_scheduled_requests_where_separate_caps_running_ones(tmp_path: Path) -> None:
    """Where the two disagree: a request sitting a step out takes no drafter rows, so the
    draft-input budget admits another in its place; `separate`'s cap counts it as running."""
    sep = run_async("separate", tmp_path / "separate.jsonl")
    fork = run_async("draft-budget", tmp_path / "draft_budget.jsonl")
    assert sep.columns["num_running"].max() == 4  # the cap: B // q
    assert fork.columns["num_running"].max() > 4
    assert (fork.columns["query_rows"] <= 16).all()  # the budget still holds every step
    step3 = {k: [e[0] for e in fork.step(2)[k]] for k in ("new", "running")}
    assert step3 == {"new": ["r3", "r4"], "running": ["r1", "r2"]}  # r0 sits out; r4 takes its rows
    assert [e[0] for e in sep.step(2)["new"]] == ["r3"]  # the cap holds r4: 4 running
    assert len(fork) < len(sep)
