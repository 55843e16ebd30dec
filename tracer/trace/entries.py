"""Per-request entry columns: every request a step names, as flat arrays.

The step pass (tracer.analysis.steppass) and the request index (tracer.analysis.requests)
need each step's requests: who was scheduled with how many tokens and drafts, what each
sampled, who waited, was preempted or finished. Parsing every record again for that costs
about 0.3 ms a step at 256 running; here the same facts are collected once, while the
reader parses the trace (TraceBuilder with `entries=True`) or while the recorder writes it
(tracer.record.born), into flat int32 arrays the analyses run NumPy over.

Per step row (`steps`): how many entries of each kind it has, how its `sampled` was written
(none, aligned with the scheduled order, or an `{id: n}` dict) and its `context_tokens`.
Per entry, in the step's order: `sched` (the `new`, `resumed` then `running` requests: id
code, tokens, drafts, the count it sampled as `Trace.step` reads it), `items` (a dict
`sampled`'s own entries: id code, count), `wait` (`waiting_demand` ids), `pre`
(`preempted`), `fin` (`finished`). Ids are codes into `ids`, numbered in the order the
collector met them.

A record the columns cannot hold exactly (an id that is not a JSON scalar, a count that is
not a 32-bit integer, a `sampled` of another type) stops the collection: the entries of
that trace are then unavailable (`EntryCollector.failed` says why) and the analyses read
the records instead.
"""

from __future__ import annotations

from array import array
from collections.abc import Iterable
from dataclasses import dataclass
from itertools import repeat
from operator import itemgetter
from typing import Any

import numpy as np
import orjson

# steps: per step row; sched/items/wait/pre/fin: per entry.
STEP_COLS = ("k_new", "k_res", "k_run", "k_items", "k_wait", "k_pre", "k_fin", "s_kind")
SCHED_COLS = ("req", "tokens", "spec", "sampled")
ITEM_COLS = ("req", "n")
# How a step's `sampled` was written.
S_NONE, S_ALIGNED, S_DICT = 0, 1, 2
NO_CONTEXT = np.iinfo(np.int64).min  # a step without `context_tokens`

_ID = itemgetter(0)
_TOKENS = itemgetter(1)
_SPEC = itemgetter(2)
_GROUP = itemgetter("id", "tokens", "spec")


