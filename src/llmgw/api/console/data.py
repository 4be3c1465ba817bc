"""The console reads and writes through the admin API's own endpoints, with the visitor's key:
`call` answers as the API would answer that key (JSON-shaped data, so templates read one shape),
and raises the same errors."""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from aiohttp import web

from llmgw.api.appkeys import CATALOG, CLUSTER, GUARD_ADMIN, JOBS, JUDGE_STATUS, KEYS, NODES
from llmgw.api.nodes import dump_view
from llmgw.core.errors import Forbidden
from llmgw.core.types import ApiKey, KeyScope


def _key(k: ApiKey) -> dict[str, Any]:
    return {**k.model_dump(mode="json", exclude={"hash"}), "label": k.label}


async def call(app: web.Application, key: ApiKey, name: str, *, body: dict[str, Any] | None = None,
               query: dict[str, str] | None = None, params: dict[str, str] | None = None) -> Any:
    """The answer of the admin endpoint `name` (its operationId) to `key`."""
    q, p = query or {}, params or {}
    if key.scope != KeyScope.ADMIN and name not in ("list_keys", "usage"):
        raise Forbidden("this endpoint needs an admin key")
    if name == "cluster":
        return await app[CLUSTER]()
    if name == "list_nodes":
        return {"data": [dump_view(v) for v in await app[NODES].list()]}
    if name == "list_replicas":
        return {"data": [r.model_dump(mode="json") for r in await app[CATALOG].replicas(q.get("model"))]}
    if name == "list_models":
        catalog = app[CATALOG]
        models = await catalog.models()
        states = await catalog.states(models)
        return {"data": [m.model_dump(mode="json") | {"state": states[m.name]} for m in models]}
    if name == "list_jobs":
        return {"data": [{**j.model_dump(mode="json"), "model": j.model} for j in await app[JOBS].jobs()]}
    if name == "get_job":
        j = await app[JOBS].get(p["id"])
        return {**j.model_dump(mode="json"), "model": j.model}
    if name == "guard_overview":
        return {**await app[GUARD_ADMIN].switches(),
                "policies": [x.model_dump(mode="json") for x in await app[GUARD_ADMIN].policies()]}
    if name == "list_judges":
        return {"data": await app[JUDGE_STATUS]()}
    if name == "list_verdicts":
        records = await app[GUARD_ADMIN].verdicts(since=None, policy=q.get("policy"), judge=q.get("judge"),
                                                  outcome=q.get("outcome"), limit=int(q.get("limit", "100")))
        return {"data": [r.model_dump(mode="json") for r in records]}
    if name == "list_keys":
        keys = await app[KEYS].keys()
        return {"data": [_key(k) for k in keys if key.scope == KeyScope.ADMIN or k.id == key.id]}
    if name == "usage":
        rows = await app[KEYS].usage(q.get("key"), q.get("model"), q.get("since"))
        return {"data": [asdict(r) for r in rows if key.scope == KeyScope.ADMIN or r.key_id == key.id]}
    raise NotImplementedError(name)
