"""The models page's pieces as plain data: which job each model shows and how far it is."""

from __future__ import annotations

import html
from typing import Any

from aiohttp import ClientResponse

from llmgw.api.console.pages_models import latest_jobs, progress_view
from tests.api.console.conftest import Install
from tests.api.console.sso import OPERATOR, VIEWER, SsoInstall, provider, sso, sso_port
from tests.fakes.gguf_files import write_gguf

__all__ = ["provider", "sso", "sso_port"]  # fixtures


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
    assert not progress_view(running, "idle 3m")["polling"]
    assert not progress_view(running, "failed")["polling"]


def test_a_failed_job_stops_polling() -> None:
    view = progress_view(job("a", "failed", "t", error="the Hub has no such file"), None)
    assert not view["polling"] and view["eta_s"] is None


# --- through the real app ----------------------------------------------------------------------


async def post_form(install: Install, url: str, **fields: str) -> ClientResponse:
    token = await install.browser.csrf("/ui/models")
    return await install.browser.post(url, {"csrf_token": token, **fields})


async def catalog(install: Install) -> dict[str, Any]:
    status, body = await install.api("GET", "/admin/v1/models")
    assert status == 200
    return {m["name"]: m for m in body["data"]}


async def test_adding_a_local_and_a_remote_model_lists_them(install: Install) -> None:
    await install.browser.signin(install.admin)
    gguf = write_gguf(install.data / "models" / "tiny.gguf")
    # More cores than the node has: listed, never started.
    resp = await post_form(install, "/ui/models/add", kind="local", name="tiny", path=str(gguf), cores="1024")
    assert resp.status == 303 and resp.headers["Location"] == "/ui/models"
    resp = await post_form(install, "/ui/models/add", kind="remote", name="far",
                           base_url="https://api.example.com/v1", api="openai", remote_model="gpt-x")
    assert resp.status == 303
    models = await catalog(install)
    assert models["far"]["source"]["model"] == "gpt-x"
    assert models["tiny"]["profiles"][0]["cpu_cores"] == 1024
    page = await (await install.browser.get("/ui/models")).text()
    for name in ("tiny", "far"):
        row = page.split(f'<tr data-model="{name}">', 1)[1].split("</tr>", 1)[0]
        assert 'class="state' in row and f'class="scale-form inline" data-model="{name}"' in row
        assert f'class="remove-model danger" data-model="{name}"' in row


async def test_a_refused_model_is_an_error_page_naming_the_problem(install: Install) -> None:
    await install.browser.signin(install.admin)
    resp = await post_form(install, "/ui/models/add", kind="local", name="a b", path="/etc/passwd")
    assert resp.status == 400
    text = await resp.text()
    assert 'id="error-message"' in text and "name" in text
    assert await catalog(install) == {}


async def test_scaling_and_removing_a_model(install: Install) -> None:
    status, _ = await install.api("POST", "/admin/v1/models", {
        "name": "org/far", "source": {"kind": "remote", "base_url": "https://api.example.com/v1"}})
    assert status == 201
    await install.browser.signin(install.admin)
    resp = await post_form(install, "/ui/models/org/far/scale", min="0", max="3", idle_s="60")
    assert resp.status == 303
    assert (await catalog(install))["org/far"]["scaling"] == {"min": 0, "max": 3, "idle_s": 60.0}
    page = await (await install.browser.get("/ui/models/org/far")).text()
    assert 'id="placement"' in page and 'id="estimates"' in page
    token = await install.browser.csrf("/ui/models")
    resp = await install.browser.post("/ui/models/org/far/remove",
                                      headers={"X-CSRF-Token": token, "HX-Request": "true"})
    assert resp.status == 200 and resp.headers["HX-Redirect"] == "/ui/models"
    assert await catalog(install) == {}


