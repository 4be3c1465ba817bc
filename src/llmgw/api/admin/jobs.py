"""Serve jobs in the admin API: `/admin/v1/jobs`."""

from __future__ import annotations

from typing import Any

from llmgw.api.admin.models import by
from llmgw.api.appkeys import JOBS
from llmgw.api.endpoints import Call, Endpoint
from llmgw.core.protocol.common import DataList
from llmgw.core.protocol.models import JobOut, ServeJob, ServeRequest
from llmgw.core.settings import DEFAULT_CTX_SIZE

TAG = "admin"
_EXAMPLE = {"name": "gemma3-270m", "cores": 2, "ctx_size": DEFAULT_CTX_SIZE,
            "source": {"kind": "hf", "repo": "unsloth/gemma-3-270m-it-GGUF",
                       "file": "gemma-3-270m-it-Q4_K_M.gguf"}}


def _out(job: ServeJob) -> JobOut:
    return JobOut(**dict(job))


async def start_job(call: Call[ServeRequest, None]) -> JobOut:
    # Who asked is the server's to say, whatever the body claims.
    serve = call.body.model_copy(update={"by": by(call.key)})
    return _out(await call.app[JOBS].start(serve))


async def list_jobs(call: Call[None, None]) -> DataList[JobOut]:
    return DataList(data=[_out(j) for j in await call.app[JOBS].jobs()])


async def get_job(call: Call[None, None]) -> JobOut:
    return _out(await call.app[JOBS].get(call.params["id"]))


async def cancel_job(call: Call[None, None]) -> JobOut:
    return _out(await call.app[JOBS].cancel(call.params["id"]))


START_JOB = Endpoint("start_job", "POST", "/admin/v1/jobs", "Start a serve job", TAG, start_job,
                     body=ServeRequest, returns=JobOut, status=201, example=_EXAMPLE)
LIST_JOBS = Endpoint("list_jobs", "GET", "/admin/v1/jobs", "List serve jobs", TAG, list_jobs,
                     returns=DataList[JobOut])
GET_JOB = Endpoint("get_job", "GET", "/admin/v1/jobs/{id}", "Show a serve job", TAG, get_job,
                   returns=JobOut)
CANCEL_JOB = Endpoint("cancel_job", "POST", "/admin/v1/jobs/{id}/cancel", "Cancel a serve job", TAG,
                      cancel_job, returns=JobOut)

ENDPOINTS: list[Endpoint[Any, Any]] = [START_JOB, LIST_JOBS, GET_JOB, CANCEL_JOB]
