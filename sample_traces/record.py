"""Re-record the offline sample traces with vLLM's real Scheduler (tracer.scheduler).

    .venv/bin/python sample_traces/record.py [FILE ...]      # the vLLM 0.32 samples
    .venv033/bin/python sample_traces/record.py [FILE ...]   # the vLLM 0.33 ones
    .venv/bin/python sample_traces/record.py live_cpu_ngram.jsonl   # a live CPU `vllm serve`

Each scenario in tracer.whatif.scenarios is driven through a tracing scheduler class
(tracer.scheduler, tracer.policies) with deterministic model outputs; see
sample_traces/README.md for what each shows.
"""

from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
# file -> (scenario, policy, vLLM minor version it must be recorded on)
SAMPLES: dict[str, tuple[str, str, str]] = {
    "dflash_k7_additive.jsonl": ("dflash_k7", "stock", "0.32"),
    "dflash_k7_cap.jsonl": ("dflash_k7", "stock", "0.33"),
    "dflash_k7_separate.jsonl": ("dflash_k7", "separate", "0.32"),
    "dspark_k4_additive.jsonl": ("dspark_k4", "stock", "0.32"),
    "dspark_k4_separate.jsonl": ("dspark_k4", "separate", "0.32"),
    "dflash_k7_draft_budget.jsonl": ("dflash_k7", "draft-budget", "0.32"),
    "dspark_k4_draft_budget.jsonl": ("dspark_k4", "draft-budget", "0.32"),
    "ngram_preempt.jsonl": ("ngram_preempt", "stock", "0.32"),
    "priority_preempt.jsonl": ("priority_preempt", "stock", "0.32"),
    "draft_model.jsonl": ("draft_model", "stock", "0.32"),
}


def record(scenario: str, policy: str, path: Path) -> Path:
    from tracer.policies import scheduler_class
    from tracer.whatif.offline import build_scheduler, run_workload
    from tracer.whatif.replay import recording_to
    from tracer.whatif.scenarios import SCENARIOS, mixed_accept

    spec, requests = SCENARIOS[scenario]
    with recording_to(path):
        sched = build_scheduler(spec, scheduler_class(policy))
        run_workload(sched, requests, accept=mixed_accept)
        sched.shutdown()
    return path


LIVE = "live_cpu_ngram.jsonl"
LIVE_PROMPTS = [
    "Hello world, hello scheduler, hello tracer, hello",
    "The quick brown fox jumps over the lazy dog. The quick brown fox",
    "One two three four five six seven eight nine ten",
    "Each request gets a number of tokens from the token budget.",
]


def record_live(path: Path) -> Path:
    """A real `vllm serve` on CPU (tiny local Llama), ngram K=3, 12 concurrent completions."""
    import json
    import tempfile

    from tests.live_support import build_tiny_llama, start_server

    spec = {"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_max": 3, "prompt_lookup_min": 1}
    args = [
        "--speculative-config", json.dumps(spec),
        "--scheduler-cls", "tracer.scheduler.TracingScheduler",
        "--max-num-batched-tokens", "128", "--max-num-seqs", "8", "--shutdown-timeout", "10",
        "--served-model-name", "tiny",
    ]  # fmt: skip
    with tempfile.TemporaryDirectory(prefix="schedscope-live-") as tmp:
        model = build_tiny_llama(Path(tmp) / "tiny")
        env = {"SCHEDSCOPE_TRACE": str(path)}
        with start_server(model, extra_args=args, env=env, log_path=Path(tmp) / "server.log") as server:
            server.model = "tiny"
            prompts = [LIVE_PROMPTS[i % len(LIVE_PROMPTS)] + f" {i}" for i in range(12)]
            server.complete_many(prompts, 32, concurrency=12, ignore_eos=True)
    return path


if __name__ == "__main__":
    sys.path.insert(0, str(HERE.parent))
    import vllm

    version = ".".join(vllm.__version__.split(".")[:2])
    for name in sys.argv[1:] or SAMPLES:
        if name == LIVE:
            print(record_live(HERE / name))
            continue
        scenario, policy, needs = SAMPLES[name]
        if needs == version:
            print(record(scenario, policy, HERE / name))
        elif sys.argv[1:]:
            print(f"{name}: needs vLLM {needs}, this is {vllm.__version__}; skipped")
