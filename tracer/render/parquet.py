"""`schedscope export --format parquet`: a trace as two Parquet tables, for SQL (DuckDB, …).

- `steps.parquet`, one row per step: the reader's step columns (`Trace.columns`), the
  runner columns (prefixed `runner_`), and the budget model's figures
  (`tracer.analysis.budget`: `excess_rows`, `withheld_tokens`, `withheld_exact`);
- `requests.parquet`, one row per request per step it was scheduled, preempted or held back
  in: `kind` is `new`, `resumed`, `running` (scheduled), `preempted` (preempted in that step
  without being scheduled in it), `waiting` (listed waiting, not admitted) or `unscheduled`
  (running, given no tokens); `preempted` is true on every row whose request the step
  preempted, scheduled or not; `reason` is why it was held back or clipped below its demand
  (tracer.analysis.reasons' code, null for a request that got all it needed). The steps table's
  `binding` is each step's binding constraint.

Both carry an `engine` column (the trace's name, or one given), so the tables of several
traces are queried together: docs/queries.md. Step detail is read through `Trace.step`, so
every trace format exports the same way; the request table is written in row groups of a
few thousand steps, so memory stays bounded however long the trace.

pyarrow is an optional dependency (`pip install 'schedscope[parquet]'`), imported here only.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from tracer.analysis import step_bindings, why
from tracer.analysis.budget import analyze
from tracer.analysis.reasons import CODE_INDEX, CODES
from tracer.render.command_lines import progress_frame
from tracer.trace.columns import RUNNER_COLS
from tracer.trace.compact import GROUPS
from tracer.trace.trace_type import Trace

Progress = Callable[[int, int], None]

STEPS_FILE = "steps.parquet"
REQUESTS_FILE = "requests.parquet"
# Request kinds, in the order of their dictionary codes.
KINDS = (*GROUPS, "preempted", "waiting", "unscheduled")
# Steps per row group of the request table (about 1M rows at 256 running).
CHUNK = 4096


class ParquetUnavailable(RuntimeError):
    """pyarrow is not installed."""


def require() -> None:
    """Raise ParquetUnavailable, saying what to install, unless pyarrow can be imported."""
    _pyarrow()


def _pyarrow() -> tuple[Any, Any]:
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError as exc:
        raise ParquetUnavailable(
            f"--format parquet needs pyarrow: pip install 'schedscope[parquet]' ({exc})"
        ) from None
    return pa, pq


def engine_name(trace: Trace) -> str:
    """A trace's default engine name: its file name without .jsonl/.gz/.zst."""
    name = Path(trace.path).name
    for suffix in (".gz", ".zst", ".jsonl", ".json"):
        name = name.removesuffix(suffix)
    return name


def _constant(pa: Any, value: str, n: int) -> Any:
    """A string column holding one value, dictionary-encoded (no n Python strings)."""
    return pa.DictionaryArray.from_arrays(pa.array(np.zeros(n, dtype=np.int32)), pa.array([value]))


def steps_table(trace: Trace, engine: str) -> Any:
    pa, _ = _pyarrow()
    budget = analyze(trace)
    cols: dict[str, Any] = {"engine": _constant(pa, engine, len(trace))}
    cols.update(trace.columns)
    cols.update({f"runner_{name}": trace.runner[name] for name in RUNNER_COLS})
    cols["excess_rows"] = budget.excess
    cols["withheld_tokens"] = budget.withheld
    cols["withheld_exact"] = budget.exact
    cols["binding"] = pa.DictionaryArray.from_arrays(
        pa.array(step_bindings.bindings(trace), pa.int8()), pa.array(CODES)
    )
    return pa.table({k: v if isinstance(v, pa.Array) else pa.array(v) for k, v in cols.items()})


def _entries(group: list[list[Any]]) -> list[list[Any]]:
    """[id, tokens, spec, demand] entries; older traces may omit spec (0) and demand (-1)."""
    if set(map(len, group)) == {4}:
        return group
    return [(e + [0, -1][len(e) - 2 :])[:4] for e in group]


