"""Why: the constraint that ended each step's admission, and each request's reason.

Every reason is decided from what `schedule()` saw, in the order its loops test them
(tracer.analysis.reasons lists the codes):

- the running loop schedules running requests in queue order, each clipped to
  `min(demand, long-prefill threshold, token budget left, input budget left - draft slots)`;
- the waiting loop runs only when nothing was preempted and the scheduler is not paused; it
  stops when the token budget is spent, when `input budget <= draft slots`, when the running
  count reaches the admission cap (`max_num_seqs`, or 0.33's `B // lookahead` for
  DFlash/DSpark), or at the head request: its padded 1 + K rows do not fit, chunked prefill
  is off and its prompt does not fit, or its KV allocation fails. A request in a WAITING_FOR_*
  state (grammar, remote KV, streaming input) is skipped and the loop goes on.
- Behind a break, every request waits behind the head (FCFS and priority queues alike).

A step's facts come from its record: the budgets left after the step, the running count,
the waiting list (queue order), and since format 1.3 the free KV blocks before and after,
the skipped requests' states, the prefix-cache hits of admitted requests and each
preemption's victim, trigger and lost work. Where those facts decide, a reason is `exact`
(`derived` in an older trace, from the fields it has); where they only narrow it, it is
`likely` with the alternatives; `schedscope why --exact` then settles it on vLLM's real
scheduler (tracer.whatif.probe).
"""

from __future__ import annotations

import dataclasses
import math
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, NamedTuple

import numpy as np

from tracer.analysis import detail
from tracer.analysis.reasons import (
    DERIVED,
    EXACT,
    LIKELY,
    SKIP_STATUS,
    UNKNOWN,
)
from tracer.analysis.requests import request_index
from tracer.trace.trace_type import Trace


class Detail(Enum):
    """What a cause's `why` number says when no other number does: a fact, which
    tracer.render.why words (`why --json` carries the words)."""

    NOTHING_WAITING = "nothing_waiting"  # "none": no request was waiting
    NONE_LISTED = "none_listed"  # "unknown": requests waited, the record lists none of them
    AT_PREEMPTION = "at_preemption"  # "kv_blocks" (likely): the running loop ended at a preemption


@dataclass(frozen=True)
class Cause:
    """One reason, how sure it is, and the numbers behind it."""

    code: str
    certainty: str
    numbers: dict[str, Any] = field(default_factory=dict)
    alternatives: tuple[str, ...] = ()  # when `likely`: the other codes the trace allows
    behind: str | None = None  # for `behind`: the head request

    @property
    def root(self) -> str:
        """The constraint itself: for `behind`, the head's."""
        return str(self.numbers.get("root", self.code)) if self.code == "behind" else self.code

    def as_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"reason": self.code, "certainty": self.certainty, **self.numbers}
        if self.alternatives:
            out["alternatives"] = list(self.alternatives)
        if self.behind is not None:
            out["behind"] = self.behind
        return out


@dataclass(frozen=True)
class RequestWhy:
    """A request of one step that did not get all it needed: waiting, clipped or unscheduled."""

    id: str
    state: str  # "waiting", "clipped" (scheduled below its demand) or "unscheduled" (running, none)
    demand: int
    tokens: int
    cause: Cause

    def as_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "state": self.state,
            "demand": self.demand,
            "tokens": self.tokens,
            **self.cause.as_dict(),
        }


@dataclass(frozen=True)
class PreemptionWhy:
    victim: str
    trigger: str | None  # whose KV allocation failed (the victim itself: nothing else to evict)
    policy: str  # "fcfs" (the newest running request is evicted) or "priority"
    lost: int | None  # computed tokens dropped
    kv_before: float | None  # KV usage before and after the eviction
    kv_after: float | None
    certainty: str
    resumed_step: int | None = None
    steps_until_resumed: int | None = None
    recomputed: int | None = None  # tokens spent re-computing the lost work after it resumed
    cached_on_resume: int | None = None  # of the lost work, found again in the prefix cache
    looked_for_resume: bool = False  # whether the fields above were looked for (resume_cost)

    def as_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


