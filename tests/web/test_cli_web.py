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


def test_opens_zstd_traces_without_the_suffix(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """`schedscope web` over zstd traces named .jsonl: one is shown through its TraceSource,
    two are loaded whole for the compare page; both read as the plain samples do."""
    import zstandard

    import web.app
    from tests.stream_support import wait_for

    packed = []
    for src in (ADDITIVE, SEPARATE):
        path = tmp_path / src.name
        path.write_bytes(zstandard.ZstdCompressor().compress(src.read_bytes()))
        packed.append(str(path))
    made: list[Any] = []
    real = web.app.make_app

    def keep(*args: Any, **kwargs: Any) -> Any:
        app = real(*args, **kwargs)
        # Never served: "running" is waiting until A is shown (the command then stops the feeds).
        app.run = lambda **_: wait_for(lambda: app.store.get("a") is not None)
        made.append(app)
        return app

    monkeypatch.setattr(web.app, "make_app", keep)
    assert main(["web", packed[0]]) == 0
    assert len(made[0].store.get("a")) == 7
    assert main(["web", *packed]) == 0
    assert len(made[1].store.get("a")) == 7 and len(made[1].store.get("b")) == 6
    assert "error" not in capsys.readouterr().err


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
