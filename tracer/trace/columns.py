"""The step column schema: what one packed row per step (and per runner record) holds.

A step record is reduced on the spot to one packed row (`ROW`, a struct) of the int
columns, the line's byte span and the float columns; a Trace's columns are those rows
transposed (tracer.trace.builder). A runner record packs to `RUNNER_ROW`, joined per step
into the `RUNNER_COLS`. A sidecar saves the packed rows as they are (`ROW_DTYPE`,
`RUNNER_DTYPE`), so a change here is a change of the sidecar (tracer.trace.sidecar_restore).
"""

from __future__ import annotations

import struct

import numpy as np

# Step columns: name -> (dtype, missing value).
INT_COLS = (
    "step",
    "target_cap",
    "target_used",
    "target_left",
    "input_cap",
    "input_used",
    "input_reserved",
    "input_left",
    "query_per_req",
    "query_rows",
    "query_cap",
    "n_new",
    "n_resumed",
    "n_running",
    "n_preempted",
    "n_finished",
    "new_tokens",
    "resumed_tokens",
    "running_tokens",
    "spec_tokens",
    "sampled_tokens",
    "num_waiting",
    "num_running",
    # Preempted requests that still hold tokens in the same step (a budget leak
    # when > 0); counted here so the detector parses only the steps that leak.
    "n_preempted_held",
)
FLOAT_COLS = ("t", "sched_us", "kv_usage")
RUNNER_COLS = ("target_rows", "target_cap", "draft_rows", "draft_cap", "target_padded", "draft_padded")

# One packed row per step: the int columns, the line's byte span, the float columns.
ROW = struct.Struct(f"<{len(INT_COLS) + 2}q{len(FLOAT_COLS)}d")
ROW_DTYPE = np.dtype(
    [(name, "<i8") for name in (*INT_COLS, "_start", "_end")] + [(name, "<f8") for name in FLOAT_COLS]
)
# A packed row starts with its step number: the builder's last step is read from its rows,
# so a builder resumed from a sidecar knows it without keeping it apart.
assert INT_COLS[0] == "step"
ROW_STEP = struct.Struct("<q")
NO_STEP = -(1 << 63)  # before the first step: any number may come
# One packed row per runner record: step, pass (0 target, 1 draft), rows, cap, padded (-1: none).
RUNNER_ROW = struct.Struct("<5q")
RUNNER_DTYPE = np.dtype(
    [("step", "<i8"), ("pass", "<i8"), ("rows", "<i8"), ("cap", "<i8"), ("padded", "<i8")]
)
# A step's keys the per-request entry columns (tracer.trace.entries) are collected from.
ENTRY_KEYS = (
    "step",
    "inputs",
    "new",
    "resumed",
    "running",
    "sampled",
    "waiting_demand",
    "preempted",
    "finished",
    "context_tokens",
)
