"""A local Hugging Face Hub for the end-to-end tests: `python -m tests.fakes.hub` as a subprocess,
serving the demo GGUF under a real repo id."""

from __future__ import annotations

import subprocess
import sys
import urllib.request
from pathlib import Path

from tests.support.server_process import free_port, wait_for

REPO = "google/gemma-3-270m-GGUF"
FILE = "gemma-3-270m-q4_k_m.gguf"


class Hub:
    """`python -m tests.fakes.hub` as a subprocess serving `root`."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.port = free_port()
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, *extra: str) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tests.fakes.hub", "--port", str(self.port), "--root",
             str(self.root), *extra],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )
        wait_for("the local hub", lambda: urllib.request.urlopen(self.url + "/health").status == 200, 20)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