class EntryCollector:
    """Entry columns of steps added in order (`add`); `build()` hands them out as Entries."""

    def __init__(self) -> None:
        self.codes: dict[Any, int] = {}
        self.ids: list[Any] = []
        self.steps = {name: array("i") for name in STEP_COLS}
        self.ctx = array("q")
        self.sched = {name: array("i") for name in SCHED_COLS}
        self.items = {name: array("i") for name in ITEM_COLS}
        self.wait, self.pre, self.fin = array("i"), array("i"), array("i")
        self.failed: str | None = None
        self.count = 0  # steps added

    def _code(self, ids: Iterable[Any]) -> list[int]:
        ids = ids if type(ids) is list else list(ids)
        got = list(map(self.codes.get, ids))
        if None in got:  # ids not met before: numbered in the order met
            codes, known = self.codes, self.ids
            for j, rid in enumerate(ids):
                if got[j] is None:
                    c = codes.get(rid)
                    if c is None:
                        if rid is not None and type(rid) not in (str, int, float, bool):
                            raise TypeError(f"request id {rid!r} is not a JSON scalar")
                        c = codes[rid] = len(known)
                        known.append(rid)
                    got[j] = c
        return got

    def add(self, r: dict[str, Any]) -> None:
        """One step record, in either layout (1.2 arrays or 1.1 entries), raw or expanded.
        After a failure nothing more is collected."""
        if self.failed is not None:
            return
        steps, sched = self.steps, self.sched
        mark = {name: len(a) for name, a in (*steps.items(), *sched.items(), *self.items.items())}
        marks = len(self.ctx), len(self.wait), len(self.pre), len(self.fin)
        try:
            ids: list[Any] = []
            counts = []
            for key in ("new", "resumed", "running"):
                group = r.get(key) or ()
                if type(group) is dict:
                    gid, tokens, spec = _GROUP(group)
                    sched["tokens"].extend(tokens)
                    sched["spec"].extend(spec)
                else:
                    gid = list(map(_ID, group))
                    sched["tokens"].extend(map(_TOKENS, group))
                    try:
                        sched["spec"].extend(map(_SPEC, group))
                    except IndexError:  # 1.1 entries without drafts count none
                        del sched["spec"][len(sched["tokens"]) - len(group) :]
                        sched["spec"].extend([e[2] if len(e) > 2 else 0 for e in group])
                ids += gid
                counts.append(len(gid))
            n = len(ids)
            if len(sched["tokens"]) != mark["tokens"] + n or len(sched["spec"]) != mark["spec"] + n:
                raise ValueError("groups of unequal lengths")
            codes = self._code(ids)
            sched["req"].extend(codes)
            smp = r.get("sampled")
            n_items = 0
            if smp is None:
                kind = S_NONE
                sched["sampled"].extend(repeat(0, n))
            elif type(smp) is list:
                if len(smp) != n:
                    raise ValueError(f"{len(smp)} sampled counts for {n} scheduled requests")
                kind = S_ALIGNED
                sched["sampled"].extend(smp)
            elif type(smp) is dict:
                kind = S_DICT
                sched["sampled"].extend(map(smp.get, ids, repeat(0)))
                self.items["req"].extend(self._code(smp))
                self.items["n"].extend(smp.values())
                n_items = len(smp)
            else:
                raise ValueError(f"sampled is {type(smp).__name__}")
            wait = r.get("waiting_demand") or ()
            self.wait.extend(self._code(map(_ID, wait)))
            pre, fin = r.get("preempted") or (), r.get("finished") or ()
            self.pre.extend(self._code(pre))
            self.fin.extend(self._code(fin))
            context = r.get("context_tokens")
            self.ctx.append(NO_CONTEXT if context is None else int(context))
            for name, value in zip(
                STEP_COLS, (*counts, n_items, len(wait), len(pre), len(fin), kind), strict=True
            ):
                steps[name].append(value)
        except (TypeError, ValueError, OverflowError, KeyError, IndexError, AttributeError) as exc:
            self.failed = f"step {r.get('step')!r}: {type(exc).__name__}: {exc}"
            for name, a in (*steps.items(), *sched.items(), *self.items.items()):
                del a[mark[name] :]
            for a, at in zip((self.ctx, self.wait, self.pre, self.fin), marks, strict=True):
                del a[at:]
            return
        self.count += 1

    def extend(self, entries: Entries) -> None:
        """Continue after `entries` (a sidecar's, for a file that grew since)."""
        assert self.count == 0 and not self.ids
        self.ids = list(entries.ids)
        self.codes = {rid: i for i, rid in enumerate(self.ids)}
        for name in STEP_COLS:
            self.steps[name].frombytes(np.ascontiguousarray(entries.steps[name], "<i4").tobytes())
        self.ctx.frombytes(np.ascontiguousarray(entries.ctx, "<i8").tobytes())
        for name in SCHED_COLS:
            self.sched[name].frombytes(np.ascontiguousarray(entries.sched[name], "<i4").tobytes())
        for name in ITEM_COLS:
            self.items[name].frombytes(np.ascontiguousarray(entries.items[name], "<i4").tobytes())
        for mine, theirs in ((self.wait, entries.wait), (self.pre, entries.pre), (self.fin, entries.fin)):
            mine.frombytes(np.ascontiguousarray(theirs, "<i4").tobytes())
        self.count = len(entries)

    def build(self) -> Entries | None:
        """The columns so far (copied), or None after a failure."""
        if self.failed is not None:
            return None

        def a(values: array) -> np.ndarray:
            return np.array(values, dtype=np.int32 if values.typecode == "i" else np.int64)

        return Entries(
            ids=list(self.ids),
            steps={name: a(v) for name, v in self.steps.items()},
            ctx=a(self.ctx),
            sched={name: a(v) for name, v in self.sched.items()},
            items={name: a(v) for name, v in self.items.items()},
            wait=a(self.wait),
            pre=a(self.pre),
            fin=a(self.fin),
        )


