"""Each built-in command's arguments and help, one function per command, in the order
`schedscope --help` lists them (tracer.cli adds them under its top-level parser)."""

from __future__ import annotations

import argparse

from tracer.commands.export import cmd_export
from tracer.commands.live import cmd_attach, cmd_serve
from tracer.commands.reading import (
    cmd_diff,
    cmd_doctor,
    cmd_flags,
    cmd_step,
    cmd_summary,
    cmd_timing,
    cmd_why,
)
from tracer.commands.whatif import cmd_replay, cmd_sweep


def add_commands(sub: argparse._SubParsersAction) -> None:
    """Every built-in command, under `schedscope`'s subparsers."""
    for add in (
        _summary,
        _step,
        _flags,
        _why,
        _timing,
        _diff,
        _replay,
        _sweep,
        _doctor,
        _export,
        _attach,
        _serve,
    ):
        add(sub)


def _trace_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("trace", help="trace file (.jsonl, .jsonl.gz)")
    p.add_argument("--lenient", action="store_true", help="skip malformed lines (listed) instead of stopping")


def _traces_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "traces",
        nargs="+",
        metavar="TRACE",
        help="trace file (.jsonl, .jsonl.gz); with data parallelism, every engine's trace of the run",
    )
    p.add_argument("--lenient", action="store_true", help="skip malformed lines (listed) instead of stopping")


