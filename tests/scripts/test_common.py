"""`scripts/common.sh`: what test.sh and up.sh set up before anything runs."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_ensure_chromium_exports_a_browser_and_its_driver_that_run() -> None:
    out = subprocess.run(
        ["bash", "-c", "source scripts/common.sh && ensure_chromium && "
         'echo "$LLMGW_CHROMIUM" && echo "$LLMGW_CHROMEDRIVER"'],
        cwd=ROOT, capture_output=True, text=True, timeout=600, check=True,
        env={k: v for k, v in os.environ.items() if not k.startswith("LLMGW_CHROM")},
    ).stdout.split()
    assert len(out) == 2, out
    browser, driver = out
    version = subprocess.run([driver, "--version"], capture_output=True, text=True, timeout=30, check=True)
    assert version.stdout.startswith("ChromeDriver")
    # The driver only drives the browser of its own major version.
    major = version.stdout.split()[1].split(".")[0]
    shown = subprocess.run([browser, "--version"], capture_output=True, text=True, timeout=30, check=True)
    assert f" {major}." in shown.stdout, (shown.stdout, version.stdout)


def test_up_prints_the_console_url() -> None:
    assert "Web console: $url/ui" in (ROOT / "scripts" / "up.sh").read_text()
