#!/usr/bin/env python3
"""`schedscope diff A B` on two 200,000-step traces of a busy server (256 running).

A and B come from bench/gen_trace.py (by default the 1.1 and the 1.2 trace of the
production-scale figures, docs/performance.md). Each figure is `schedscope diff A B` as a
subprocess, from its start to its exit, peak RSS from the kernel (wait4):

- first open: SCHEDSCOPE_SIDECAR=off, nothing kept from earlier runs and nothing written;
- first open writing the sidecars: every sidecar of A and B deleted first;
- analysis cold: the reader's sidecars present (a trace opened before), the derived ones
  (`<trace>.steppass.ssidx`, `<trace>.requests.ssidx`) removed first;
- re-open: every sidecar present (as after any earlier `diff` or `timing` of these files).

The three must print the same comparison (the sidecars change no figure); the bench exits 1
otherwise.

    .venv/bin/python bench/diff_scale.py --a /work/big/t200k.jsonl --b /work/big/t200k_12.jsonl
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import ROOT, machine
from scale import CLI, MB, PY, env_for, run

DERIVED = ("steppass", "requests")


def derived(path: Path) -> list[Path]:
    return [path.with_name(f"{path.name}.{name}.ssidx") for name in DERIVED]


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--a", type=Path, default=Path("/work/big/t200k.jsonl"))
    p.add_argument("--b", type=Path, default=Path("/work/big/t200k_12.jsonl"))
    args = p.parse_args()
    print(f"diff bench: {machine()}")
    for path in (args.a, args.b):
        print(f"  {path} ({path.stat().st_size / MB:,.0f} MB)")
    cmd = [PY, "-c", CLI, "diff", str(args.a), str(args.b)]
    outputs = {}

    wall, rss, outputs["first open"] = run(cmd, env=env_for(ROOT))
    print(f"  first open (no sidecars):        {wall:6.1f} s, peak RSS {rss / MB:,.0f} MB", flush=True)
    # Every sidecar written by this first open (none left from earlier runs).
    for path in (args.a, args.b):
        for where in (path.with_name(path.name + ".ssidx"), *derived(path)):
            where.unlink(missing_ok=True)
    wall, rss, _ = run(cmd, env=env_for(ROOT, sidecar=True))
    print(f"  first open, writing sidecars:    {wall:6.1f} s, peak RSS {rss / MB:,.0f} MB", flush=True)
    for path in (args.a, args.b):
        for where in derived(path):
            where.unlink(missing_ok=True)
    wall, rss, outputs["analysis cold"] = run(cmd, env=env_for(ROOT, sidecar=True))
    print(f"  reader sidecars only:            {wall:6.1f} s, peak RSS {rss / MB:,.0f} MB", flush=True)
    wall, rss, outputs["re-open"] = run(cmd, env=env_for(ROOT, sidecar=True))
    print(f"  re-open, every sidecar:          {wall:6.1f} s, peak RSS {rss / MB:,.0f} MB", flush=True)
    verdict = "met" if wall <= 10 else "MISSED"
    print(f"  re-open against the limit of 10 s: {verdict}")
    same = len(set(outputs.values())) == 1
    print(f"  the same comparison printed by all three: {'yes' if same else 'NO'}")
    if not same:
        for name, out in outputs.items():
            print(f"--- {name}\n{out}")
    return 0 if same else 1


if __name__ == "__main__":
    raise SystemExit(main())
