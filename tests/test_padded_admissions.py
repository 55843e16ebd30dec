"""What-if fidelity where vLLM pads admissions: a request whose prompt is all computed bar its
last token, admitted beside running decoders, is scheduled 1+K rows with K placeholder (-1)
drafts (`pad_spec_decode` in the scheduler's waiting loop). A replay from one policy to
another moves admissions next to decoders or away from them; it must pad as vLLM does and
never count a placeholder as an accepted draft.

The reference is vLLM's real Scheduler running each policy directly on the same workload
(tracer.whatif.offline's Driver, whose model output refuses placeholders as the model
runner's rejection sampler does), once where every real draft is accepted and once where
none is. Every replay, identity or across policies, must re-make that recording exactly.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from tracer.policies import scheduler_class
from tracer.render.fidelity import fidelity_lines
from tracer.trace.reader import load
from tracer.trace.trace_type import Trace
from tracer.whatif.fidelity import compare_runs
from tracer.whatif.offline import (
    PLACEHOLDER_DRAFT,
    EngineSpec,
    RequestSpec,
    accept_all,
    build_scheduler,
    run_workload,
    verifiable_drafts,
)
from tracer.whatif.replay import recording_to, replay
from tracer.whatif.scenarios import SCENARIOS
from tracer.whatif.workload import workload_from_trace

pytestmark = pytest.mark.vllm
POLICIES = ("additive", "cap", "separate")


def accept_none(req_id: str, step: int, drafts: int) -> int:
    return 0


ACCEPT = {"all": accept_all, "none": accept_none}
WORKLOADS: dict[str, tuple[EngineSpec, list[RequestSpec]]] = {
    # Two 8-token prefills, then five one-token prompts while they decode: under `additive`
    # each one is admitted padded beside a running decoder, under `cap`/`separate` most
    # are admitted together without padding (the decoders have finished).
    "dspark_k4": SCENARIOS["dspark_k4"],
    # The same shape for DFlash (K+1 query rows per request), its decoders longer-lived so
    # that admissions land beside them under every policy, at other steps under each.
    "dflash_k3": (
        EngineSpec(
            method="dflash",
            num_speculative_tokens=3,
            max_num_batched_tokens=16,
            max_num_seqs=8,
            max_model_len=256,
        ),
        [
            RequestSpec("a", 8, 10),
            RequestSpec("b", 8, 10),
            *(RequestSpec(f"o{i}", 1, 3, arrival_step=4) for i in range(5)),
        ],
    ),
    # Five one-token prompts at once, max_tokens 6: `separate` admits four, and the fifth at
    # step 3 beside the last decoder, padded to 1+K; `additive` admits it alone at step 4.
    "dspark_k4_five": (SCENARIOS["dspark_k4"][0], [RequestSpec(f"r{i}", 1, 6) for i in range(5)]),
    # Drafts the budget clips under one policy and not another: under `cap`/`separate` r3
    # verifies 1 draft at its first decode (12 tokens left 2 rows); under `additive` 4, one token later.
    "dspark_k4_clipped": (
        replace(SCENARIOS["dspark_k4"][0], max_num_batched_tokens=12),
        [
            RequestSpec("r0", 1, 2),
            RequestSpec("r1", 9, 2),
            RequestSpec("r2", 1, 9, arrival_step=4),
            RequestSpec("r3", 1, 9),
        ],
    ),
}
# The workloads whose one-token prompts all land beside decoders under `additive`.
PADDING = ("dspark_k4", "dflash_k3")


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> dict[tuple[str, str, str], Trace]:
    """(workload, acceptance, policy) -> the trace of vLLM's scheduler running that policy."""
    root = tmp_path_factory.mktemp("padded")
    out: dict[tuple[str, str, str], Trace] = {}
    for name, (spec, requests) in WORKLOADS.items():
        for acceptance, accept in ACCEPT.items():
            for policy in POLICIES:
                path = root / f"{name}-{acceptance}-{policy}.jsonl"
                with recording_to(path):
                    sched = build_scheduler(spec, scheduler_class(policy))
                try:
                    run_workload(sched, requests, accept=accept)
                finally:
                    sched.shutdown()
                out[name, acceptance, policy] = load(path)
    return out


def _padded(trace: Trace) -> list[tuple[int, str, int, bool]]:
    """(step, request, tokens it sampled, beside a running decoder) for each padded admission."""
    return [
        (s["step"], e[0], (s["sampled"] or {}).get(e[0], 0), bool(s["running"]))
        for s in trace.steps()
        for e in (*s["new"], *s["resumed"])
        if e[2]
    ]


