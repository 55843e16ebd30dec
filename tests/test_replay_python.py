"""`schedscope replay --python`: a trace replayed through another environment's vLLM.

The DFlash K=7 sample was recorded by vLLM 0.32's stock scheduler, which charges 7 draft
slots per request against the input budget (8,185 target tokens a step). Replayed through
vLLM 0.34's stock scheduler (.venv034, as .ci/test makes it; SCHEDSCOPE_OTHER_PYTHON names
another interpreter), it charges none and caps admission instead: 8,192 a step, one step
fewer. Runs in the main suite only (unmarked): the other venvs run the `vllm` tests.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tracer.cli import main
from tracer.trace.reader import load

ROOT = Path(__file__).resolve().parent.parent
SAMPLE = ROOT / "sample_traces" / "dflash_k7_additive.jsonl"
OTHER = Path(os.environ.get("SCHEDSCOPE_OTHER_PYTHON") or ROOT / ".venv034" / "bin" / "python")


@pytest.mark.skipif(not OTHER.exists(), reason=f"no other vLLM environment at {OTHER} (.ci/test makes it)")
def test_a_replay_through_another_vllm_shows_the_release_that_changed_the_decision(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "other.jsonl"
    argv = [
        "replay",
        str(SAMPLE),
        "--python",
        str(OTHER),
        "--policy",
        "stock",
        "--no-identity",
        "-o",
        str(out),
    ]
    assert main(argv) == 0
    recorded, replayed = load(SAMPLE), load(out)
    assert recorded.header["vllm_version"] == "0.32.0" and recorded.header["regime"] == "additive"
    assert replayed.header["vllm_version"].startswith(("0.33", "0.34")), replayed.header["vllm_version"]
    assert replayed.header["regime"] == "cap"
    assert list(recorded.columns["target_used"][:4]) == [8185] * 4
    assert list(replayed.columns["target_used"][:4]) == [8192] * 4
    assert len(replayed) == len(recorded) - 1
    capsys.readouterr()
    assert main(["diff", str(SAMPLE), str(out)]) == 0
    report = capsys.readouterr().out
    assert "In A the additive draft-slot reservation withheld 7 target tokens in each of 4 steps" in report


def test_an_interpreter_that_cannot_run_is_a_usage_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["replay", str(SAMPLE), f"--python={tmp_path / 'none'}", "-o", str(tmp_path / "x.jsonl")]
    assert main(argv) == 2
    assert "cannot run" in capsys.readouterr().err