@dataclass
class Entries:
    """A trace's entry columns (see the module docstring); arrays may be mapped from a sidecar."""

    ids: list[Any]
    steps: dict[str, np.ndarray]
    ctx: np.ndarray
    sched: dict[str, np.ndarray]
    items: dict[str, np.ndarray]
    wait: np.ndarray
    pre: np.ndarray
    fin: np.ndarray
    checked: bool = False  # the request codes were found inside the id table

    def __len__(self) -> int:
        return len(self.ctx)

    def problem(self, columns: dict[str, np.ndarray] | None = None, *, deep: bool = True) -> str | None:
        """What makes these columns inconsistent (lengths, counts that differ from the
        trace's own `columns`, with `deep` codes out of range: a pass over every entry), or
        None: checked before they are trusted."""
        n = len(self.ctx)
        if any(len(v) != n for v in self.steps.values()):
            return "step arrays of unequal lengths"
        k = self.steps
        expect = {
            "sched": int(k["k_new"].sum(dtype=np.int64) + k["k_res"].sum() + k["k_run"].sum()),
            "items": int(k["k_items"].sum(dtype=np.int64)),
            "wait": int(k["k_wait"].sum(dtype=np.int64)),
            "pre": int(k["k_pre"].sum(dtype=np.int64)),
            "fin": int(k["k_fin"].sum(dtype=np.int64)),
        }
        got = {
            "sched": {len(v) for v in self.sched.values()},
            "items": {len(v) for v in self.items.values()},
            "wait": {len(self.wait)},
            "pre": {len(self.pre)},
            "fin": {len(self.fin)},
        }
        for name, count in expect.items():
            if got[name] != {count}:
                return f"{name}: {sorted(got[name])} entries, the step counts say {count}"
        if any(int(v.min(initial=0)) < 0 for v in k.values()):
            return "negative counts"
        if deep and not self.checked:
            for codes in (self.sched["req"], self.items["req"], self.wait, self.pre, self.fin):
                if len(codes) and (int(codes.min()) < 0 or int(codes.max()) >= len(self.ids)):
                    return "request codes outside the id table"
            self.checked = True
        if columns is not None:
            if len(columns["step"]) != n:
                return f"{n} steps, the trace has {len(columns['step'])}"
            for mine, theirs in (
                ("k_new", "n_new"),
                ("k_res", "n_resumed"),
                ("k_run", "n_running"),
                ("k_pre", "n_preempted"),
                ("k_fin", "n_finished"),
            ):
                if not np.array_equal(k[mine], columns[theirs]):
                    return f"{mine} differs from the trace's {theirs}"
        return None

    # -- kept in the reader's sidecar ---------------------------------------------------

    def arrays(self) -> dict[str, np.ndarray]:
        out = {"e_ids": np.frombuffer(orjson.dumps(self.ids), dtype=np.uint8), "e_ctx": self.ctx}
        out.update({f"e_s_{name}": v for name, v in self.steps.items()})
        out.update({f"e_sched_{name}": v for name, v in self.sched.items()})
        out.update({f"e_items_{name}": v for name, v in self.items.items()})
        out.update({"e_wait": self.wait, "e_pre": self.pre, "e_fin": self.fin})
        return out

    @classmethod
    def from_arrays(cls, arrays: dict[str, np.ndarray]) -> Entries | None:
        """The columns `arrays()` wrote, or None if any is missing or the ids do not parse."""
        try:
            ids = orjson.loads(arrays["e_ids"].tobytes())
            if type(ids) is not list:
                return None
            return cls(
                ids=ids,
                steps={name: arrays[f"e_s_{name}"] for name in STEP_COLS},
                ctx=arrays["e_ctx"],
                sched={name: arrays[f"e_sched_{name}"] for name in SCHED_COLS},
                items={name: arrays[f"e_items_{name}"] for name in ITEM_COLS},
                wait=arrays["e_wait"],
                pre=arrays["e_pre"],
                fin=arrays["e_fin"],
            )
        except (KeyError, orjson.JSONDecodeError):
            return None


I32, I64 = np.dtype("<i4"), np.dtype("<i8")
SIDECAR_DTYPES: dict[str, np.dtype] = {
    "e_ids": np.dtype("u1"),
    "e_ctx": I64,
    **{f"e_s_{name}": I32 for name in STEP_COLS},
    **{f"e_sched_{name}": I32 for name in SCHED_COLS},
    **{f"e_items_{name}": I32 for name in ITEM_COLS},
    "e_wait": I32,
    "e_pre": I32,
    "e_fin": I32,
}