def test_verifiable_drafts_stop_at_the_first_placeholder() -> None:
    assert verifiable_drafts(None) == verifiable_drafts([]) == 0
    assert verifiable_drafts([7, 7, 7]) == 3
    assert verifiable_drafts([PLACEHOLDER_DRAFT] * 4) == 0
    assert verifiable_drafts([7, PLACEHOLDER_DRAFT, PLACEHOLDER_DRAFT]) == 1


@pytest.mark.parametrize("name", PADDING)
def test_admissions_land_padded_beside_decoders_and_sample_one_token(
    name: str, recorded: dict[tuple[str, str, str], Trace]
) -> None:
    """The workloads do what this file is about: under `additive` the one-token prompts are
    admitted beside decoders, padded to 1+K rows, and even where every real draft is
    accepted a padded admission samples exactly one token (its placeholders never are)."""
    k = WORKLOADS[name][0].num_speculative_tokens
    for acceptance in ACCEPT:
        padded = _padded(recorded[name, acceptance, "additive"])
        assert len(padded) >= 3 and all(beside for *_, beside in padded), padded
        assert [sampled for _, _, sampled, _ in padded] == [1] * len(padded)
        steps = {s["step"]: s for s in recorded[name, acceptance, "additive"].steps()}
        for step, rid, _, _ in padded:
            entry = next(e for e in steps[step]["new"] if e[0] == rid)
            assert entry[1:3] == [1 + k, k]  # 1+K rows: the prompt's last token and K placeholders
    # Where every real draft is accepted, running decoders do accept them (the control).
    every = recorded[name, "all", "additive"].steps()
    assert any(n > 1 for s in every for n in (s["sampled"] or {}).values())


@pytest.mark.parametrize("target", POLICIES)
@pytest.mark.parametrize("source", POLICIES)
@pytest.mark.parametrize("acceptance", ACCEPT)
@pytest.mark.parametrize("name", WORKLOADS)
def test_a_replay_from_one_policy_to_another_equals_the_real_scheduler(
    name: str,
    acceptance: str,
    source: str,
    target: str,
    recorded: dict[tuple[str, str, str], Trace],
    tmp_path: Path,
) -> None:
    """The workload recorded under `source`, replayed under `target`, against vLLM running
    `target` itself: every decision, the tokens sampled, the inputs and the step count."""
    workload = workload_from_trace(recorded[name, acceptance, source])
    assert workload.exact
    replayed = load(replay(workload, target, tmp_path / "r.jsonl"))
    reference = recorded[name, acceptance, target]
    fidelity = compare_runs(reference, replayed, policy=target, exact=True, notes=[])
    assert fidelity.identical, "\n".join(fidelity_lines(fidelity))
    assert fidelity.replayed_tokens == fidelity.recorded_tokens
    assert _padded(replayed) == _padded(reference)


def test_the_policies_differ_on_these_workloads(recorded: dict[tuple[str, str, str], Trace]) -> None:
    """Otherwise the cross-policy replays above would prove nothing: padding moves with policy."""
    for name in PADDING:
        for acceptance in ACCEPT:
            runs: dict[str, Any] = {p: recorded[name, acceptance, p] for p in POLICIES}
            assert _padded(runs["additive"]) != _padded(runs["separate"])
            assert len(runs["additive"]) > len(runs["separate"])


@pytest.mark.parametrize("is_async", [False, True], ids=["sync", "async"])
@pytest.mark.parametrize("how", ["by position", "in order"])
def test_a_replay_never_accepts_placeholders_whatever_the_workload_says(
    how: str, is_async: bool, tmp_path: Path
) -> None:
    """A workload that says the request accepts every draft at the position where vLLM pads
    it (a what-if can put it there): the placeholders still go unaccepted. vLLM's
    AsyncScheduler schedules every draft as -1 (the worker fills in the ids), so there only
    the admission's are placeholders: the running requests' are accepted as the workload says."""
    from tracer.whatif.replay import Replayer
    from tracer.whatif.workload import PositionTable, Workload

    spec = SCENARIOS["dspark_k4"][0]
    k = spec.num_speculative_tokens
    requests = [RequestSpec("a", 8, 8), RequestSpec("o", 1, 8, arrival_step=3)]
    accepted, in_order = PositionTable(), {}
    if how == "by position":
        accepted.add("a", 0, k)
        accepted.add("o", 0, k)
    else:
        in_order = {"a": [k] * 8, "o": [k] * 8}
    workload = Workload(spec, requests, accepted=accepted, accepted_in_order=in_order)
    path = tmp_path / "w.jsonl"
    with recording_to(path):
        sched = build_scheduler(spec, scheduler_class("additive", async_scheduling=is_async))
    try:
        Replayer(sched, workload, num_drafts=k, is_async=is_async).run(100)
    finally:
        sched.shutdown()
    trace = load(path)
    assert [(rid, sampled) for _, rid, sampled, beside in _padded(trace) if beside] == [("o", 1)]
    # Its real drafts afterwards are accepted as the workload says.
    assert max(s["sampled"].get("o", 0) for s in trace.steps() if s["sampled"]) == 1 + k


