"""The real llama-server's load in llmgw's `/metrics`: every replica runs with `--metrics`, and
the server reads it."""

from __future__ import annotations

import urllib.request

from tests.conftest import DEMO
from tests.support.server_process import LlmgwServer, wait_for


def scrape(server: LlmgwServer) -> str:
    req = urllib.request.Request(server.url + "/metrics",
                                 headers={"Authorization": f"Bearer {server.admin_key}"})
    with urllib.request.urlopen(req, timeout=30) as resp:
        return resp.read().decode()


def test_each_ready_replica_shows_its_queued_and_running_requests_and_kv_cache_use(
        demo_server: LlmgwServer) -> None:
    replica = next(r["id"] for r in demo_server.replicas(DEMO) if r["state"] == "ready")
    labels = f'{{model="{DEMO}",replica="{replica}"}}'

    def shown() -> str | None:
        text = scrape(demo_server)
        return text if f"llmgw_replica_running_requests{labels}" in text else None

    text = wait_for("the replica's signals in /metrics", shown, 30, every_s=1)
    values = {line.split(" ")[0]: float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
              if line.startswith("llmgw_replica_") and labels in line}
    assert set(values) == {f"llmgw_replica_{name}{labels}" for name in (
        "queued_requests", "running_requests", "kv_cache_usage_ratio")}
    assert all(v >= 0 for v in values.values())
    assert values[f"llmgw_replica_kv_cache_usage_ratio{labels}"] <= 1