@dataclass(frozen=True)
class StepWhy:
    step: int
    row: int
    binding: Cause  # what ended admission (or "none")
    requests: list[RequestWhy]  # waiting (queue order), then clipped and unscheduled running
    unlisted: int  # waiting requests the trace does not list (beyond schema.WAITING_DEMAND_LIMIT)
    preemptions: list[PreemptionWhy]
    facts: dict[str, Any]  # what the reasons were decided from

    @property
    def waiting(self) -> list[RequestWhy]:
        return [r for r in self.requests if r.state == "waiting"]

    def as_dict(self) -> dict[str, Any]:
        return {
            "step": self.step,
            "binding": self.binding.as_dict(),
            "requests": [r.as_dict() for r in self.requests],
            "unlisted_waiting": self.unlisted,
            "preemptions": [p.as_dict() for p in self.preemptions],
            "facts": self.facts,
        }


def has_why_fields(trace: Trace) -> bool:
    """Whether the trace records the 1.3 facts (else its reasons are `derived` at best)."""
    version = trace.schema_version  # read from the header once, at load
    return version is not None and version >= (1, 3)


class Config:
    """The header config a reason needs, typed once."""

    def __init__(self, trace: Trace) -> None:
        cfg = trace.config
        self.cfg = cfg
        self.exact = EXACT if has_why_fields(trace) else DERIVED
        self.draft_slots = int(cfg.get("draft_slots") or 0)
        self.seqs = cfg.get("max_num_seqs")
        self.active = cfg.get("max_num_active_seqs") or self.seqs
        self.k = int(cfg.get("num_speculative_tokens") or 0)
        self.lookahead = int(cfg.get("num_lookahead_tokens") or 0)
        self.block = cfg.get("block_size")
        self.blocks = cfg.get("num_kv_blocks")
        self.threshold = int(cfg.get("long_prefill_token_threshold") or 0)
        self.adaptive = cfg.get("adaptive_long_prefill_threshold")
        self.input_cap = int(cfg.get("max_num_batched_tokens") or 0)
        # The draft-budget policy's per-step budget of drafter rows, q of them per scheduled request.
        self.q = int(cfg.get("query_rows_per_req") or 0)
        self.draft_budget = int(cfg.get("draft_budget") or 0) if self.q else 0
        self.chunked = cfg.get("enable_chunked_prefill")
        self.padding = cfg.get("spec_padding")
        self.loras = cfg.get("max_loras")
        self.connector = cfg.get("kv_connector")
        self.encoder = cfg.get("max_num_encoder_input_tokens")
        self.policy = str(cfg.get("scheduling_policy") or "fcfs")
        self.async_ = bool(cfg.get("async_scheduling"))
        self.max_model_len = cfg.get("max_model_len")
        # 1.4: how the waiting loop's allocation admits (None: unknown, an older trace).
        self.full_isl = cfg.get("scheduler_reserve_full_isl")
        self.watermark = cfg.get("kv_watermark_blocks")
        if self.watermark is None and cfg.get("kv_watermark") is not None and self.blocks:
            self.watermark = int(float(cfg["kv_watermark"]) * int(self.blocks))  # as vLLM sizes it

    def draft_left(self, rec: dict[str, Any]) -> int | None:
        """The draft-input budget left after the step (None: this policy keeps none)."""
        if not self.draft_budget:
            return None
        return self.draft_budget - int((rec.get("query") or {}).get("rows") or 0)

    def cap_code(self) -> str:
        if self.active and self.seqs and self.active < self.seqs:
            return "max_num_active_seqs"
        return "max_num_seqs"

    def usage(self, free: int | None) -> float | None:
        if free is None or not self.blocks:
            return None
        return round(1.0 - free / int(self.blocks), 6)


