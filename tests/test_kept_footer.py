"""The footer's facts survive a SIGKILL: the writer keeps them beside the trace (`<trace>.end`).

A real process writes a trace through TraceWriter and kills itself with SIGKILL, as vLLM's
process manager kills EngineCore with --shutdown-timeout 0; the reader then takes the kept
facts as the footer, and doctor passes its records check. No vLLM needed: the recorder's
own footer under a real `vllm serve` is tests/test_live_kill.py's.
"""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import orjson

from tracer import doctor
from tracer.record.writer import Record, TraceWriter, open_sink
from tracer.trace import schema
from tracer.trace.reader import load

ROOT = Path(__file__).resolve().parent.parent
SAMPLE = ROOT / "sample_traces" / "ngram_preempt.jsonl"

# Writes the sample's header and steps (its footer left out) as a recorder would, keeps
# the footer's facts, waits until all is written, then dies without a shutdown.
WRITE_AND_DIE = """
import os, signal, sys, time
from pathlib import Path
import orjson
from tracer.record.writer import Record, TraceWriter, open_sink
src, out = Path(sys.argv[1]), Path(sys.argv[2])
lines = [ln for ln in src.read_bytes().splitlines() if b'"kind":"footer"' not in ln]
built = 0
def encode(line):
    global built
    built += b'"kind":"step"' in line
    return Record("x", None, line + b"\\n")
writer = TraceWriter(open_sink(out), encode)
writer.keep_footer(out.with_name(out.name + ".end"), lambda: {
    "kind": "footer", "steps_written": built, "records_dropped": writer.dropped,
    "errors": writer.errors, "end_time": time.time(), "writer_failure": writer.failed})
for line in lines:
    writer.emit(line)
assert writer.force_flush(10)
time.sleep(0.1)
os.kill(os.getpid(), signal.SIGKILL)
"""


def _killed_trace(tmp_path: Path) -> Path:
    out = tmp_path / "run.jsonl"
    proc = subprocess.run(
        [sys.executable, "-c", WRITE_AND_DIE, str(SAMPLE), str(out)],
        cwd=ROOT,
        capture_output=True,
        timeout=60,
    )
    assert proc.returncode == -signal.SIGKILL, proc.stderr.decode()
    return out


def test_a_killed_writer_leaves_the_footers_facts_and_the_reader_takes_them(tmp_path: Path) -> None:
    out = _killed_trace(tmp_path)
    assert b'"kind":"footer"' not in out.read_bytes()  # the kill left no footer in the trace
    trace = load(out)
    assert len(trace) == 24
    assert trace.footer is not None and trace.footer["kept"] is True
    assert (trace.footer["steps_written"], trace.footer["records_dropped"], trace.footer["errors"]) == (
        24,
        0,
        0,
    )
    (verdict,) = doctor.record_verdicts(trace)
    assert verdict.status == doctor.PASS, verdict
    assert "kept beside the trace" in verdict.sentence


def test_kept_facts_that_miss_a_step_are_not_a_footer(tmp_path: Path) -> None:
    out = _killed_trace(tmp_path)
    steps = [ln for ln in out.read_bytes().splitlines() if b'"kind":"step"' in ln]
    extra = orjson.loads(steps[-1])
    extra["step"] += 1
    with out.open("ab") as f:  # a step written after the facts were last kept
        f.write(orjson.dumps(extra) + b"\n")
    trace = load(out)
    assert len(trace) == 25 and trace.footer is None
    assert doctor.record_verdicts(trace)[0].status == doctor.SKIP


def test_a_clean_shutdown_writes_the_footer_and_removes_the_kept_facts(tmp_path: Path) -> None:
    out = tmp_path / "run.jsonl"
    kept = out.with_name(out.name + schema.KEPT_FOOTER_SUFFIX)

    def encode(item: bytes | dict) -> Record:
        return Record("x", None, (orjson.dumps(item) if isinstance(item, dict) else item) + b"\n")

    writer = TraceWriter(open_sink(out), encode)
    writer.keep_footer(kept, lambda: {"kind": "footer", "steps_written": 0})
    writer.emit(SAMPLE.read_bytes().splitlines()[0])
    assert writer.force_flush(10)
    assert orjson.loads(kept.read_bytes())["steps_written"] == 0  # kept while it ran
    assert load(out).footer is None, "a trace still being written has no footer yet"
    writer.shutdown(last=lambda: {"kind": "footer", "steps_written": 0, "records_dropped": 0})
    assert not kept.exists()
    assert load(out).footer == {**schema.FOOTER_DEFAULTS, "kind": "footer", "steps_written": 0}


class _FullDisk:
    """A sink whose every write fails, as on a full disk."""

    def write(self, data: object) -> int:
        raise OSError(28, "No space left on device")

    def flush(self) -> None:
        pass

    def close(self) -> None:
        pass


def test_the_kept_facts_name_a_write_failure(tmp_path: Path) -> None:
    kept = tmp_path / "run.jsonl.end"
    writer = TraceWriter(_FullDisk(), lambda line: Record("x", None, line + b"\n"))  # type: ignore[arg-type]
    writer.keep_footer(
        kept, lambda: {"kind": "footer", "writer_failure": writer.failed, "dropped": writer.dropped}
    )
    writer.emit(b"{}")
    assert writer.force_flush(10)
    facts = orjson.loads(kept.read_bytes())
    assert facts["writer_failure"].startswith("OSError") and facts["dropped"] == 1
