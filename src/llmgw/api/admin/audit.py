"""The admin API's audit log: `GET /admin/v1/audit`, admin keys only."""

from __future__ import annotations

from typing import Any

from llmgw.api.appkeys import AUDIT
from llmgw.api.endpoints import Call, Endpoint
from llmgw.core.audit import AuditEntry
from llmgw.core.protocol.audit import AuditQuery
from llmgw.core.protocol.common import DataList

TAG = "admin"


async def audit_log(call: Call[None, AuditQuery]) -> DataList[AuditEntry]:
    q = call.query
    q = q.model_copy(update={"limit": max(1, min(q.limit, 10_000))})
    return DataList(data=await call.app[AUDIT](q))


LIST_AUDIT = Endpoint("list_audit", "GET", "/admin/v1/audit",
                      "The audit log: every change made through the admin API, newest first", TAG,
                      audit_log, query=AuditQuery, returns=DataList[AuditEntry])

ENDPOINTS: list[Endpoint[Any, Any]] = [LIST_AUDIT]