async def test_a_serve_job_shows_its_progress_row(install: Install) -> None:
    gguf = write_gguf(install.data / "models" / "tiny.gguf")
    status, job = await install.api("POST", "/admin/v1/jobs",
                                    {"name": "tiny", "source": {"kind": "local", "path": str(gguf)}})
    assert status == 201, job
    await install.browser.signin(install.admin)
    page = await (await install.browser.get("/ui/models")).text()
    assert 'id="job-tiny"' in page and "<progress" in page and 'class="job-state' in page
    resp = await install.browser.get(f"/ui/jobs/{job['id']}/progress")
    fragment = await resp.text()
    assert "<progress" in fragment and 'class="job-state' in fragment
    assert "<html" not in fragment and 'id="job-tiny"' not in fragment  # the row's content only
    # Still to wait for: 200; nothing more to wait for: 286, which ends htmx's polling.
    assert resp.status in (200, 286)


async def test_serving_from_the_hub_starts_a_job(install: Install) -> None:
    await install.browser.signin(install.admin)
    resp = await post_form(install, "/ui/models/serve", name="tiny", repo="acme/tiny-GGUF",
                           file="tiny.gguf", cores="1")
    assert resp.status == 303
    status, jobs = await install.api("GET", "/admin/v1/jobs")
    [job] = jobs["data"]
    assert job["request"]["source"] == {"kind": "hf", "repo": "acme/tiny-GGUF", "file": "tiny.gguf",
                                        "revision": "main"}
    assert job["request"]["cores"] == 1


async def test_the_serve_forms_engine_arguments_reach_the_job_split_as_by_a_shell(install: Install) -> None:
    await install.browser.signin(install.admin)
    resp = await post_form(install, "/ui/models/serve", name="tiny", repo="acme/tiny-GGUF",
                           file="tiny.gguf", args="--temp 0.7 --chat-template-file 'my template.jinja'")
    assert resp.status == 303
    status, jobs = await install.api("GET", "/admin/v1/jobs")
    [job] = jobs["data"]
    assert job["request"]["args"] == ["--temp", "0.7", "--chat-template-file", "my template.jinja"]


async def test_engine_arguments_with_an_open_quote_are_refused_and_start_nothing(install: Install) -> None:
    await install.browser.signin(install.admin)
    resp = await post_form(install, "/ui/models/serve", name="tiny", repo="acme/tiny-GGUF",
                           file="tiny.gguf", args="--chat-template-file 'my template.jinja")
    assert resp.status == 400
    assert "'args' is not shell-quoted right: no closing quotation" in html.unescape(await resp.text())
    assert (await install.api("GET", "/admin/v1/jobs"))[1]["data"] == []


async def test_a_remote_model_that_refuses_connections_is_shown_failing(install: Install) -> None:
    """A remote provider has no replica to health-check: once it refuses a connection the page
    says so, in the failing colour, instead of listing it as any other remote model."""
    for name, url in (("dead", "http://127.0.0.1:9/v1"), ("alive", "https://api.example.com/v1")):
        status, body = await install.api("POST", "/admin/v1/models", {
            "name": name, "source": {"kind": "remote", "base_url": url}})
        assert status == 201, body
    status, _ = await install.api("POST", "/v1/chat/completions",
                                  {"model": "dead", "messages": [{"role": "user", "content": "hi"}]})
    assert status == 502
    await install.browser.signin(install.admin)
    page = await (await install.browser.get("/ui/models")).text()
    dead = page.split('<tr data-model="dead">', 1)[1].split("</tr>", 1)[0]
    assert '<td class="state state-failing">failing: it refused a connection just now</td>' in dead
    alive = page.split('<tr data-model="alive">', 1)[1].split("</tr>", 1)[0]
    assert '<td class="state state-remote">remote</td>' in alive


async def test_no_reader_of_the_models_page_sees_a_provider_urls_credentials(sso: SsoInstall) -> None:
    """A viewer and an operator read the catalog; neither sees the password in a remote model's
    URL nor its query's key, but both see where it goes."""
    status, body = await sso.install.api("POST", "/admin/v1/models", {"name": "far", "source": {
        "kind": "remote", "base_url": "https://alice:pw-s3cret@api.example.com/v1?key=sk-s3cret"}})
    assert status == 201, body
    for account in (VIEWER, OPERATOR):
        person = await sso.signed_in(account)
        pages = []
        for path in ("/ui/models", "/ui/models/far"):
            resp = await person.console.get(path)
            pages.append(html.unescape(await resp.text()))
            assert resp.status == 200, pages[-1]
            assert "s3cret" not in pages[-1]
        assert "https://***@api.example.com/v1?key=***" in pages[0]
