"""Smoke test of the live-server harness: `vllm serve` on CPU with a tiny
local model and speculative decoding (ngram, draft_model).

Slow (~25 s per server start); each server is started once per session.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from live_support import LiveServer, build_tiny_llama, start_server

pytestmark = pytest.mark.live

PROMPTS = [
    "Hello world, hello scheduler, hello tracer, hello",
    "The quick brown fox jumps over the lazy dog. The quick brown fox",
    "One two three four five six seven eight nine ten",
    "Each request gets a number of tokens from the token budget.",
]
NGRAM = {"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_max": 3, "prompt_lookup_min": 1}


@pytest.fixture(scope="session")
def models_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("models")


@pytest.fixture(scope="session")
def target_model(models_dir: Path) -> Path:
    return build_tiny_llama(models_dir / "target", seed=0)


@pytest.fixture(scope="session")
def draft_model(models_dir: Path) -> Path:
    # Same vocab/tokenizer as the target, different weights.
    return build_tiny_llama(models_dir / "draft", seed=1)


@pytest.fixture(scope="session")
def ngram_server(target_model: Path, models_dir: Path) -> Iterator[LiveServer]:
    with start_server(
        target_model,
        extra_args=["--speculative-config", json.dumps(NGRAM)],
        log_path=models_dir / "ngram_server.log",
    ) as server:
        yield server


def _check(results: list[dict], max_tokens: int) -> None:
    assert len(results) == len(PROMPTS)
    for r in results:
        choice = r["choices"][0]
        assert isinstance(choice["text"], str) and choice["text"]
        assert 1 <= r["usage"]["completion_tokens"] <= max_tokens


def test_ngram_concurrent_completions(ngram_server: LiveServer) -> None:
    _check(ngram_server.complete_many(PROMPTS, max_tokens=8, concurrency=4), 8)
    # The repetitive prompts give prompt-lookup matches, so drafts were proposed.
    assert ngram_server.metric("vllm:spec_decode_num_draft_tokens_total") > 0


def test_draft_model_completions(target_model: Path, draft_model: Path, models_dir: Path) -> None:
    spec = {"method": "draft_model", "model": str(draft_model), "num_speculative_tokens": 2}
    with start_server(
        target_model,
        extra_args=["--speculative-config", json.dumps(spec)],
        log_path=models_dir / "draft_server.log",
    ) as server:
        _check(server.complete_many(PROMPTS, max_tokens=8, concurrency=4), 8)
        # draft_model always proposes K tokens per decode step.
        assert server.metric("vllm:spec_decode_num_draft_tokens_total") > 0
