"""What-if replay: re-run a workload through vLLM's real Scheduler under a policy.

The workload comes from a recorded trace (arrival step, prompt length, output
length and accepted drafts per sampling step of every request) or from a small
JSON/YAML file. The replay drives tracer.offline's deterministic harness with
the policy's tracing scheduler class, so its output is an ordinary trace whose
header names the policy. Same input, same trace, timestamps aside.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from tracer.offline import EngineSpec, RequestSpec
from tracer.reader import Trace, load

REPLAYABLE_METHODS = (None, "ngram", "draft_model", "dflash", "dspark")


class WorkloadError(ValueError):
    """A workload that cannot be replayed; names the file and the field."""


@dataclass
class Workload:
    engine: EngineSpec
    requests: list[RequestSpec]
    # Per request: drafts accepted at each of its sampling steps, in order
    # (missing: accept all). A replay clips each to the drafts it scheduled.
    accepted: dict[str, list[int]] = field(default_factory=dict)
    accept_default: str = "all"  # or "none"

    def accept_fn(self) -> Any:
        cursors: dict[str, Iterator[int]] = {rid: iter(seq) for rid, seq in self.accepted.items()}
        all_ = self.accept_default == "all"

        def accept(req_id: str, step: int, drafts: int) -> int:
            value = next(cursors[req_id], None) if req_id in cursors else None
            if value is None:
                return drafts if all_ else 0
            return min(value, drafts)

        return accept


def engine_from_config(config: dict[str, Any]) -> EngineSpec:
    method = config.get("spec_method")
    return EngineSpec(
        max_num_batched_tokens=int(config.get("max_num_batched_tokens") or 8192),
        max_num_seqs=int(config.get("max_num_seqs") or 256),
        max_model_len=int(config.get("max_model_len") or 65536),
        method=method,
        num_speculative_tokens=int(config.get("num_speculative_tokens") or 0) if method else 0,
        block_size=int(config.get("block_size") or 16),
        num_kv_blocks=int(config.get("num_kv_blocks") or 10_000),
        scheduling_policy=str(config.get("scheduling_policy") or "fcfs"),
    )


def workload_from_trace(trace: Trace) -> Workload:
    """Requests as the trace saw them: first sighting (admitted or waiting) is the
    arrival, demand then is the prompt, and sampled tokens give the output."""
    arrival: dict[str, int] = {}
    priority: dict[str, int] = {}
    prompt: dict[str, int] = {}
    output: dict[str, int] = {}
    accepted: dict[str, list[int]] = {}
    for rec in trace.steps():
        step = rec["step"]
        for rid, p in (rec.get("priority") or {}).items():
            priority.setdefault(rid, int(p))
        # Queue order within a step: the admitted requests came first.
        for rid, tokens, _spec, demand in rec["new"]:
            if rid not in arrival:
                arrival[rid], prompt[rid] = step, demand if demand >= 0 else tokens
        for rid, demand in rec["waiting_demand"]:
            if rid not in arrival:
                arrival[rid], prompt[rid] = step, demand
        for rid, n in (rec["sampled"] or {}).items():
            output[rid] = output.get(rid, 0) + n
            if n > 0:
                accepted.setdefault(rid, []).append(n - 1)
    # Dicts keep first-sighting order: arrival step, then queue order.
    requests = [
        RequestSpec(
            rid,
            prompt[rid],
            max(1, output.get(rid, 1)),
            arrival_step=arrival[rid],
            priority=priority.get(rid, 0),
        )
        for rid in arrival
    ]
    return Workload(engine_from_config(trace.config), requests, accepted)


def workload_from_file(path: str | Path) -> Workload:
    """A synthetic workload:

    engine: {max_num_batched_tokens: 16, method: dspark, num_speculative_tokens: 4}
    requests:
      - {id: a, prompt_len: 8, max_tokens: 3}
      - {id: o, prompt_len: 1, max_tokens: 3, arrival_step: 4, count: 5}
    accept: all            # or none, or {request_id: [accepted per sampling step]}
    """
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as exc:
        raise WorkloadError(f"{path}: cannot read ({exc})") from None
    if path.suffix in (".yaml", ".yml"):
        try:
            import yaml  # optional: PyYAML, present wherever vLLM is
        except ImportError:
            raise WorkloadError(f"{path}: reading YAML needs PyYAML; or write the workload as JSON") from None
        doc = yaml.safe_load(text)
    else:
        try:
            doc = json.loads(text)
        except json.JSONDecodeError as exc:
            raise WorkloadError(f"{path}:{exc.lineno}: not JSON ({exc.msg})") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("requests"), list):
        raise WorkloadError(f"{path}: field 'requests': a list of requests is required")
    engine_doc = doc.get("engine") or {}
    known = set(EngineSpec.__dataclass_fields__)
    unknown = set(engine_doc) - known
    if unknown:
        raise WorkloadError(f"{path}: field 'engine': unknown keys {sorted(unknown)}; known: {sorted(known)}")
    engine = EngineSpec(**engine_doc)
    requests: list[RequestSpec] = []
    for i, r in enumerate(doc["requests"]):
        try:
            count = int(r.get("count", 1))
            for j in range(count):
                rid = str(r["id"]) if count == 1 else f"{r['id']}{j}"
                requests.append(
                    RequestSpec(
                        rid,
                        int(r["prompt_len"]),
                        int(r["max_tokens"]),
                        arrival_step=int(r.get("arrival_step", 1)),
                        priority=int(r.get("priority", 0)),
                    )
                )
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            message = f"{path}: field 'requests[{i}]': {exc!r} (needs id, prompt_len, max_tokens)"
            raise WorkloadError(message) from None
    accept = doc.get("accept", "all")
    if isinstance(accept, dict):
        return Workload(engine, requests, {str(k): [int(x) for x in v] for k, v in accept.items()})
    if accept not in ("all", "none"):
        raise WorkloadError(f"{path}: field 'accept': 'all', 'none' or a mapping, got {accept!r}")
    return Workload(engine, requests, accept_default=accept)


def load_workload(source: str | Path) -> Workload:
    """A trace (.jsonl, .jsonl.gz, .zst) or a workload file (.json, .yaml, .yml)."""
    name = str(source)
    if name.endswith((".json", ".yaml", ".yml")):
        return workload_from_file(source)
    return workload_from_trace(load(source))


@contextmanager
def _recording_to(path: Path) -> Iterator[None]:
    old = os.environ.get("SCHEDSCOPE_TRACE")
    os.environ["SCHEDSCOPE_TRACE"] = str(path)
    try:
        yield
    finally:
        if old is None:
            del os.environ["SCHEDSCOPE_TRACE"]
        else:
            os.environ["SCHEDSCOPE_TRACE"] = old


def replay(
    workload: Workload, policy: str, out: str | Path, *, max_steps: int = 1_000_000, **overrides: Any
) -> Path:
    """Run `workload` through vLLM's Scheduler under `policy`; write the trace to `out`.

    `overrides` replace EngineSpec fields (max_num_batched_tokens, method, …).
    """
    from tracer.offline import build_scheduler, run_workload
    from tracer.policies import scheduler_class

    engine = replace(workload.engine, **{k: v for k, v in overrides.items() if v is not None})
    if engine.method not in REPLAYABLE_METHODS:
        raise WorkloadError(
            f"replay cannot configure method {engine.method!r} offline; "
            f"use one of {', '.join(str(m) for m in REPLAYABLE_METHODS)} (--method)"
        )
    out = Path(out)
    with _recording_to(out):
        sched = build_scheduler(engine, scheduler_class(policy))
        try:
            run_workload(sched, workload.requests, accept=workload.accept_fn(), max_steps=max_steps)
        finally:
            sched.shutdown()
    return out
