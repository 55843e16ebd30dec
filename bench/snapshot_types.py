#!/usr/bin/env python3
"""What a step snapshot costs the scheduler thread, by the type that holds it.

`Recorder.after_schedule` takes one snapshot per step and `after_update` fills in
two fields later. This times building one as the recorder does, with the same
fields and the values passed as local names, in: a positional list (what the
recorder builds, since issue 33 again; `tracer.record.snapshot.step_snapshot` types
it off the scheduler thread), a NamedTuple (completed with `_replace`: it is
immutable), a slotted dataclass built by position, and the slotted, keyword-only
dataclass (`tracer.record.snapshot.StepSnapshot`, built by the recorder until issue 33).
Best of 5 repeats, ns per snapshot: only the container is timed.

    .venv/bin/python bench/snapshot_types.py [--quick]
"""

from __future__ import annotations

import argparse
import sys
import timeit
from dataclasses import fields, make_dataclass
from pathlib import Path
from typing import Any, NamedTuple

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tracer.record.snapshot import StepSnapshot


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="10,000 snapshots per repeat instead of 100,000")
    args = ap.parse_args()
    names = [f.name for f in fields(StepSnapshot)]
    head, late = names[:-2], names[-2:]  # `sampled` and `ends` come in after_update
    as_tuple = NamedTuple("AsTuple", [(name, Any) for name in names])  # type: ignore[misc]
    by_position = make_dataclass("ByPosition", names, slots=True)
    setup = ", ".join(head) + " = " + ", ".join(f"[{i}]" for i in range(len(head)))
    pos = ", ".join(head)
    cases = {
        "list, two slots set later (now)": f"x = [{pos}, None, None]; x[-2] = 1; x[-1] = 2",
        "NamedTuple + _replace": f"x = T({pos}, None, None)._replace({late[0]}=1, {late[1]}=2)",
        "slotted dataclass by position": f"x = P({pos}, None, None); x.{late[0]} = 1; x.{late[1]} = 2",
        "slotted dataclass by keyword (before)": (
            "x = S(" + ", ".join(f"{n}={n}" for n in head) + f"); x.{late[0]} = 1; x.{late[1]} = 2"
        ),
    }
    env = {"T": as_tuple, "P": by_position, "S": StepSnapshot}
    n = 10_000 if args.quick else 100_000
    print(f"step snapshot of {len(names)} fields, ns per step (best of 5):")
    ns = {}
    for label, stmt in cases.items():
        ns[label] = min(timeit.repeat(stmt, setup, globals=env, number=n, repeat=5)) / n * 1e9
        print(f"  {label:36s} {ns[label]:6.0f}")
    now, before = ns["list, two slots set later (now)"], ns["slotted dataclass by keyword (before)"]
    print(f"Snapshot figure: {now:.0f} ns per step as a list, {before:.0f} ns as a keyword slotted dataclass")
    return 0


if __name__ == "__main__":
    sys.exit(main())