def _summary(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("summary", help="engine config, totals and a per-step budget table")
    _traces_arg(p)
    p.add_argument("--first", type=int, default=0, help="first table row (0-based, default 0)")
    p.add_argument("--limit", type=int, default=40, help="table rows to print; 0 prints all (default 40)")
    p.set_defaults(func=cmd_summary)


def _step(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("step", help="print one step's full record as JSON")
    _trace_arg(p)
    p.add_argument("step", type=int, help="step index as recorded")
    p.set_defaults(func=cmd_step)


def _flags(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("flags", help="accounting faults, each with the tokens it cost and what to do")
    _traces_arg(p)
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.add_argument("--kind", action="append", help="only this kind (repeatable)")
    p.set_defaults(func=cmd_flags)


def _why(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "why",
        help="why a request waited, was clipped or preempted; or what bound one step",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description="""\
Explains the scheduler's decisions from the trace, in the order vLLM's schedule()
makes them: the running loop's clips (long-prefill threshold, target budget, input
budget after draft-slot reservations), then the waiting loop's breaks (budgets,
the admission cap max_num_seqs or max_num_active_seqs, padded admissions, chunked
prefill off, KV blocks) and skips (grammar, remote KV, streaming input, LoRA).

  schedscope why TRACE REQUEST_ID     the request's life, step by step, with its
                                      reasons; waiting time by reason; TTFT split
                                      into waiting, prefill steps and first token
  schedscope why TRACE --step N       what ended admission in step N, and every
                                      listed request's reason

Each reason is marked: exact (decided by what the trace recorded), derived (the
same rule on an older trace's fields), likely (the trace narrows it, with the
alternatives) or unknown. --exact settles the rest by replaying the trace through
vLLM's real scheduler and relaxing one constraint at a time (needs vLLM).
What each reason means and what to change: docs/why.md""",
    )
    _trace_arg(p)
    p.add_argument("request", nargs="?", help="a request id (as the trace names it)")
    p.add_argument("--step", type=int, help="explain this step (as recorded) instead of a request")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.add_argument(
        "--exact",
        action="store_true",
        help="settle 'likely' reasons on vLLM's real scheduler (replays the trace; for a request, "
        "at most its first 200 held-back steps are probed)",
    )
    p.set_defaults(func=cmd_why)


def _timing(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "timing",
        help="fit a step-time model from the trace's timestamps; measured tok/s, TTFT, TPOT",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description="""\
Fits each step's wall duration (from its schedule() call to the next; idle gaps,
empty steps and stalls left out) as a sum of named costs in ms: per step, per
prefill token, per decode token, per scheduled request, per finished request,
per KV-context token, per drafter query row. Terms the trace cannot tell apart
are dropped, and the output says why.

Prints the model, its error on held-out steps (every 5th usable step; median and
p90 absolute percentage error), the measured throughput (prompt tok/s during
prefill, output tok/s, target steps/s) and TTFT / TPOT percentiles per request.
Refuses to fit, saying why, with fewer than 20 usable steps.

exit status: 0; 1 when the model was refused (the measurements are still
printed); 2 for an unreadable trace. How time is modelled: docs/what-if.md

--client RESULT.json takes `vllm bench serve --save-detailed --save-result`'s
file for the same run (a client on the server's host) and splits each request's
client TTFT into its time before vLLM stamped its arrival, the trace's TTFT from
arrival, and the way back to the client.""",
    )
    _trace_arg(p)
    p.add_argument("--json", action="store_true", help="machine-readable output (model, errors, throughput)")
    p.add_argument(
        "--client",
        metavar="RESULT.json",
        help="a `vllm bench serve --save-detailed` result of this run: split its TTFT against the trace's",
    )
    p.add_argument(
        "--client-prefix",
        metavar="PREFIX",
        help="that run's --request-id-prefix, when the trace holds several bench runs",
    )
    p.set_defaults(func=cmd_timing)


def _diff(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("diff", help="compare two traces (two runs or two policies) step by step")
    p.add_argument("trace_a", help="baseline trace (A)")
    p.add_argument("trace_b", help="candidate trace (B)")
    p.add_argument("--rows", type=int, default=20, help="differing steps to list (default 20)")
    p.add_argument("--lenient", action="store_true", help="skip malformed lines instead of stopping")
    p.set_defaults(func=cmd_diff)


def _replay(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "replay",
        help="what-if: re-run a trace's workload through vLLM's real scheduler under a policy",
        description="Re-runs a trace's workload (or a JSON/YAML workload file) through vLLM's real "
        "Scheduler, deterministically, under POLICY, giving the scheduler the recorded inputs "
        "(arrivals, aborts, drafts offered, model outputs) in their recorded order. Under the "
        "recorded policy it re-makes the run step for step; --check proves it. Needs vLLM.",
    )
    p.add_argument("source", help="a trace (.jsonl[.gz]) or a workload file (.json/.yaml)")
    p.add_argument(
        "--policy",
        choices=["stock", "additive", "cap", "separate", "draft-budget"],
        help="policy to replay under (default: the one the trace was recorded with)",
    )
    p.add_argument("-o", "--output", help="trace to write")
    p.add_argument(
        "--check",
        action="store_true",
        help="replay under the recorded policy and report how far it is from the recording "
        "(exits 1 unless every step is identical)",
    )
    p.add_argument(
        "--no-identity",
        action="store_true",
        help="skip the identity replay whose error the output's header keeps for diff",
    )
    p.add_argument(
        "--timed",
        action="store_true",
        help="price each step with the step-time model fitted on TRACE (its measured median step when "
        "too short to fit) and write the predicted time into each step's t",
    )
    p.add_argument(
        "--arrivals",
        choices=["step", "time"],
        default="step",
        help="requests arrive before their recorded step (default) or at their recorded time on the "
        "predicted clock (implies --timed; needs wall-clock arrival times, i.e. a live recording)",
    )
    p.add_argument("--max-num-batched-tokens", type=int, help="override B")
    p.add_argument("--num-speculative-tokens", type=int, help="override K")
    p.add_argument("--method", help="override the spec method (ngram, draft_model, dflash, dspark)")
    p.add_argument("--max-num-seqs", type=int)
    p.add_argument("--scheduling-policy", choices=["fcfs", "priority"])
    p.add_argument("--num-kv-blocks", type=int, help="KV cache size in blocks")
    p.add_argument(
        "--python",
        metavar="PYTHON",
        help="replay through the vLLM of another environment: its interpreter runs this command "
        "(with this schedscope's code), e.g. .venv034/bin/python; `diff` the outputs to see which "
        "release changed a decision (docs/versions.md)",
    )
    p.set_defaults(func=cmd_replay)


def _sweep(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "sweep",
        help="budget advisor: replay a trace's workload over a grid of settings, ranked by an objective",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description="""\
Replays TRACE's workload through vLLM's real Scheduler once per setting of the
grid (the product of the comma-separated lists), each replay timed with the
step-time model fitted on TRACE (its measured median step when too short to fit),
and ranks the settings by the objective, with the model's error beside each
figure. Needs vLLM. Progress goes to stderr.

example:
  schedscope sweep TRACE --policy additive,cap,separate --max-num-batched-tokens 4096,8192""",
    )
    _trace_arg(p)
    p.add_argument(
        "--policy", default="additive,cap,separate", help="policies (default additive,cap,separate)"
    )
    p.add_argument("--max-num-batched-tokens", metavar="B,…", help="budgets (default: the recorded one)")
    p.add_argument("--num-speculative-tokens", metavar="K,…", help="K values (default: the recorded one)")
    p.add_argument("--max-num-seqs", metavar="N,…", help="request slots (default: the recorded value)")
    p.add_argument("--method", metavar="M,…", help="spec methods (ngram, draft_model, dflash, dspark)")
    p.add_argument("--objective", choices=["output_tps", "ttft_p99", "drain"], default="output_tps")
    p.add_argument(
        "--arrivals", choices=["step", "time"], default="step", help="as for replay (default step)"
    )
    p.add_argument(
        "--workers",
        type=int,
        help="processes (default 1: vLLM's import per worker costs more than it saves on 2 cores)",
    )
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.add_argument("--plot", metavar="HTML", help="write a plotly HTML: the objective against the budget")
    p.add_argument("--png", metavar="PNG", help="the same figure as PNG (kaleido, the web extra)")
    p.set_defaults(func=cmd_sweep)


def _doctor(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "doctor",
        help="is a trace complete and exact? hooks, totals against /metrics, records dropped, replay",
        description="One verdict per check (PASS/FAIL/SKIP): which scheduler, runner and speculator hooks "
        "were active; whether the trace's totals equal the server's Prometheus counters; records "
        "dropped; an identity replay. Exits 1 on any FAIL. With data parallelism give every engine's trace.",
    )
    p.add_argument("traces", nargs="+", metavar="TRACE", help="trace file(s); one per engine with DP")
    where = p.add_mutually_exclusive_group()
    where.add_argument(
        "--metrics-url", metavar="URL", help="the server, e.g. http://127.0.0.1:8000 (reads URL/metrics)"
    )
    where.add_argument(
        "--metrics-file", metavar="FILE", help="a saved /metrics page (curl URL/metrics > FILE)"
    )
    p.add_argument("--lenient", action="store_true", help="skip malformed lines instead of stopping")
    p.set_defaults(func=cmd_doctor)


def _export(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "export",
        help="write a Perfetto / chrome://tracing timeline, Parquet tables for SQL, or OpenTelemetry spans",
        description="perfetto (default): budgets, query rows and buffer rows as counter tracks, a "
        "slice per step, a lane per request and flags as instant events; open the file at "
        "https://ui.perfetto.dev. parquet: OUTPUT is a directory that gets steps.parquet (a row per "
        "step, budget model included) and requests.parquet (a row per request per step); "
        "query several engines' tables together with DuckDB (docs/queries.md). Needs pyarrow. "
        "--otlp / --otlp-json (instead of -o): one llm_request span per request with queue, "
        "prefill and decode children, vLLM's gen_ai.* attributes and schedscope's (waiting by "
        "reason, preemptions), sent to an OpenTelemetry collector or written as OTLP JSON "
        "(docs/fleet.md). Needs 'schedscope[otlp]'.",
    )
    _trace_arg(p)
    p.add_argument(
        "-o",
        "--output",
        help="perfetto: file to write (.json, or .json.gz for gzip); parquet: a directory",
    )
    p.add_argument("--format", choices=("perfetto", "parquet"), default="perfetto", help="default perfetto")
    p.add_argument(
        "--engine",
        help="parquet: the engine column's value; otlp: the spans' schedscope.engine (default: the "
        "trace's file name)",
    )
    p.add_argument(
        "--otlp",
        metavar="ENDPOINT",
        help="send the spans to a collector's OTLP/HTTP receiver, e.g. http://127.0.0.1:4318 "
        "(/v1/traces is added to a URL without a path); exits 1, saying how many spans were "
        "dropped, if it does not take them",
    )
    p.add_argument(
        "--otlp-json", metavar="FILE", help="write the spans as OTLP JSON Lines (one export request a line)"
    )
    p.add_argument(
        "--otlp-timeout",
        type=float,
        default=10.0,
        metavar="SECONDS",
        help="--otlp: give up on a batch of spans after this long, retries included (default 10)",
    )
    p.set_defaults(func=cmd_export)


def _attach(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "attach",
        help="follow a live server's trace stream (SCHEDSCOPE_STREAM) from a terminal or script",
        description="Connects to http://HOST:PORT/trace, prints one line per step, reconnects with "
        "backoff and resumes after the last step seen; missing steps are shown as gaps.",
    )
    p.add_argument("url", help="stream URL, e.g. http://127.0.0.1:8799/trace")
    p.add_argument("--json", action="store_true", help="print the raw NDJSON records")
    p.add_argument("--save", help="also write what is received to FILE as a normal trace")
    p.add_argument("--token", help="bearer token (default: $SCHEDSCOPE_STREAM_TOKEN)")
    p.add_argument("--max-reconnects", type=int, help="give up after this many reconnects (default: never)")
    p.set_defaults(func=cmd_attach)


def _serve(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "serve",
        help="run `vllm serve` with the tracing scheduler",
        description="Runs `vllm serve VLLM_ARGS --scheduler-cls tracer.scheduler.TracingScheduler` "
        "with SCHEDSCOPE_TRACE set. Put vLLM's own arguments after `--`.",
    )
    p.add_argument("--trace", required=True, help="where to write the trace (.jsonl or .jsonl.gz)")
    p.add_argument(
        "--async-scheduler",
        action="store_true",
        help="use TracingAsyncScheduler (pair with vLLM's --async-scheduling)",
    )
    p.add_argument("vllm_args", nargs=argparse.REMAINDER, help="arguments for `vllm serve`")
    p.set_defaults(func=cmd_serve)
