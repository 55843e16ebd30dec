"""Shared by the TUI tests: sample traces, and running an app until its trace is shown."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from pathlib import Path

from textual.pilot import Pilot

from tui.app import SchedscopeApp

ROOT = Path(__file__).resolve().parents[2]
SAMPLES = ROOT / "sample_traces"
ADDITIVE = SAMPLES / "dflash_k7_additive.jsonl"
SEPARATE = SAMPLES / "dflash_k7_separate.jsonl"
SIZE = (120, 40)


async def wait_until(pilot: Pilot, condition: Callable[[], bool], timeout: float = 10.0) -> None:
    for _ in range(int(timeout / 0.02)):
        if condition():
            await pilot.pause()
            return
        await pilot.pause(0.02)
    raise AssertionError("timed out waiting for the app")


async def wait_loaded(pilot: Pilot) -> None:
    app = pilot.app
    assert isinstance(app, SchedscopeApp)
    base = app.screen_stack[0]
    await wait_until(pilot, lambda: app.error is not None or bool(getattr(base, "loaded", False)))


def drive(app: SchedscopeApp, body: Callable[[Pilot], Awaitable[None]], size: tuple[int, int] = SIZE) -> None:
    """Run the app headless until loaded, then `body`: plain sync tests, no async plugin needed."""

    async def main() -> None:
        async with app.run_test(size=size) as pilot:
            await wait_loaded(pilot)
            await body(pilot)

    asyncio.run(main())
