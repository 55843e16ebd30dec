"""What each speculative-decoding method asks of the input buffers.

Shared-buffer methods put their draft rows into the target pass (additive
reservation is right). Separate-pass methods run their query rows in a second,
sequential forward with its own buffer, so reserving them against the target
budget is a double reservation.
"""

from __future__ import annotations

from typing import Any, Final

SEPARATE_PASS_METHODS: Final = frozenset({"dflash", "dspark"})


def is_separate_pass(method: str | None) -> bool:
    return method in SEPARATE_PASS_METHODS


def query_rows_per_request(
    method: str | None, num_spec_tokens: int, *, sample_from_anchor: bool = True
) -> int:
    """Rows each request needs in a separate drafter pass; 0 for shared-buffer methods.

    DFlash queries a bonus token plus K masks (K+1). DSpark samples from the anchor
    by default (K rows); its fill-in layout needs K+1.
    """
    if method == "dflash":
        return num_spec_tokens + 1
    if method == "dspark":
        return num_spec_tokens if sample_from_anchor else num_spec_tokens + 1
    return 0


def query_rows_of(spec: Any) -> int:
    """`query_rows_per_request` for a vLLM SpeculativeConfig (None: no speculation), the
    layout read from its draft model's config as vLLM reads it."""
    if spec is None:
        return 0
    k = int(getattr(spec, "num_speculative_tokens", 0) or 0)
    draft_hf = getattr(getattr(spec, "draft_model_config", None), "hf_config", None)
    anchor = bool(getattr(draft_hf, "sample_from_anchor", True))
    return query_rows_per_request(getattr(spec, "method", None), k, sample_from_anchor=anchor)


def additive_draft_slots(method: str | None, k: int, parallel: bool) -> int:
    """vLLM 0.32's per-request draft slots (SpeculativeConfig.max_num_new_slots_for_drafting)."""
    if method == "dflash":
        return k
    if parallel:
        return k if method == "draft_model" else k - 1  # PARD; P-EAGLE and DSpark
    return 1 if method == "draft_model" else 0


def shared_draft_slots(method: str | None, k: int, parallel: bool) -> int:
    """The slots a method needs in the target pass: 0 for separate-pass methods
    (vLLM 0.33's rule and the separate-budget fix), else the additive ones."""
    return 0 if is_separate_pass(method) else additive_draft_slots(method, k, parallel)