def _run(spec: EngineSpec, policy: str, path: Path, drive: Any) -> list[Any]:
    """Each SchedulerOutput of `drive(sched)`, run under `policy` and recorded to `path`."""
    with recording_to(path):
        sched = build_scheduler(spec, scheduler_class(policy))
    outputs: list[Any] = []
    schedule = sched.schedule

    def keep() -> Any:
        outputs.append(schedule())
        return outputs[-1]

    sched.schedule = keep
    try:
        drive(sched)
    finally:
        sched.shutdown()
    return outputs


def _rows(outputs: list[Any]) -> list[dict[str, tuple[int, list[int]]]]:
    """Per step, each request's scheduled tokens and the draft ids vLLM scheduled with them."""
    spec = [out.scheduled_spec_decode_tokens for out in outputs if out.total_num_scheduled_tokens]
    counts = [out.num_scheduled_tokens for out in outputs if out.total_num_scheduled_tokens]
    return [{r: (n, list(d.get(r) or ())) for r, n in c.items()} for c, d in zip(counts, spec, strict=True)]


def test_five_one_token_prompts_replayed_from_additive_pad_as_separate_does(tmp_path: Path) -> None:
    """Five one-token prompts (max_tokens 6), every real draft accepted. vLLM running
    `separate` admits r4 at step 3 beside the decoder r3 and pads it: its own
    scheduled_spec_decode_tokens hold K placeholders, and it samples one token. The run
    recorded under `additive` (where r4 is admitted alone, unpadded), replayed under
    `separate`, schedules the same rows and draft ids, step by step."""
    from tracer.whatif.replay import Replayer

    spec, requests = WORKLOADS["dspark_k4_five"]
    k = spec.num_speculative_tokens
    direct = _run(spec, "separate", tmp_path / "sep.jsonl", lambda s: run_workload(s, requests))
    rows = _rows(direct)
    assert rows[2]["r4"] == (1 + k, [PLACEHOLDER_DRAFT] * k)
    assert [sum(n for n, _ in step.values()) for step in rows] == [4, 16, 10, 5]
    assert load(tmp_path / "sep.jsonl").steps()[2]["sampled"]["r4"] == 1

    _run(spec, "additive", tmp_path / "add.jsonl", lambda s: run_workload(s, requests))
    recorded = load(tmp_path / "add.jsonl")
    assert not _padded(recorded)  # the recording never padded r4: the replay must
    workload = workload_from_trace(recorded)
    replayed = _run(
        spec,
        "separate",
        tmp_path / "replay.jsonl",
        lambda s: Replayer(s, workload, num_drafts=k, is_async=False).run(100),
    )
    assert _rows(replayed) == rows
    reference, again = load(tmp_path / "sep.jsonl"), load(tmp_path / "replay.jsonl")
    assert [s["sampled"] for s in again.steps()] == [s["sampled"] for s in reference.steps()]
    assert _padded(again) == _padded(reference) == [(3, "r4", 1, True)]


def test_drafts_the_recording_clipped_are_verified_as_its_other_drafts_were(
    recorded: dict[tuple[str, str, str], Trace], tmp_path: Path
) -> None:
    """Under `cap` the budget leaves r3 one draft at its first decode, and it accepts it: that
    says nothing of more drafts. Under `additive` r3 first verifies drafts one token later,
    four of them, where that one accepted draft is the recording's nearest value. vLLM
    accepts every real draft, and so must the replay (it once took the one accepted as all
    r3 accepts there, sampling 2 tokens where vLLM samples 5)."""

    def first_verification(trace: Trace) -> tuple[int, int]:
        """r3's drafts and sampled tokens at the first step it verified drafts."""
        return next(
            (e[2], s["sampled"]["r3"]) for s in trace.steps() for e in s["running"] if e[0] == "r3" and e[2]
        )

    source = recorded["dspark_k4_clipped", "all", "cap"]
    assert first_verification(source) == (1, 2)
    replayed = load(replay(workload_from_trace(source), "additive", tmp_path / "r.jsonl"))
    direct = recorded["dspark_k4_clipped", "all", "additive"]
    assert first_verification(replayed) == first_verification(direct) == (4, 5)
