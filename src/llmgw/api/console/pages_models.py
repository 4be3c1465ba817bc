"""The models page: the catalog, adding models, serve jobs with live progress, scaling, removing,
and one model's resources."""

from __future__ import annotations

from typing import Any

from aiohttp import web

from llmgw.api.admin.jobs import GET_JOB, LIST_JOBS, START_JOB
from llmgw.api.admin.models import ADD_MODEL, LIST_MODELS, MODEL_RESOURCES, REMOVE_MODEL, SCALE_MODEL
from llmgw.api.appkeys import GATEWAY
from llmgw.api.console import data, forms, render
from llmgw.api.console.access import root, visitor
from llmgw.api.endpoints import Endpoint

HERE = "/ui/models"
# The page shows the newest job of this many models.
JOBS_SHOWN = 20
FINISHED = ("running", "failed", "cancelled", "gave_way")
STOP_POLLING = 286
REFUSING = "failing: it refused a connection just now"


async def _call(request: web.Request, ep: Endpoint[Any, Any], **kw: Any) -> Any:
    return await data.call(root(request), visitor(request).caller, ep, **kw)


def latest_jobs(jobs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The newest job of each model, newest first (a model's progress row shows its last job)."""
    newest: dict[str, dict[str, Any]] = {}
    for job in sorted(jobs, key=lambda j: j.get("created_at") or ""):
        newest[job["model"]] = job
    return sorted(newest.values(), key=lambda j: j.get("created_at") or "", reverse=True)[:JOBS_SHOWN]


async def models(request: web.Request) -> web.Response:
    """The catalog table, the forms, and the recent serve jobs."""
    catalog = (await _call(request, LIST_MODELS))["data"]
    gateway = root(request)[GATEWAY]
    for m in catalog:
        # A remote provider has no replica to health-check: its answers are the check, as this
        # server's request path saw them.
        if m["source"]["kind"] == "remote" and not gateway.answering(m["name"]):
            m["state"] = REFUSING
    jobs = latest_jobs((await _call(request, LIST_JOBS))["data"])
    states = {m["name"]: m["state"] for m in catalog}
    return render.page(request, "models.html", models=catalog,
                       jobs=[progress_view(j, states.get(j["model"])) for j in jobs])


def progress_view(job: dict[str, Any], model_state: str | None) -> dict[str, Any]:
    """What a job's progress row shows; `polling` while the job runs or its model is not ready."""
    done, total, rate = job.get("bytes_done", 0), job.get("bytes_total", 0), job.get("rate_bps", 0.0)
    state = job["state"]
    eta = (total - done) / rate if rate > 0 and total > done else None
    # Ready ("idle 3m" is ready too, unused lately) or failed: nothing more to wait for.
    settled = model_state is not None and model_state.startswith(("ready", "idle", "failed"))
    polling = state not in FINISHED or (state == "running" and not settled)
    return {"job": job, "done": done, "total": total, "rate": rate, "eta_s": eta,
            "complete": state == "running" or (total > 0 and done >= total),
            "model_state": model_state if state == "running" else None, "polling": polling}


async def job_progress(request: web.Request) -> web.Response:
    """One job's progress row's content (htmx polls it every second until the model is ready or
    the job ended otherwise)."""
    job = await _call(request, GET_JOB, params={"id": request.match_info["id"]})
    state = None
    if job["state"] == "running":
        state = next((m["state"] for m in (await _call(request, LIST_MODELS))["data"]
                      if m["name"] == job["model"]), None)
    view = progress_view(job, state)
    # 286: htmx stops polling (and still shows this last state).
    return render.page(request, "job_row.html", status=200 if view["polling"] else STOP_POLLING, p=view)


async def add_model(request: web.Request) -> web.Response:
    """A local GGUF file or a remote provider's model into the catalog."""
    form = await forms.read(request)
    name = forms.text(form, "name", required=True)
    if form.get("kind") == "remote":
        source = forms.given(kind="remote", base_url=forms.text(form, "base_url", required=True),
                             api=forms.text(form, "api"), model=forms.text(form, "remote_model"),
                             api_key_env=forms.text(form, "api_key_env"))
        body: dict[str, Any] = {"name": name, "source": source}
    else:
        # A local model runs on a node: one profile, with the cores asked for (one by default).
        body = {"name": name, "source": {"kind": "local", "path": forms.text(form, "path", required=True)},
                "profiles": [{"name": "default", "cpu_cores": forms.integer(form, "cores") or 1}]}
    await _call(request, ADD_MODEL, body=body)
    return render.done(request, HERE)


async def serve(request: web.Request) -> web.Response:
    """A serve job for a file on the Hub, with extra engine arguments for its profile (shell-quoted,
    as `ctl model serve --args` takes them); its progress row appears on the models page."""
    form = await forms.read(request)
    body = forms.given(name=forms.text(form, "name", required=True),
                       source={"kind": "hf", "repo": forms.text(form, "repo", required=True),
                               "file": forms.text(form, "file", required=True)},
                       cores=forms.integer(form, "cores"), args=forms.words(form, "args") or None)
    await _call(request, START_JOB, body=body)
    return render.done(request, HERE)


async def scale(request: web.Request) -> web.Response:
    """A model's replica bounds and idle timeout (empty fields stay as they are)."""
    form = await forms.read(request)
    body = forms.given(min=forms.integer(form, "min", required=True), max=forms.integer(form, "max"),
                       idle_s=forms.number(form, "idle_s"))
    await _call(request, SCALE_MODEL, body=body, params={"name": request.match_info["name"]})
    return render.done(request, HERE)


async def remove(request: web.Request) -> web.Response:
    """A model out of the catalog (the page asks to confirm first)."""
    await _call(request, REMOVE_MODEL, params={"name": request.match_info["name"]})
    return render.done(request, HERE)


async def resources(request: web.Request) -> web.Response:
    """A model's memory estimate by part and where it fits, with each node's reason when not."""
    res = await _call(request, MODEL_RESOURCES, params={"name": request.match_info["name"]})
    return render.page(request, "model.html", res=res)