# -- one step ---------------------------------------------------------------------------------
def step_why(
    trace: Trace,
    row: int,
    rec: dict[str, Any] | None = None,
    *,
    config: Config | None = None,
    resume_costs: bool = True,
) -> StepWhy:
    """The reasons of one step (row), from its record; with `resume_costs`, each preemption's
    cost later too (it reads the victim's later steps)."""
    cfg = config or Config(trace)
    rec = rec if rec is not None else trace.step(row)
    binding, head = admission(rec, cfg)
    requests = _waiting(rec, binding, head, cfg) + _running(rec, cfg)
    listed = len(rec.get("waiting_demand") or ())
    step = int(rec["step"])
    preemptions = _preemptions(rec, cfg)
    if resume_costs:
        preemptions = [resume_cost(trace, p, step) for p in preemptions]
    facts = {
        "target_left": rec["target"]["left"],
        "input_left": rec["input"]["left"],
        "input_reserved": rec["input"].get("reserved", 0),
        "draft_slots": cfg.draft_slots,
        "num_running": rec.get("num_running", 0),
        "num_waiting": rec.get("num_waiting", 0),
        "admission_cap": cfg.active,
        "kv_free": rec.get("kv_free"),
        "kv_usage": rec.get("kv_usage"),
    }
    return StepWhy(
        step=step,
        row=row,
        binding=binding,
        requests=requests,
        unlisted=int(rec.get("waiting_demand_truncated") or 0) if listed else 0,
        preemptions=preemptions,
        facts=facts,
    )


def _skip_code(status: str) -> str:
    return SKIP_STATUS.get(status, "unknown")


def admission(rec: dict[str, Any], cfg: Config, scheduled: bool | None = None) -> tuple[Cause, str | None]:
    """What ended the waiting loop, and the head request it ended at (None if none);
    `scheduled`: whether the step scheduled any request (read from the record when None)."""
    exact = cfg.exact
    listed = rec.get("waiting_demand") or []
    statuses = rec.get("waiting_status") or {}
    waiting = max(0, int(rec.get("num_waiting") or 0) - len(rec.get("preempted") or ()))
    if not listed and not waiting:
        return Cause("none", exact, {"why": Detail.NOTHING_WAITING}), None
    if rec.get("preempted"):
        preempted = len(rec["preempted"])
        # Had the victims kept running, would the admission cap have stopped the loop too?
        kept = int(rec.get("num_running") or 0) + preempted
        also = {"also": [cfg.cap_code()]} if cfg.active and kept >= cfg.active else {}
        return Cause("preemption", exact, {"preempted": preempted, **also}), None
    if rec.get("paused"):
        return Cause("paused", EXACT, {"state": rec["paused"]}), None
    target, inp = rec["target"], rec["input"]
    running = int(rec.get("num_running") or 0)
    # The loop's next test would have stopped it too: the admission cap binds as well (under
    # 0.33's DFlash/DSpark cap, B // lookahead decoders fill the budget exactly).
    also_codes = [cfg.cap_code()] if cfg.active and running >= cfg.active else []
    kv_too = _kv_binds_too(rec, cfg, statuses)
    if kv_too:
        also_codes.append("kv_blocks")
    also = {"also": also_codes} if also_codes else {}
    if target["left"] <= 0:
        return Cause("target_budget", exact, {"cap": target["cap"], "used": target["used"], **also}), None
    ds = cfg.draft_slots
    if inp["left"] <= ds:
        numbers = {
            "cap": inp["cap"],
            "left": inp["left"],
            "draft_slots": ds,
            "reserved": inp.get("reserved", 0),
            **also,
        }
        return Cause("input_budget", exact, numbers), None
    draft_left = cfg.draft_left(rec)
    if draft_left is not None and draft_left < cfg.q:
        numbers = {"cap": cfg.draft_budget, "left": draft_left, "rows_per_request": cfg.q, **also}
        return Cause("draft_budget", exact, numbers), None
    if cfg.active and running >= cfg.active:
        numbers = {
            "cap": int(cfg.active),
            "running": running,
            "target_left": target["left"],
            "target_cap": target["cap"],
            "kv_usage": rec.get("kv_usage"),
            # The head's blocks would not have fitted either, had the cap let it through.
            **({"also": ["kv_blocks"]} if kv_too else {}),
        }
        return Cause(cfg.cap_code(), exact, numbers), None
    # The loop reached a request: the first listed one not skipped for its state.
    head = next((e for e in listed if e[0] not in statuses), None)
    if head is None:
        if listed:  # every listed request was skipped for its state
            codes = sorted({_skip_code(statuses[e[0]]) for e in listed})
            return Cause(codes[0], EXACT, {"skipped": len(listed)}), None
        return Cause("unknown", UNKNOWN, {"why": Detail.NONE_LISTED}), None
    if scheduled is None:
        scheduled = bool(rec["new"] or rec["resumed"] or rec["running"])
    return _head_cause(rec, cfg, head[0], int(head[1]), scheduled), head[0]