def _request_chunk(pa: Any, trace: Trace, engine: str, rows: range) -> Any:
    step_no, t, ids, kind, tokens, spec, demand, sampled, preempted = ([] for _ in range(9))
    reasons: list[int | None] = []
    steps, times = trace.columns["step"], trace.columns["t"]
    config = why.Config(trace)
    for i in rows:
        rec = trace.step(i)
        held = {r.id: r for r in why.step_why(trace, i, rec, config=config, resume_costs=False).requests}
        gone = set(rec["preempted"] or ())
        smp = rec["sampled"]
        scheduled: set[Any] = set()
        for code, key in enumerate(GROUPS):
            group = rec[key]
            if not group:
                continue
            g_ids, g_tokens, g_spec, g_demand = zip(*_entries(group), strict=True)
            n = len(g_ids)
            ids += g_ids
            tokens += g_tokens
            spec += g_spec
            demand += g_demand
            kind += [code] * n
            sampled += map(smp.get, g_ids) if isinstance(smp, dict) else [None] * n
            preempted += map(gone.__contains__, g_ids) if gone else [False] * n
            step_no += [int(steps[i])] * n
            t += [float(times[i])] * n
            reasons += [CODE_INDEX[held[r].cause.code] if r in held else None for r in g_ids]
            if gone:
                scheduled.update(g_ids)
        # Preempted without being scheduled in this step (the usual case): a row of its own.
        for rid in (r for r in rec["preempted"] or () if r not in scheduled):
            ids.append(rid)
            tokens.append(0)
            spec.append(0)
            demand.append(-1)
            kind.append(len(GROUPS))
            sampled.append(None)
            preempted.append(True)
            step_no.append(int(steps[i]))
            t.append(float(times[i]))
            reasons.append(None)
        # Requests held back in this step, with the reason (`schedscope why`).
        for r in held.values():
            if r.state == "clipped":
                continue
            ids.append(r.id)
            tokens.append(0)
            spec.append(0)
            demand.append(r.demand)
            kind.append(KINDS.index(r.state))
            sampled.append(None)
            preempted.append(False)
            step_no.append(int(steps[i]))
            t.append(float(times[i]))
            reasons.append(CODE_INDEX[r.cause.code])
    n = len(ids)
    return pa.table(
        {
            "engine": _constant(pa, engine, n),
            "step": pa.array(step_no, pa.int64()),
            "t": pa.array(t, pa.float64()),
            "request_id": pa.array(ids, pa.string()),
            "kind": pa.DictionaryArray.from_arrays(pa.array(kind, pa.int8()), pa.array(KINDS)),
            "tokens": pa.array(tokens, pa.int64()),
            "spec": pa.array(spec, pa.int64()),
            "demand": pa.array(demand, pa.int64()),
            "sampled": pa.array(sampled, pa.int64()),
            "preempted": pa.array(preempted, pa.bool_()),
            "reason": pa.DictionaryArray.from_arrays(pa.array(reasons, pa.int8()), pa.array(CODES)),
        }
    )


def export(
    trace: Trace, out_dir: str | Path, *, engine: str | None = None, progress: Progress | None = None
) -> tuple[Path, Path]:
    """Write OUT_DIR/steps.parquet and OUT_DIR/requests.parquet; `progress(done, total)` hears
    after each row group of steps. Each file appears whole or not at all (written aside, then
    renamed)."""
    pa, pq = _pyarrow()
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    name = engine or engine_name(trace)
    meta = {
        b"schedscope.source": str(trace.path).encode(),
        b"schedscope.schema": str(trace.header.get("schema")).encode(),
    }
    steps_path, requests_path = out / STEPS_FILE, out / REQUESTS_FILE
    table = steps_table(trace, name)
    tmp = steps_path.with_name(steps_path.name + ".tmp")
    pq.write_table(table.replace_schema_metadata(meta), tmp, compression="zstd")
    tmp.replace(steps_path)

    total = len(trace)
    tmp = requests_path.with_name(requests_path.name + ".tmp")
    writer = None
    try:
        for start in range(0, max(total, 1), CHUNK):
            chunk = _request_chunk(pa, trace, name, range(start, min(start + CHUNK, total)))
            if writer is None:
                writer = pq.ParquetWriter(tmp, chunk.schema.with_metadata(meta), compression="zstd")
            writer.write_table(chunk)
            if progress is not None:
                progress(min(start + CHUNK, total), total)
        writer.close()
    except BaseException:
        if writer is not None:
            writer.close()
        tmp.unlink(missing_ok=True)
        raise
    tmp.replace(requests_path)
    return steps_path, requests_path


def progress_text(done: int, total: int) -> str:
    """`export --format parquet`'s progress on a terminal: a frame redrawn in place."""
    return progress_frame(f"exporting {done / total:6.1%}", done, total)


def written_line(steps: str | Path, requests: str | Path, trace_steps: int) -> str:
    """What `export --format parquet` prints once both tables are written."""
    return f"wrote {steps} and {requests} ({trace_steps} steps); queries: docs/queries.md"
