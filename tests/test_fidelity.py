"""Identity replay: a trace replayed under its own policy re-makes the run, step for step.

Checked on every sample trace and on random workloads recorded offline on vLLM's
real Scheduler (sync and async, prefix sharing, partial drafts, partial
acceptance, stop tokens, priorities, tight KV caches). The live server's traces
are checked in tests/test_live_replay.py.
"""

from __future__ import annotations

import random
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.conftest import ROOT
from tracer.cli import main
from tracer.policies import scheduler_class
from tracer.render.fidelity import fidelity_lines
from tracer.render.notes import note_sentence
from tracer.trace.reader import load
from tracer.whatif.fidelity import check_fidelity, compare_runs, decisions
from tracer.whatif.notes import Approximate
from tracer.whatif.offline import EngineSpec, RequestSpec, build_scheduler
from tracer.whatif.replay import Replayer, recording_to
from tracer.whatif.workload import PositionTable, Workload

pytestmark = pytest.mark.vllm
SAMPLES = ROOT / "sample_traces"


def _vllm_minor() -> str:
    import vllm

    return ".".join(vllm.__version__.split(".")[:2])


@pytest.mark.parametrize("path", sorted(SAMPLES.glob("*.jsonl")), ids=lambda p: p.stem)
def test_every_sample_replays_identically_under_its_own_policy(path: Path, tmp_path: Path) -> None:
    recorded = load(path)
    if recorded.header["vllm_version"].split(".")[:2] != _vllm_minor().split("."):
        pytest.skip(f"recorded on vLLM {recorded.header['vllm_version']}; its own scheduler replays it")
    fidelity = check_fidelity(recorded, out=tmp_path / "identity.jsonl")
    assert fidelity.exact_workload, fidelity.notes
    assert fidelity.identical, "\n".join(fidelity_lines(fidelity))
    assert fidelity.identical_steps == len(recorded) > 0
    # Decisions, not just totals: the replayed file says the same, step for step.
    replayed = load(tmp_path / "identity.jsonl")
    a, b = recorded.steps(), replayed.steps()
    sa, sb = ({s["step"]: s["sampled"] or {} for s in steps} for steps in (a, b))
    assert [decisions(s, sb) for s in b] == [decisions(s, sa) for s in a]


def test_check_reports_the_first_divergence_and_fails(tmp_path: Path) -> None:
    """A replay that is not the run (another policy here) is reported as such."""
    recorded = load(SAMPLES / "dflash_k7_additive.jsonl")
    workload_trace = tmp_path / "separate.jsonl"
    from tracer.whatif.replay import replay
    from tracer.whatif.workload import workload_from_trace

    replay(workload_from_trace(recorded), "separate", workload_trace)
    fidelity = compare_runs(recorded, load(workload_trace), policy="separate", exact=True, notes=[])
    assert not fidelity.identical
    assert fidelity.first is not None and fidelity.first.step == 1
    assert fidelity.first.fields["target"] == (
        {"cap": 8192, "used": 8185, "left": 7},
        {"cap": 8192, "used": 8192, "left": 0},
    )
    assert (fidelity.recorded_steps, fidelity.replayed_steps) == (7, 6)
    text = "\n".join(fidelity_lines(fidelity))
    assert "does NOT re-make the run" in text and "first divergent step 1" in text


def test_replay_check_cli_exit_codes(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["replay", str(SAMPLES / "ngram_preempt.jsonl"), "--check"]) == 0
    out = capsys.readouterr().out
    assert "24 of 24 recorded steps identical (100.0%): re-makes the run exactly" in out


def test_an_old_trace_is_replayed_approximately_and_says_why(tmp_path: Path) -> None:
    """A format 1.0 trace (no recorded inputs) still replays, marked approximate."""
    old = tmp_path / "old.jsonl"
    lines = []
    import orjson

    for line in (SAMPLES / "ngram_preempt.jsonl").read_bytes().splitlines():
        rec = orjson.loads(line)
        if rec["kind"] == "header":
            rec["schema"] = "1.0"
        rec.pop("inputs", None)
        rec.pop("ends", None)
        lines.append(orjson.dumps(rec))
    old.write_bytes(b"\n".join(lines) + b"\n")
    fidelity = check_fidelity(old)
    assert not fidelity.exact_workload
    assert Approximate(gaps=False) in fidelity.notes  # a fact; tracer.render.notes words it
    assert any("predates format 1.1" in note_sentence(note) for note in fidelity.notes)