def _kv_binds_too(rec: dict[str, Any], cfg: Config, statuses: dict[str, str]) -> bool:
    """Whether the KV cache would have stopped the head request too, had the budget lasted: the
    free blocks after the step are fewer than it needs at the least (one, for a request with
    nothing computed; with prefix caching off, its whole chunk's blocks). Only 1.3 says."""
    kv_free = rec.get("kv_free")
    head = next((e for e in rec.get("waiting_demand") or () if e[0] not in statuses), None)
    if not kv_free or head is None or not cfg.block or cfg.connector:
        return False  # a connector's KV-holding requests may need no new block
    need = 1
    if cfg.cfg.get("enable_prefix_caching") is False:
        need = math.ceil((int(head[1]) + cfg.lookahead) / cfg.block)
    if int(rec.get("num_running") or 0):  # the watermark's blocks stay free beside it
        need += int(cfg.watermark or 0)
    return int(kv_free[1]) < need


def kv_need(cfg: Config, demand: int, room: int, running: int) -> dict[str, Any]:
    """The most KV blocks the head request's `allocate_slots` can ask for, counted as vLLM
    counts them (kv_cache_manager.py, 0.31-0.34): its first chunk's blocks with the lookahead
    slots; with `scheduler_reserve_full_isl`, the whole prompt's (`min(num_tokens,
    max_model_len)`, checked first); plus, while any request runs, the watermark's blocks,
    which must stay free. A prefix-cache hit can only lower it, but a hit that ends inside a
    block costs one block more (copy-on-write): one more where prefix caching may be on. The
    head waits with its whole prompt still to compute, so its demand is `num_tokens`."""
    block = int(cfg.block)
    longest = int(cfg.max_model_len) if cfg.max_model_len else demand + cfg.lookahead
    partial = 0 if cfg.cfg.get("enable_prefix_caching") is False else 1
    chunk = max(1, min(demand, room))
    most = math.ceil(min(chunk + cfg.lookahead, longest) / block) + partial
    out: dict[str, Any] = {"kv_chunk_blocks": most}
    if cfg.full_isl is not False:  # vLLM's default, and an older trace's likely setting
        out["kv_prompt_blocks"] = math.ceil(min(demand, longest) / block) + partial
        out["reserve_full_isl"] = cfg.full_isl
        out["prefix_hit_possible"] = bool(partial)  # else the prompt's count is exact
        most = max(most, out["kv_prompt_blocks"])
    watermark = int(cfg.watermark or 0) if running else 0
    if watermark:
        out["kv_watermark_blocks"] = watermark
    out["kv_needed_at_most"] = most + watermark
    return out


