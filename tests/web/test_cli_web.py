"""`schedscope web`: loopback by default, remote only when asked, URL printed."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any, ClassVar

import pytest

from tracer.cli import main

from .helpers import ADDITIVE, SEPARATE

ROOT = Path(__file__).resolve().parents[2]


class FakeApp:
    runs: ClassVar[list[dict[str, Any]]] = []
    feeds: ClassVar[list[Any]] = []  # the sources the real app starts (none here)

    def run(self, **kwargs: Any) -> None:
        self.runs.append(kwargs)


def test_non_loopback_needs_allow_remote(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["web", str(ADDITIVE), "--host", "0.0.0.0"]) == 2
    assert "--allow-remote" in capsys.readouterr().err


def test_allow_remote_warns(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    import web.app

    monkeypatch.setattr(web.app, "make_app", lambda *a, **k: FakeApp())
    assert main(["web", str(ADDITIVE), "--host", "0.0.0.0", "--allow-remote", "--port", "9999"]) == 0
    out = capsys.readouterr()
    assert "warning" in out.err and "http://0.0.0.0:9999/" in out.out
    assert FakeApp.runs[-1] == {"host": "0.0.0.0", "port": 9999, "debug": False}


def test_needs_a_trace_or_follow(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["web"]) == 2
    assert "--follow" in capsys.readouterr().err


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_serves_on_loopback_and_prints_its_url() -> None:
    port = _free_port()
    cmd = [sys.executable, "-m", "tracer.cli", "web", str(ADDITIVE), str(SEPARATE), "--port", str(port)]
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == f"schedscope web: http://127.0.0.1:{port}/  (Ctrl-C to stop)"
        deadline = time.monotonic() + 20
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=2) as r:
                    assert r.status == 200 and b"schedscope" in r.read()
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)
    finally:
        proc.terminate()
        proc.wait(10)
