"""A Recorder for a scheduler: where its records go, and what its header says of the scheduler.

Through a shipper, the trace process writes the file; otherwise a writer thread beside the
scheduler does (the offline harness, SCHEDSCOPE_WRITER=thread), with the file's recording index
written by a process of its own. Runs once, when a tracing scheduler is built.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from tracer.record.config import current_config
from tracer.record.engine_config import describe_scheduler
from tracer.record.indexer import IndexProcess
from tracer.record.recorder import Recorder
from tracer.record.shipper import TraceShipper
from tracer.record.writer import ENGINE_INTERVAL_S, Tap, TraceWriter, open_sink
from tracer.trace import schema


def recorder_for(
    sched: Any,
    path: str | Path | None,
    *,
    policy: str = "stock",
    max_queue: int | None = None,
    taps: Sequence[Tap] = (),
    header: Mapping[str, Any] | None = None,
    shipper: TraceShipper | None = None,
) -> Recorder:
    """A recorder writing to `path` (None: no file, e.g. stream only) and `taps` on a writer
    thread, or through `shipper` to the trace process, which writes `path` itself."""
    path = Path(path) if path is not None else None
    writer: TraceWriter | TraceShipper
    if shipper is not None:
        writer = shipper
    else:
        if path is None:
            sink = open(os.devnull, "ab")  # noqa: SIM115 - owned and closed by the writer
        else:
            if path.exists():
                path.unlink()  # one run per file; `{pid}` in the path keeps engines apart
            sink = open_sink(path)
        # The Recorder binds its encoder; a plain file gets its recording index, from a process beside.
        queue = max_queue or current_config().queue
        writer = TraceWriter(
            sink, max_queue=queue, taps=taps, index=IndexProcess.start(path), interval_s=ENGINE_INTERVAL_S
        )
    name = f"{type(sched).__module__}.{type(sched).__qualname__}"
    extra = dict(header) if header else None
    recorder = Recorder(
        writer, describe_scheduler(sched), policy=policy, scheduler_cls=name, header_extra=extra
    )
    if path is not None:  # a kill before close() leaves the footer's facts beside the trace
        writer.keep_footer(path.with_name(path.name + schema.KEPT_FOOTER_SUFFIX), recorder.footer_facts)
    return recorder
