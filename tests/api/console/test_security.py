"""The headers every console response carries, and errors as HTML pages."""

from __future__ import annotations

from aiohttp import ClientResponse

from llmgw.api.console.security import CSP
from tests.api.console.conftest import Install


def strict(resp: ClientResponse) -> None:
    assert resp.headers["Content-Security-Policy"] == CSP
    assert resp.headers["X-Content-Type-Options"] == "nosniff"
    assert resp.headers["Referrer-Policy"] == "no-referrer"
    assert resp.headers["X-Frame-Options"] == "DENY"


def test_the_policy_is_the_strict_one() -> None:
    assert CSP == ("default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
                   "connect-src 'self'; font-src 'self'; form-action 'self'; frame-ancestors 'none'; "
                   "base-uri 'none'")


async def test_every_console_response_carries_the_strict_headers(install: Install) -> None:
    b = install.browser
    responses = [await b.get("/ui/signin"), await b.get("/ui/"), await b.get("/ui"),
                 await b.get("/ui/no-such-page"), await b.get("/ui/static/console.css")]
    await b.signin(install.admin)
    responses += [await b.get("/ui/"), await b.get("/ui/live/overview"),
                  await b.post("/ui/signout")]
    for resp in responses:
        strict(resp)
    pages = [r for r in responses if "/static/" not in str(r.url)]
    assert all(r.headers["Cache-Control"] == "no-store" for r in pages)


async def test_pages_have_no_inline_script_or_style(install: Install) -> None:
    b = install.browser
    texts = [await (await b.get("/ui/signin")).text()]
    await b.signin(install.admin)
    texts += [await (await b.get(p)).text() for p in ("/ui/", "/ui/live/overview", "/ui/nope")]
    for text in texts:
        assert "style=" not in text and "<style" not in text
        assert " onclick=" not in text and " onload=" not in text and "javascript:" not in text
        for chunk in text.split("<script")[1:]:
            assert chunk.lstrip().startswith('src="/ui/static/'), chunk[:80]
            assert chunk.split(">", 1)[1].startswith("</script>")


async def test_an_error_is_an_html_page_with_its_message_only(install: Install) -> None:
    resp = await install.browser.get("/ui/no-such-page")
    assert resp.status == 404
    assert resp.headers["Content-Type"].startswith("text/html")
    text = await resp.text()
    assert 'id="error-message"' in text and "There is no such page." in text
    assert "Traceback" not in text and '"error"' not in text


async def test_the_vendored_libraries_are_served(install: Install) -> None:
    for path in ("/ui/static/vendor/htmx.min.js", "/ui/static/vendor/chart.umd.min.js",
                 "/ui/static/console.js"):
        resp = await install.browser.get(path)
        assert resp.status == 200, path
        assert "javascript" in resp.headers["Content-Type"]