def _head_cause(rec: dict[str, Any], cfg: Config, rid: str, demand: int, scheduled: bool) -> Cause:
    """Why the loop stopped at the head request, budgets and caps having room."""
    target, inp = rec["target"], rec["input"]
    room = min(target["left"], inp["left"] - cfg.draft_slots)
    numbers: dict[str, Any] = {"request": rid, "demand": demand, "room": room}
    kv_free = rec.get("kv_free")
    # The free blocks at the head's turn: the loop stopped there, so none moved after it.
    free_after = kv_free[1] if kv_free else None
    need = kv_need(cfg, demand, room, int(rec.get("num_running") or 0)) if cfg.block else {}
    need_max = need.get("kv_needed_at_most")
    kv_ruled_out = free_after is not None and need_max is not None and free_after >= need_max
    # Only the whole prompt's reservation keeps the KV cache in, and the trace does not say
    # whether vLLM made it (a trace before 1.4): likely, not exact.
    chunk_only = need.get("kv_chunk_blocks", 0) + need.get("kv_watermark_blocks", 0)
    prompt_unsure = (
        cfg.full_isl is None and free_after is not None and bool(need) and free_after >= chunk_only
    )
    alternatives: list[str] = []
    padded = cfg.padding is not False and cfg.k > 0 and demand == 1 and scheduled
    if padded and 1 + cfg.k > room:
        numbers["padded_rows"] = 1 + cfg.k
        # vLLM pads only when no prefill chunk is in the step; the trace cannot tell a prefill
        # chunk from a decode for certain, so the KV cache stays an alternative unless ruled out.
        if kv_ruled_out:
            return Cause("spec_padding", cfg.exact if cfg.padding else LIKELY, numbers)
        alternatives.append("spec_padding")
    if cfg.chunked is False and demand > room:
        if kv_ruled_out and not rec.get("cached"):
            return Cause("chunked_prefill_off", cfg.exact, numbers)
        alternatives.append("chunked_prefill_off")
    others = [code for code, on in (("lora_limit", cfg.loras), ("remote_kv", cfg.connector)) if on]
    if cfg.encoder:
        others.append("encoder_budget")
    if cfg.chunked is None:
        others.append("chunked_prefill_off")
    if kv_ruled_out:
        numbers.update(kv_free=free_after, **need)
        # A trace before 1.4 does not say the watermark, which can hold any count of blocks.
        unsaid = ["kv_blocks"] if cfg.watermark is None else []
        rest = alternatives + others + unsaid + ["encoder_budget", "deferred"]
        return Cause("unknown", UNKNOWN, numbers, tuple(rest))
    if free_after is not None:
        numbers.update(kv_free=free_after, **need)
    else:
        numbers["kv_usage"] = rec.get("kv_usage")
    if alternatives:
        # vLLM tests padding and chunked prefill before it allocates: where the trace shows one
        # of them failing, it is the likelier reason (probes on real runs agree), KV the other.
        return Cause(
            alternatives[0], LIKELY, numbers, tuple(dict.fromkeys([*alternatives[1:], "kv_blocks", *others]))
        )
    if free_after is not None and not prompt_unsure:
        return Cause("kv_blocks", LIKELY if others else EXACT, numbers, tuple(others))
    return Cause("kv_blocks", LIKELY, numbers, tuple(dict.fromkeys([*others, "unknown"])))


def _waiting(rec: dict[str, Any], binding: Cause, head: str | None, cfg: Config) -> list[RequestWhy]:
    statuses = rec.get("waiting_status") or {}
    out = []
    for rid, demand in rec.get("waiting_demand") or ():
        if rid in statuses:
            cause = Cause(_skip_code(statuses[rid]), EXACT, {"status": statuses[rid]})
        elif head is not None and rid != head:
            cause = Cause("behind", binding.certainty, {"root": binding.code}, behind=head)
        else:
            cause = binding
        out.append(RequestWhy(rid, "waiting", int(demand), 0, cause))
    return out


