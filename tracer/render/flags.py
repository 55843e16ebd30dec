"""`schedscope flags`' lines: one per flag, its step, severity, kind and sentence."""

from __future__ import annotations

import numpy as np

from tracer.analysis.flags import FlagReport


def flag_lines(report: FlagReport, positions: np.ndarray, where: str = "") -> str:
    """The flags at `positions` (FlagReport.flags.positions), a line each, `where` before each
    (an engine's label in a run of several). Made in bulk from the report's columns, not from
    Flag objects: a busy server's trace can flag every step."""
    listed = report.flags
    kinds, severities = listed.kinds, np.asarray(listed.severities(), dtype=object)
    heads = np.empty(len(listed), dtype=object)  # "  warn     kind: ", made once per kind
    for kind in set(kinds.tolist()):
        of_kind = kinds == kind
        for severity in set(severities[of_kind].tolist()):
            heads[of_kind & (severities == severity)] = f"  {severity:<7}  {kind}: "
    columns = (listed.steps.tolist(), heads.tolist(), listed.messages())
    if len(positions) < len(listed):
        columns = tuple([c[i] for i in positions.tolist()] for c in columns)
    lead = f"{where}step "
    return "".join([f"{lead}{step:>6}{head}{text}\n" for step, head, text in zip(*columns, strict=True)])
