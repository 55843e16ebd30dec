"""Test data for the web suite: the sample traces, and long traces tiled from them."""

from __future__ import annotations

from pathlib import Path

import orjson

from tracer.trace.builder import TraceBuilder
from tracer.trace.reader import load
from tracer.trace.trace_type import Trace
from web.model import TraceView

SAMPLES = Path(__file__).resolve().parents[2] / "sample_traces"
ADDITIVE = SAMPLES / "dflash_k7_additive.jsonl"
SEPARATE = SAMPLES / "dflash_k7_separate.jsonl"
LIVE_NGRAM = SAMPLES / "live_cpu_ngram.jsonl"


def sample(name: str | Path) -> Trace:
    return load(SAMPLES / name if isinstance(name, str) else name)


def view(name: str | Path = ADDITIVE, key: str = "a") -> TraceView:
    trace = sample(name)
    return TraceView.build(key, f"A: {Path(trace.path).name}", trace)


def lines(path: Path = ADDITIVE) -> list[bytes]:
    return [line for line in path.read_bytes().splitlines(keepends=True) if line.strip()]


def tiled_lines(n: int, path: Path = ADDITIVE) -> list[bytes]:
    """The header, then the sample's recorded steps repeated and renumbered up to n steps."""
    records = [orjson.loads(line) for line in lines(path)]
    header = records[0]
    steps = [r for r in records if r["kind"] == "step"]
    out = [orjson.dumps(header) + b"\n"]
    for i in range(n):
        rec = dict(steps[i % len(steps)])
        rec["step"] = i + 1
        out.append(orjson.dumps(rec) + b"\n")
    return out


def tiled(n: int, path: Path = ADDITIVE) -> Trace:
    builder = TraceBuilder(f"tiled-{n}")
    builder.feed(b"".join(tiled_lines(n, path)))
    return builder.build()