def _running(rec: dict[str, Any], cfg: Config) -> list[RequestWhy]:
    """Scheduled requests clipped below their demand, and running ones not scheduled at all."""
    target, inp = rec["target"], rec["input"]
    t_left, i_left, ds = target["cap"], inp["cap"], cfg.draft_slots
    cached = rec.get("cached") or {}
    eligible = (
        len(rec["new"]) + len(rec["resumed"]) + len(rec["running"]) + len(rec.get("unscheduled") or ())
        + len(rec.get("waiting_demand") or ()) + int(rec.get("waiting_demand_truncated") or 0)
    )  # fmt: skip
    threshold = cfg.threshold if eligible > 1 else 0
    adaptive_unknown = threshold and cfg.adaptive is None
    if threshold and cfg.adaptive:
        threshold = max(threshold, cfg.input_cap // max(1, eligible))
    out: list[RequestWhy] = []
    # vLLM's order: the running loop, then the waiting loop (resumed and new admissions).
    unrecorded_hits = cfg.exact != EXACT and cfg.cfg.get("enable_prefix_caching") is not False and cfg.block
    for group in ("running", "resumed", "new"):
        for rid, tokens, _spec, demand in rec[group]:
            if group != "running":
                demand = demand - cached.get(rid, 0) if demand >= 0 else demand
            room_t, room_i = t_left, i_left - ds
            t_left -= tokens
            i_left -= tokens + ds
            if demand < 0 or tokens >= demand:
                continue
            # A trace before 1.3 does not record prefix-cache hits: whole blocks short of the
            # prompt with room left is a hit, not a clip (a 1.3 trace says so exactly).
            short = demand - tokens
            if (
                group != "running"
                and unrecorded_hits
                and short % cfg.block == 0
                and tokens < min(room_t, room_i)
            ):
                continue
            numbers = {"group": group, "withheld": demand - tokens}
            exact = cfg.exact if group == "running" or cfg.exact == EXACT else LIKELY
            if threshold and tokens == threshold and threshold < min(room_t, room_i):
                cause = Cause(
                    "long_prefill", LIKELY if adaptive_unknown else exact, {**numbers, "threshold": threshold}
                )
            elif tokens == room_t:
                cause = Cause("target_budget", exact, {**numbers, "taken_ahead": target["cap"] - room_t})
            elif tokens == room_i:
                ahead = inp["cap"] - (room_i + ds)
                cause = Cause("input_budget", exact, {**numbers, "taken_ahead": ahead, "reserved": ds})
            else:
                alternatives = ("max_model_len", "encoder_budget", "deferred")
                if group != "running" and cfg.exact != EXACT:
                    alternatives = ("unknown", *alternatives)  # the prefix-cache hit is not recorded
                cause = Cause(alternatives[0], LIKELY, numbers, alternatives[1:])
            out.append(RequestWhy(rid, "clipped", int(demand), int(tokens), cause))
    # Running requests left out: the loop ended on a spent budget, or skipped them.
    draft_left = cfg.draft_left(rec)
    draft_spent = draft_left is not None and draft_left < cfg.q
    spent = target["left"] <= 0 or inp["left"] <= ds or draft_spent
    gone = set(rec.get("preempted") or ())
    for rid, demand in rec.get("unscheduled") or ():
        if rid in gone:
            continue
        if spent:
            code = (
                "target_budget"
                if target["left"] <= 0
                else "input_budget"
                if inp["left"] <= ds
                else "draft_budget"
            )
            certainty = LIKELY if cfg.async_ else cfg.exact
            cause = Cause(code, certainty, {}, ("async_done",) if cfg.async_ else ())
        elif cfg.async_:
            cause = Cause("async_done", LIKELY, {}, ("encoder_budget", "deferred"))
        elif rec.get("preempted"):
            cause = Cause("kv_blocks", LIKELY, {"why": Detail.AT_PREEMPTION}, ("encoder_budget",))
        else:
            cause = Cause("unknown", UNKNOWN, {}, ("encoder_budget", "deferred", "max_model_len"))
        out.append(RequestWhy(rid, "unscheduled", int(demand), 0, cause))
    return out


def _preemptions(rec: dict[str, Any], cfg: Config) -> list[PreemptionWhy]:
    recorded = rec.get("preemptions")
    if recorded:
        return [
            PreemptionWhy(
                victim=victim,
                trigger=trigger,
                policy=cfg.policy,
                lost=int(lost),
                kv_before=cfg.usage(before),
                kv_after=cfg.usage(after),
                certainty=EXACT if trigger is not None else LIKELY,
            )
            for victim, trigger, lost, before, after in recorded
        ]
    return [
        PreemptionWhy(victim, None, cfg.policy, None, None, rec.get("kv_usage"), UNKNOWN)
        for victim in rec.get("preempted") or ()
    ]


TRIGGERS = ("kv_blocks", "priority", "self", "unknown")


def trigger_kind(p: PreemptionWhy) -> str:
    """What pushed a request out, as a label: another request's KV allocation failed (FCFS
    evicts the newest), the same under priority scheduling (the lowest priority is evicted),
    the victim's own allocation (nothing else to evict), or not recorded."""
    if p.trigger is None:
        return "unknown"
    if p.trigger == p.victim:
        return "self"
    return "priority" if p.policy == "priority" else "kv_blocks"


def preemption_triggers(trace: Trace) -> Counter[str]:
    """Preemptions by trigger kind over a whole trace (only the preempting steps are parsed)."""
    cfg = Config(trace)
    out: Counter[str] = Counter()
    for _, rec in detail.records(trace, np.flatnonzero(trace.columns["n_preempted"] > 0)):
        out.update(trigger_kind(p) for p in _preemptions(rec, cfg))
    return out


# -- a preemption's cost later ---------------------------------------------------------------
class LaterStep(NamedTuple):
    """What a preemption's cost reads of one step naming its victim."""

    step: int
    cached: int  # the victim's prefix-cache hit
    preempted: bool
    tokens: int  # scheduled to the victim as a resumed or running request


def later_step(rec: dict[str, Any], rid: str) -> LaterStep:
    groups = (rec.get("resumed") or [], rec.get("running") or [])
    return LaterStep(
        int(rec.get("step", -1)),  # a region of a record (resume_cost) holds no step
        int((rec.get("cached") or {}).get(rid, 0)),
        rid in (rec.get("preempted") or ()),
        next((e[1] for g in groups for e in g if e[0] == rid), 0),
    )


def recomputed_tokens(owed: int, later: Iterable[LaterStep]) -> int:
    """The tokens spent re-computing `owed` lost tokens over the steps from the resumption
    on, until caught up or preempted again."""
    spent = 0
    if owed <= 0:
        return spent
    for s in later:
        if s.preempted and spent:
            break
        spent += min(s.tokens, owed - spent)
        if spent >= owed:
            break
    return spent


RESUME_WINDOW = 16  # records read at a time while following a victim after it resumed


def resume_cost(trace: Trace, p: PreemptionWhy, step: int) -> PreemptionWhy:
    """A preemption's cost later: the steps until the victim resumed, and the tokens spent
    re-computing its lost work (what the prefix cache gave back on resume aside). Reads only
    the scheduled groups of the victim's steps from its resumption until it caught up."""
    looked = dataclasses.replace(p, looked_for_resume=True)
    events = request_index(trace).events.get(p.victim)
    resumed = next((s for s in events.resumed if s > step), None) if events is not None else None
    if resumed is None:
        return looked
    row = int(detail.rows_of_steps(trace, [resumed])[0])
    if row < 0:
        return looked
    cached = None
    if has_why_fields(trace):
        fact = next(detail.region(trace, [row], "cached", "waiting_status"))[1]
        cached = int((fact.get("cached") or {}).get(p.victim, 0))
    owed = None if p.lost is None else max(0, p.lost - (cached or 0))

    def later(row: int) -> Iterator[LaterStep]:  # read a window at a time, until caught up
        while row < len(trace):
            window = range(row, min(row + RESUME_WINDOW, len(trace)))
            for _, rec in detail.region(trace, window, "resumed", "finished", batch=RESUME_WINDOW):
                yield later_step(rec, p.victim)
            row = window.stop

    spent = 0 if owed is None else recomputed_tokens(owed, later(row))
    return dataclasses.replace(
        looked,
        resumed_step=resumed,
        steps_until_resumed=resumed - step,
        recomputed=spent if owed is not None else None,
        cached_on_resume=cached,
    )


def steps_why(trace: Trace, rows: Iterable[int]) -> list[StepWhy]:
    cfg = Config(trace)
    return [step_why(trace, row, rec, config=cfg) for row, rec in detail.records(trace, rows)]
