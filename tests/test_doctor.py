"""`schedscope doctor` on small hand-written traces and /metrics pages (no vLLM).

The live CPU test (tests/test_live_server.py) runs it against a real server.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest

from tracer import doctor
from tracer.cli import main
from tracer.trace.reader import load

pytest.importorskip("prometheus_client")

V2_HOOKS = {
    "kind": "hooks",
    "step": 1,
    "runner": "v2",
    "runner_cls": "vllm.v1.worker.gpu.model_runner.GPUModelRunner",
    "speculator": "vllm.v1.worker.gpu.spec_decode.dflash.speculator.DFlashSpeculator",
    "speculator_rows": "query",
    "padded": ["target", "draft"],
    "inactive": [],
    "pid": 7,
}


def _step(n: int, entries: dict[str, tuple[int, int, int]], sampled: dict[str, int], **extra: Any) -> dict:
    """entries: id -> (tokens, spec_tokens, demand); new when extra['new'] lists the id."""
    new = set(extra.pop("new", ()))
    used = sum(t for t, _, _ in entries.values())
    rows = [[rid, t, s, d] for rid, (t, s, d) in entries.items()]
    return {
        "kind": "step", "step": n, "t": float(n), "target": {"cap": 256, "used": used, "left": 256 - used},
        "input": {"cap": 256, "used": used, "reserved": 0, "left": 256 - used},
        "new": [r for r in rows if r[0] in new], "running": [r for r in rows if r[0] not in new],
        "sampled": sampled, **extra,
    }  # fmt: skip


def _runner(n: int, rows: int, pass_: str = "target", padded: int | None = None) -> dict:
    record = {"kind": "runner", "step": n, "pass": pass_, "rows": rows, "cap": 256, "reqs": 1}
    return record if padded is None else {**record, "padded": padded}


def write_trace(path: Path, *, config: dict | None = None, footer: dict | None = None,
                hooks: dict | None = V2_HOOKS, **header: Any) -> Path:  # fmt: skip
    """DFlash K=3, three requests: a (prompt 10), b (prompt 6, finishes), c (prompt 5,
    preempted in step 2); 3 steps."""
    cfg = {"spec_method": "dflash", "num_speculative_tokens": 3, "query_rows_per_req": 4,
           "max_num_batched_tokens": 256, "buffer_capacity": 256, "model": "m", **(config or {})}  # fmt: skip
    records: list[dict] = [
        {
            "kind": "header",
            "schema": "1.1",
            "scheduler_cls": "tracer.scheduler.TracingScheduler",
            "vllm_version": "0.33.0",
            "pid": 1,
            "config": cfg,
            **header,
        },
        _step(1, {"a": (10, 0, 10), "b": (6, 0, 6), "c": (5, 0, 5)}, {"a": 1, "b": 1, "c": 1}, new="abc"),
        *([hooks] if hooks else []),
        _runner(1, 21, padded=32),
        _runner(1, 12, "draft", padded=16),
        _step(2, {"a": (4, 3, 4), "b": (4, 3, 4)}, {"a": 4, "b": 2}, preempted=["c"]),
        _runner(2, 8, padded=8),
        _runner(2, 8, "draft", padded=8),
        _step(3, {"a": (4, 3, 4)}, {"a": 3}, finished=["b"]),
        _runner(3, 4, padded=8),
        _runner(3, 4, "draft", padded=8),
    ]
    if footer is not False:
        records.append(
            {"kind": "footer", "steps_written": 3, "records_dropped": 0, "errors": 0, **(footer or {})}
        )
    path.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in records))
    return path


def metrics_page(*, requests: int = 1, prompt: int = 21, generation: int = 10, preemptions: int = 1,
                 drafts: int = 9, engines: tuple[str, ...] = ("0",)) -> str:  # fmt: skip
    """A /metrics page as vLLM exposes it, the values split across its engines."""
    lines = []
    for name, value, labels in (
        ("vllm:request_success", requests, 'finished_reason="length",'),
        ("vllm:prompt_tokens", prompt, ""),
        ("vllm:generation_tokens", generation, ""),
        ("vllm:num_preemptions", preemptions, ""),
        ("vllm:spec_decode_num_draft_tokens", drafts, ""),
    ):
        lines += [f"# HELP {name}_total x", f"# TYPE {name}_total counter"]
        for i, engine in enumerate(engines):
            share = value if i == 0 else 0
            lines.append(f'{name}_total{{{labels}engine="{engine}",model_name="m"}} {float(share)}')
            lines.append(f'{name}_created{{{labels}engine="{engine}",model_name="m"}} 1.7e9')
    return "\n".join(lines) + "\n"


def verdicts(path: Path, metrics: str | None = None, tmp: Path | None = None) -> tuple[int, dict[str, str]]:
    """Exit code and {check: 'STATUS sentence'} of `doctor` on one trace."""
    metrics_file = None
    if metrics is not None:
        metrics_file = (tmp or path.parent) / "metrics.txt"
        metrics_file.write_text(metrics)
    code, lines = doctor.run([path], metrics_file=metrics_file)
    found = {}
    for line in lines:
        status, _, rest = line.strip().partition("  ")
        if status in (doctor.PASS, doctor.FAIL, doctor.SKIP):
            check, _, sentence = rest.partition(": ")
            found[check] = f"{status} {sentence}"
    return code, found


def test_totals_follow_the_trace(tmp_path: Path) -> None:
    t = doctor.trace_totals([load(write_trace(tmp_path / "t.jsonl"))])
    assert (t.admitted, t.finished, t.prompt_tokens, t.preemptions) == (3, 1, 21, 1)
    assert (t.spec_min, t.spec_max) == (9, 9)
    # a sampled 1+4+3, b 1+2, c 1: the last sampling step of each may have been trimmed to 1.
    assert (t.generation_min, t.generation_max) == (12 - 2 - 1, 12)
    assert t.requests["a"].sampling_steps == 3 and t.requests["b"].finished


def test_a_complete_exact_trace_passes(tmp_path: Path) -> None:
    code, found = verdicts(write_trace(tmp_path / "t.jsonl"), metrics_page())
    assert code == 0, found
    assert found["runner hook"].startswith("PASS v2 runner vllm.v1.worker.gpu.model_runner.GPUModelRunner")
    assert "padded rows included" in found["runner hook"]
    assert found["speculator hook"].startswith("PASS vllm.v1.worker.gpu.spec_decode.dflash")
    assert found["records"].startswith("PASS footer: 3 steps written")
    assert (
        found["vLLM version"]
        == "PASS recorded by vLLM 0.33.0, supported (this schedscope supports 0.31 to 0.34)"
    )
    assert found["identity replay"].startswith("SKIP no recorded scheduler inputs (format 1.0")
    for check in ("requests", "prompt tokens", "generation tokens", "preemptions", "draft tokens"):
        assert found[check].startswith("PASS"), (check, found[check])


@pytest.mark.parametrize(
    ("version", "expected"),
    [
        ("0.31.0", "PASS recorded by vLLM 0.31.0, supported (this schedscope supports 0.31 to 0.34)"),
        ("0.32.0+cpu", "PASS recorded by vLLM 0.32.0+cpu, supported"),
        ("0.34.0", "PASS recorded by vLLM 0.34.0, supported"),
        ("0.30.1", "FAIL recorded by vLLM 0.30.1, not supported: this schedscope supports 0.31 to 0.34"),
        ("0.35.0rc1", "FAIL recorded by vLLM 0.35.0rc1, not supported"),
        (None, "SKIP the header names no vLLM release (None)"),
    ],
)
def test_the_vllm_version_is_named_and_checked(tmp_path: Path, version: str | None, expected: str) -> None:
    code, found = verdicts(write_trace(tmp_path / "t.jsonl", vllm_version=version), metrics_page())
    assert found["vLLM version"].startswith(expected), found["vLLM version"]
    assert code == (1 if expected.startswith("FAIL") else 0)


@pytest.mark.parametrize(
    ("change", "check"),
    [
        ({"prompt": 17}, "prompt tokens"),
        ({"requests": 2}, "requests"),
        ({"preemptions": 0}, "preemptions"),
        ({"drafts": 12}, "draft tokens"),
        ({"generation": 8}, "generation tokens"),  # below what the trace allows
        ({"generation": 13}, "generation tokens"),  # more than was sampled
        ({"engines": ("0", "1")}, "engines"),  # data parallelism, one engine's trace
    ],
)
def test_a_total_that_differs_fails(tmp_path: Path, change: dict[str, Any], check: str) -> None:
    code, found = verdicts(write_trace(tmp_path / "t.jsonl"), metrics_page(**change))
    assert code == 1 and found[check].startswith("FAIL"), found
    assert [c for c, v in found.items() if v.startswith("FAIL")] == [check]


def test_async_scheduling_widens_what_vllm_may_have_dropped(tmp_path: Path) -> None:
    """Under async scheduling a request's last step may run after it finished; vLLM
    drops that output (and its drafts) from its counters."""
    path = write_trace(tmp_path / "t.jsonl", config={"async_scheduling": True},
                       scheduler_cls="tracer.scheduler.TracingAsyncScheduler")  # fmt: skip
    code, found = verdicts(path, metrics_page(generation=6, drafts=3))
    assert code == 0, found
    assert "within the trace's 3–12" in found["generation tokens"]
    assert "within the trace's 3–9" in found["draft tokens"]


def test_records_and_hooks_failures(tmp_path: Path) -> None:
    _, found = verdicts(write_trace(tmp_path / "a.jsonl", footer={"records_dropped": 5}))
    assert found["records"].startswith("FAIL 5 records dropped")
    _, found = verdicts(write_trace(tmp_path / "b.jsonl", footer=False))
    assert found["records"].startswith("SKIP no footer yet")
    moved = {
        **V2_HOOKS,
        "inactive": ["X.prepare_inputs(…, batch_desc, …) moved: target rows without padding"],
    }
    code, found = verdicts(write_trace(tmp_path / "c.jsonl", hooks=moved))
    assert code == 1 and found["inactive hooks"].startswith("FAIL X.prepare_inputs")
    unhooked = {**V2_HOOKS, "speculator_rows": None}
    _, found = verdicts(write_trace(tmp_path / "d.jsonl", hooks=unhooked))
    assert found["speculator hook"].startswith("FAIL") and "not hooked" in found["speculator hook"]
    _, found = verdicts(write_trace(tmp_path / "e.jsonl", config={"async_scheduling": True}))
    assert found["scheduler hook"].startswith("FAIL async scheduling is on")


def test_prompt_tokens_are_skipped_when_an_admission_has_no_recorded_prompt(tmp_path: Path) -> None:
    path = write_trace(tmp_path / "t.jsonl")
    path.write_bytes(path.read_bytes().replace(b'["c",5,0,5]', b'["c",5,0,-1]'))
    code, found = verdicts(path, metrics_page())
    assert code == 0 and found["prompt tokens"].startswith("SKIP 1 of 3 admitted requests")


def test_no_runner_records_is_a_failure_unless_recorded_offline(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    write_trace(path, hooks=None)
    stripped = [line for line in path.read_bytes().splitlines() if b'"kind":"runner"' not in line]
    path.write_bytes(b"\n".join(stripped) + b"\n")
    code, found = verdicts(path)
    assert code == 1 and "did not load the hook" in found["runner hook"]
    offline = tmp_path / "offline.jsonl"
    offline.write_bytes(path.read_bytes().replace(b'"model":"m"', b'"model":"schedscope-offline-llama"'))
    code, found = verdicts(offline)
    assert code == 0 and found["runner hook"].startswith("SKIP recorded offline")


def test_identity_replay_verdict_follows_check_fidelity(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tracer.whatif import fidelity

    path = write_trace(tmp_path / "t.jsonl")
    # As a 1.1 recorder writes it: every step with its (here empty) scheduler inputs.
    records = [orjson.loads(line) for line in path.read_bytes().splitlines()]
    path.write_bytes(
        b"".join(orjson.dumps({**r, "inputs": []} if r["kind"] == "step" else r) + b"\n" for r in records)
    )
    for same, status in ((3, "PASS"), (2, "FAIL")):
        first = None if same == 3 else fidelity.Divergence(3, {"new": ([], [["x", 1, 0, 1]])})
        result = fidelity.Fidelity(3, 3, same, 42, 42, first, "stock", True)
        monkeypatch.setattr(fidelity, "check_fidelity", lambda trace, r=result: r)
        _, found = verdicts(path)
        assert found["identity replay"].startswith(
            f"{status} under stock: {same} of 3 recorded steps identical"
        )


def test_cli_exit_codes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write_trace(tmp_path / "t.jsonl")
    (tmp_path / "good.txt").write_text(metrics_page())
    (tmp_path / "bad.txt").write_text(metrics_page(prompt=99))
    assert main(["doctor", str(path), "--metrics-file", str(tmp_path / "good.txt")]) == 0
    out = capsys.readouterr().out
    assert (
        "PASS  prompt tokens: 21 prompt tokens at admission in the trace = vllm:prompt_tokens_total 21" in out
    )
    assert out.rstrip().endswith("0 failed, 1 skipped")
    assert main(["doctor", str(path), "--metrics-file", str(tmp_path / "bad.txt")]) == 1
    assert main(["doctor", str(path), "--metrics-url", "http://127.0.0.1:9"]) == 2
    assert "cannot read the server's metrics" in capsys.readouterr().err


def test_prompt_tokens_come_from_arrivals_beyond_the_waiting_head(tmp_path: Path) -> None:
    """A 1.1 trace records every arrival's prompt length: a request admitted from beyond the
    32 listed waiting ones (demand -1) is still counted, exactly."""
    path = write_trace(tmp_path / "t.jsonl")
    records = [orjson.loads(line) for line in path.read_bytes().splitlines()]
    first = next(r for r in records if r["kind"] == "step")
    first["new"][0][3] = -1  # "a" was admitted from beyond the listed head of the queue
    first["inputs"] = [["a", "a", 10, 40, 0, 0.0, None]]
    path.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in records))
    t = doctor.trace_totals([load(path)])
    assert (t.prompt_tokens, t.prompt_unknown) == (21, 0)
    first["inputs"] = []
    path.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in records))
    t = doctor.trace_totals([load(path)])
    assert (t.prompt_tokens, t.prompt_unknown) == (11, 1)
