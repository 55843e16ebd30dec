"""The web suite: its own pytest invocation, opted into with dash[testing]'s `--headless`.

    .venv/bin/python -m pytest tests/web --headless --webdriver Chrome

Without `--headless` this folder is not collected, so the default `pytest` run
(and the vLLM 0.33 venv, which has no dash) neither imports dash nor starts a
browser here; dash_duo without `--headless` would hang ~30 s and fail.
Browser tests drive Debian's chromium and chromium-driver
(`apt-get install -y chromium chromium-driver`); screenshots go to artifacts/web/.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
SAMPLES = ROOT / "sample_traces"
ARTIFACTS = ROOT / "artifacts" / "web"
# Its own pytest process (as the TUI suite). The figures are SVG; software WebGL (SwiftShader, which
# headless chromium without a GPU now wants opted into) stays on for anything plotly draws with WebGL.
CHROMIUM_FLAGS = (
    "--no-sandbox",
    "--disable-gpu",
    "--disable-dev-shm-usage",
    "--disable-background-networking",
    "--enable-unsafe-swiftshader",
    "--window-size=1500,2200",
)


def pytest_configure(config: pytest.Config) -> None:
    # selenium 4.2 (pinned by dash[testing]) calls urllib3 APIs that warn on every request.
    config.addinivalue_line("filterwarnings", "ignore:HTTPResponse.getheader:DeprecationWarning")


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    if not config.getoption("headless", default=False):
        return True
    return None


@pytest.hookimpl(optionalhook=True)
def pytest_setup_options() -> Any:
    """Chrome options for dash_duo (dash[testing] adds --headless and its own flags)."""
    from selenium.webdriver.chrome.options import Options

    options = Options()
    for flag in CHROMIUM_FLAGS:
        options.add_argument(flag)
    return options


@pytest.fixture(scope="session")
def artifacts() -> Path:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    return ARTIFACTS


@pytest.fixture
def needs_chromium() -> None:
    if not (shutil.which("chromium") and shutil.which("chromedriver")):
        pytest.fail("the web suite needs Debian's chromium and chromium-driver (apt-get install -y both)")
