#!/usr/bin/env python3
"""The web server's side of the first figure on a big trace, in-process (no browser).

Makes the app as `schedscope web TRACE` does (a complete file, read progressively, with
the sidecar off: a first open), prints when each snapshot reaches the store, and times the
whole-run figure for the first snapshot the page could ask for. What remains of the
"first figure drawn" figure (bench/scale.py) is the page's own first callbacks and the
browser's drawing.

    .venv/bin/python bench/web_server_probe.py /work/big/t200k.jsonl --seconds 8
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path
from typing import Any

os.environ["SCHEDSCOPE_SIDECAR"] = "off"
T0 = time.perf_counter()
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tracer.trace.source import TraceSource  # noqa: E402
from web import store as store_module  # noqa: E402
from web.app import make_app  # noqa: E402


def stamp() -> str:
    return f"{time.perf_counter() - T0:6.2f} s"


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("trace", type=Path)
    p.add_argument("--seconds", type=float, default=8.0, help="how long to watch the snapshots")
    args = p.parse_args()
    put = store_module.TraceStore.put

    def traced_put(self: Any, view: Any) -> Any:
        out = put(self, view)
        print(f"{stamp()}  snapshot {view.version} in the store: {len(view):,} steps", flush=True)
        return out

    store_module.TraceStore.put = traced_put  # type: ignore[method-assign]
    app = make_app(TraceSource.file(args.trace))
    print(f"{stamp()}  app made (the source reading)", flush=True)
    handlers = app.handlers  # type: ignore[attr-defined]
    while (view := app.store.get("a")) is None:  # type: ignore[attr-defined]
        time.sleep(0.01)
    start = time.perf_counter()
    handlers._full_figure(view)
    print(
        f"{stamp()}  whole-run figure of snapshot {view.version} ({len(view):,} steps) built in "
        f"{time.perf_counter() - start:.2f} s, while the source kept reading",
        flush=True,
    )
    time.sleep(max(0.0, args.seconds - (time.perf_counter() - T0)))
    for feed in app.feeds:  # type: ignore[attr-defined]
        feed.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