def test_diff_names_the_identity_error_next_to_the_policy_effect(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    if _vllm_minor() != "0.32":
        pytest.skip("the sample was recorded by vLLM 0.32's stock scheduler")
    out = tmp_path / "separate.jsonl"
    src = str(SAMPLES / "dflash_k7_additive.jsonl")
    assert main(["replay", src, "--policy", "separate", "-o", str(out)]) == 0
    header = load(out).header
    assert header["replay"]["identity"]["identical"] is True
    assert header["replay"]["identity"]["recorded_steps"] == 7
    capsys.readouterr()
    assert main(["diff", src, str(out)]) == 0
    text = capsys.readouterr().out
    assert "replay identity error: none (the recorded policy's replay re-makes all 7 steps)" in text
    assert "withheld 7 target tokens in each of 4 steps (28 in all)" in text


# -- random workloads, recorded offline on the real scheduler, then replayed ----------


def _random_workload(seed: int, is_async: bool) -> Workload:
    rng = random.Random(seed)
    method = rng.choice([None, "ngram", "draft_model"])
    k = rng.randint(1, 4) if method else 0
    block = 16
    engine = EngineSpec(
        max_num_batched_tokens=rng.choice([64, 128, 256]),
        max_num_seqs=rng.randint(2, 8),
        max_model_len=512,
        method=method,
        num_speculative_tokens=k,
        block_size=block,
        num_kv_blocks=rng.randint(34, 80),  # tight: preemption is likely
        scheduling_policy=rng.choice(["fcfs", "priority"]),
        enable_prefix_caching=rng.random() < 0.7,
    )
    requests: list[RequestSpec] = []
    drafts, accepted = PositionTable(), PositionTable()
    stops: dict[str, int] = {}
    for i in range(rng.randint(3, 12)):
        rid = f"q{i}"
        prompt = rng.randint(1, 200)
        prefix = None
        if requests and rng.random() < 0.5:
            src = rng.choice(requests)
            shared = min(prompt, src.prompt_len) // block
            prefix = (src.id, rng.randint(0, shared)) if shared else None
        max_tokens = rng.randint(1, 40)
        requests.append(
            RequestSpec(
                rid,
                prompt,
                max_tokens,
                arrival_step=rng.randint(1, 30),
                priority=rng.randint(0, 3),
                prefix=prefix,
            )
        )
        for pos in range(0, max_tokens, rng.randint(1, 5)):
            drafts.add(rid, pos, rng.randint(0, k))  # proposers that offer fewer than K
            accepted.add(rid, pos, rng.randint(0, k))
        if rng.random() < 0.4:
            stops[rid] = rng.randint(1, max_tokens)  # stops early on a stop token
    requests.sort(key=lambda r: r.arrival_step)
    return Workload(
        engine,
        requests,
        async_scheduling=is_async,
        accepted=accepted,
        drafts=drafts,
        stops=stops,
    )


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 2**31), is_async=st.booleans())
def test_random_offline_runs_replay_identically(seed: int, is_async: bool, tmp_path: Path) -> None:
    workload = _random_workload(seed, is_async)
    recorded = tmp_path / f"run-{seed}-{is_async}.jsonl"
    with recording_to(recorded):
        sched = build_scheduler(workload.engine, scheduler_class("stock", async_scheduling=is_async))
    try:
        k = workload.engine.num_speculative_tokens
        Replayer(sched, workload, num_drafts=k, is_async=is_async).run(10_000)
    finally:
        sched.shutdown()
    trace = load(recorded)
    assert len(trace) > 0
    fidelity = check_fidelity(trace, out=tmp_path / "identity.jsonl")
    assert fidelity.exact_workload
    assert fidelity.identical, "\n".join(fidelity_lines(fidelity))
