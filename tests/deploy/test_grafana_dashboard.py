"""The Grafana dashboard (deploy/grafana/llmgw.json) asks only for what llmgw really exports: a
real server is started, serves one streamed request to a provider, and its `/metrics` is
scraped; every metric and label the dashboard's queries name must be there."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
from aiohttp.test_utils import TestClient, TestServer
from prometheus_client.parser import text_string_to_metric_families

from llmgw.core.settings import load
from llmgw.server.app import Server
from llmgw.server.init import init
from llmgw.store.store import Store
from tests.fakes.provider import FakeProvider

DASHBOARD = Path(__file__).parents[2] / "deploy" / "grafana" / "llmgw.json"
METRIC = re.compile(r"\b(llmgw_[a-z_]+)\b")
# Labels a query groups by or selects on: `by (a, b)` and `{a="x", b=~"y"}`.
BY = re.compile(r"\bby \(([^)]*)\)")
SELECTOR = re.compile(r"(llmgw_[a-z_]+)\{([^}]*)\}")
SUFFIXES = {"counter": ("_total",), "histogram": ("_bucket", "_sum", "_count"), "gauge": ("",)}


def panels(dashboard: dict[str, Any]) -> Iterator[dict[str, Any]]:
    for panel in dashboard["panels"]:
        yield panel
        yield from panel.get("panels", [])


def queries(dashboard: dict[str, Any]) -> list[str]:
    """Every PromQL expression: the panels' targets and the template variables' queries."""
    exprs = [t["expr"] for p in panels(dashboard) for t in p.get("targets", [])]
    for var in dashboard["templating"]["list"]:
        if var["type"] == "query":
            exprs.append(var["query"]["query"])
    return exprs


async def scrape(tmp_path: Path) -> str:
    """`/metrics` of a real server after one streamed chat completion through it."""
    provider = await FakeProvider().start()
    result = init(tmp_path / "data", guard=False)
    settings = load(tmp_path / "data")
    store = Store.open(settings.database_url(tmp_path / "data"))
    app = Server(tmp_path / "data", settings, store).build_app()
    headers = {"Authorization": f"Bearer {result.admin_key}"}
    try:
        async with TestClient(TestServer(app)) as client:
            resp = await client.post("/admin/v1/models", headers=headers, json={
                "name": "gpt", "source": {"kind": "remote", "base_url": provider.url}})
            assert resp.status == 201
            base = str(client.make_url("/v1"))
            async with openai.AsyncOpenAI(base_url=base, api_key=result.admin_key,
                                          max_retries=0) as oa:
                stream = await oa.chat.completions.create(
                    model="gpt", messages=[{"role": "user", "content": "hi"}], stream=True)
                async for _ in stream:
                    pass
            resp = await client.get("/metrics", headers=headers)
            assert resp.status == 200
            return await resp.text()
    finally:
        await provider.close()


async def test_every_metric_and_label_the_dashboard_queries_is_exported(tmp_path: Path) -> None:
    dashboard = json.loads(DASHBOARD.read_text())
    exprs = queries(dashboard)
    assert len(exprs) >= 20

    exported: set[str] = set()
    labels: dict[str, set[str]] = {}
    for family in text_string_to_metric_families(await scrape(tmp_path)):
        for suffix in SUFFIXES.get(family.type, ("",)):
            exported.add(family.name + suffix)
        for sample in family.samples:
            labels.setdefault(sample.name, set()).update(sample.labels)

    named = {m for e in exprs for m in METRIC.findall(e)}
    unknown = named - exported
    assert unknown == set(), f"the dashboard asks for metrics llmgw does not export: {unknown}"
    # The panels cover what an operator watches: traffic, latency, TTFT, gateway-added time,
    # errors, replicas, queue, judgments (and limits hit: the 429s).
    for wanted in ("llmgw_requests_total", "llmgw_request_seconds_bucket",
                   "llmgw_time_to_first_token_seconds_bucket", "llmgw_gateway_added_seconds_bucket",
                   "llmgw_upstream_errors_total", "llmgw_replicas_ready", "llmgw_queue_depth",
                   "llmgw_queue_wait_seconds_bucket", "llmgw_guard_judgments_total",
                   "llmgw_guard_queue_depth", "llmgw_guard_shed_total",
                   "llmgw_guard_judge_service_seconds_bucket"):
        assert wanted in named
    assert any('status="429"' in e for e in exprs)

    # Each label a query selects on or groups by is one its metrics carry (checked on the
    # metrics this request gave samples; `le` is every histogram bucket's).
    for expr in exprs:
        metrics = [m for m in METRIC.findall(expr) if m in labels]
        used = {name.strip() for group in BY.findall(expr) for name in group.split(",")}
        used |= {cond.split("=")[0].strip().rstrip("!~")
                 for _, sel in SELECTOR.findall(expr) for cond in sel.split(",")}
        for metric in metrics:
            missing = used - labels[metric] - {""}
            assert not missing, f"{metric} has no label {missing} (asked for in {expr})"
