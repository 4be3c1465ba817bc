"""The models page's pieces as plain data: which job each model shows and how far it is."""

from __future__ import annotations

from typing import Any

from llmgw.api.console.pages_models import latest_jobs, progress_view


def job(model: str, state: str, created: str, **over: Any) -> dict[str, Any]:
    return {"id": f"job-{model}-{created}", "model": model, "state": state, "created_at": created,
            "bytes_done": 0, "bytes_total": 0, "rate_bps": 0.0, **over}


def test_each_model_shows_its_newest_job_newest_first() -> None:
    jobs = [job("a", "failed", "2026-01-01T00:00:00"), job("b", "running", "2026-01-02T00:00:00"),
            job("a", "fetching", "2026-01-03T00:00:00")]
    assert [j["id"] for j in latest_jobs(jobs)] == ["job-a-2026-01-03T00:00:00", "job-b-2026-01-02T00:00:00"]


def test_a_download_shows_bytes_rate_and_eta_and_keeps_polling() -> None:
    view = progress_view(job("a", "fetching", "t", bytes_done=250, bytes_total=1000, rate_bps=50.0), None)
    assert (view["done"], view["total"], view["eta_s"]) == (250, 1000, 15.0)
    assert view["polling"] and not view["complete"]


def test_a_running_job_polls_until_its_model_is_ready() -> None:
    running = job("a", "running", "t", bytes_done=1000, bytes_total=1000)
    starting = progress_view(running, "loading on local")
    assert starting["polling"] and starting["complete"] and starting["model_state"] == "loading on local"
    assert not progress_view(running, "ready")["polling"]


def test_a_failed_job_stops_polling() -> None:
    view = progress_view(job("a", "failed", "t", error="the Hub has no such file"), None)
    assert not view["polling"] and view["eta_s"] is None
