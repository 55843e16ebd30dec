"""Every sentence a flag says, worded from its detector's columns and constants
(tracer.analysis.flags), and `schedscope flags`' lines.

Each kind's words take its columns as lists and make every sentence in one comprehension: a
busy server's trace can flag most of its steps, and a view reads them all to filter."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from tracer.analysis import flags as kinds
from tracer.analysis.flags import Flag, FlagList, FlagReport


def _additive(c: Mapping[str, Any], withheld: list[int], excess: list[int], used: list[int],
              exact: list[bool], *_: list[Any]) -> list[str]:  # fmt: skip
    head = f"{c['method']} K={c['k']} was charged "
    tail = (
        f" draft slots against the target input budget, but its {c['q']} query rows per request run in a "
        "separate pass with their own buffer: this withheld "
    )
    advice = "Keep a separate draft-input budget (policy 'draft-budget') instead of the additive reservation."
    return [
        f"{head}{x}{tail}{'' if e else 'at most '}{w} target tokens ({u} scheduled instead of "
        f"{u + w}). {advice}"
        for w, x, u, e in zip(withheld, excess, used, exact, strict=True)
    ]


def _query_overflow(c: Mapping[str, Any], rows: list[int], caps: list[int]) -> list[str]:
    return [
        f"{n} query rows exceed the drafter buffer of {cap}: bound admission so that requests × "
        f"{c['q']} ≤ {cap}."
        for n, cap in zip(rows, caps, strict=True)
    ]


def _shared_overflow(c: Mapping[str, Any], rows: list[int]) -> list[str]:
    return [
        f"target tokens plus {c['method']} draft rows ({n}) exceed the shared input buffer of "
        f"{c['capacity']}: the reservation must stay additive for this method."
        for n in rows
    ]


def _negative(c: Mapping[str, Any], left: list[int], caps: list[int]) -> list[str]:
    return [
        f"the {c['budget']} budget ended the step at {n}: the scheduler handed out more than its "
        f"{cap}; its final assert would fail."
        for n, cap in zip(left, caps, strict=True)
    ]


def _preemption_leak(
    c: Mapping[str, Any], leaked: list[list[str]], tokens: list[int], *_: list[Any]
) -> list[str]:
    return [
        f"preempted request(s) {', '.join(ids) or '?'} still hold this step's budget ({n} tokens): "
        "restore both the target and the input/query budget when preempting a request scheduled "
        "earlier in the step."
        for ids, n in zip(leaked, tokens, strict=True)
    ]


def _cap_binding(
    c: Mapping[str, Any], running: list[int], waiting: list[int], input_left: list[int]
) -> list[str]:
    return [
        f"the admission cap of {c['cap']} running requests kept {w} waiting while {n} input rows "
        "were free; a per-step query budget would admit more as long as their query rows fit."
        for w, n in zip(waiting, input_left, strict=True)
    ]


def _limit_holds(c: Mapping[str, Any], codes: list[int], waiting: list[int], left: list[int],
                 caps: list[int], _: list[float], free: list[int]) -> list[str]:  # fmt: skip
    # The setting as the trace has it ("max_num_seqs=8"), else its label; the knob to raise.
    said = {
        code: (f"{name}={value}" if value is not None else label, knob)
        for code, (name, value, label, knob) in c["settings"].items()
    }
    return [
        f"{said[k][0]} kept {w} request{'s' if w != 1 else ''} waiting while {n} of {cap} budget "
        f"tokens and {pct}% of KV were free: raise {said[k][1]}."
        for k, w, n, cap, pct in zip(codes, waiting, left, caps, free, strict=True)
    ]


WORDS: dict[str, Callable[..., list[str]]] = {
    kinds.ADDITIVE: _additive,
    kinds.QUERY_OVERFLOW: _query_overflow,
    kinds.SHARED_OVERFLOW: _shared_overflow,
    kinds.NEGATIVE: _negative,
    kinds.PREEMPTION_LEAK: _preemption_leak,
    kinds.CAP_BINDING: _cap_binding,
    kinds.LIMIT_HOLDS: _limit_holds,
}


def _word(kind: str, context: Mapping[str, Any], columns: list[list[Any]]) -> list[str]:
    words = WORDS.get(kind)
    if words is None:  # a kind this build does not word, with no sentence of its own
        return [kind] * (len(columns[0]) if columns else 0)
    return words(context, *columns)


def messages(flags: FlagList) -> list[str]:
    """Every flag's sentence, in order."""
    return flags.sentences(_word)


def message(flag: Flag) -> str:
    """One flag's sentence."""
    if flag.text is not None:
        return flag.text
    return _word(flag.kind, flag.context, [[x] for x in flag.facts])[0] if flag.facts else flag.kind


def flag_doc(flag: Flag) -> dict[str, Any]:
    """A flag as `schedscope flags --json` writes it."""
    return {"step": flag.step, "kind": flag.kind, "severity": flag.severity, "message": message(flag),
            "numbers": flag.numbers}  # fmt: skip


def flags_document(path: str, engine: str | None, report: FlagReport, flags: list[Flag]) -> dict[str, Any]:
    """One trace's `schedscope flags --json` document (`engine`: its label in a run of several)."""
    return {
        "trace": path,
        **({"engine": engine} if engine is not None else {}),
        "flags": [flag_doc(f) for f in flags],
        "counts": report.counts(),
        "tokens_withheld": report.tokens_withheld,
    }


def flag_lines(report: FlagReport, positions: np.ndarray, where: str = "") -> str:
    """The flags at `positions` (FlagReport.flags.positions), a line each, `where` before each
    (an engine's label in a run of several). Made in bulk from the report's columns, not from
    Flag objects: a busy server's trace can flag every step."""
    listed = report.flags
    kinds_of, severities = listed.kinds, np.asarray(listed.severities(), dtype=object)
    heads = np.empty(len(listed), dtype=object)  # "  warn     kind: ", made once per kind
    for kind in set(kinds_of.tolist()):
        of_kind = kinds_of == kind
        for severity in set(severities[of_kind].tolist()):
            heads[of_kind & (severities == severity)] = f"  {severity:<7}  {kind}: "
    columns = (listed.steps.tolist(), heads.tolist(), messages(listed))
    if len(positions) < len(listed):
        columns = tuple([c[i] for i in positions.tolist()] for c in columns)
    lead = f"{where}step "
    return "".join([f"{lead}{step:>6}{head}{text}\n" for step, head, text in zip(*columns, strict=True)])
