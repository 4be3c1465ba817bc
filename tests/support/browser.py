"""A real headless Chromium for the console's tests: fixtures, condition waits, screenshots, the
console's sign-in and page visits (each checked for console errors and a leaked admin key), and a
plain HTTP client holding a console session.

Chromium and chromedriver come from Debian's packages (scripts/common.sh `ensure_chromium`
installs them and exports LLMGW_CHROMIUM and LLMGW_CHROMEDRIVER). A missing browser fails the
tests: it never skips them.
"""

from __future__ import annotations

import base64
import http.client
import json
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from email.message import Message
from html.parser import HTMLParser
from http.cookies import SimpleCookie
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import urlencode, urlsplit

import pytest
from selenium import webdriver
from selenium.common.exceptions import StaleElementReferenceException, TimeoutException, WebDriverException
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webelement import WebElement
from selenium.webdriver.support import expected_conditions as EC
from selenium.webdriver.support.ui import WebDriverWait

from tests.support.server_process import LlmgwServer

SCREENSHOTS = Path(__file__).resolve().parents[2] / "docs" / "screenshots"
DESKTOP = (1280, 900)
PHONE = (390, 844)
# Offline and quiet: no update checks, sync or first-run pages making requests of their own.
FLAGS = ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync"]

T = TypeVar("T")


def chromium_paths() -> tuple[str, str]:
    """The browser and driver executables; an assertion error naming what is missing."""
    browser = os.environ.get("LLMGW_CHROMIUM", "/usr/bin/chromium")
    driver = os.environ.get("LLMGW_CHROMEDRIVER", "/usr/bin/chromedriver")
    for what, path in (("chromium", browser), ("chromedriver", driver)):
        assert os.access(path, os.X_OK), (
            f"{what} not found at {path}: run the tests through scripts/test.sh (it installs "
            "chromium and chromium-driver) or set LLMGW_CHROMIUM / LLMGW_CHROMEDRIVER")
    return browser, driver


def chrome(profile: Path, size: tuple[int, int], *, dark: bool = False,
           mobile: bool = False) -> webdriver.Chrome:
    """A headless Chromium with its own profile directory, its viewport `size` wide and high."""
    binary, driver_path = chromium_paths()
    options = webdriver.ChromeOptions()
    options.binary_location = binary
    for flag in [*FLAGS, f"--user-data-dir={profile}", f"--window-size={size[0]},{size[1]}"]:
        options.add_argument(flag)
    # The console's messages (CSP violations land there) and every request the page made.
    options.set_capability("goog:loggingPrefs", {"browser": "ALL", "performance": "ALL"})
    driver = webdriver.Chrome(service=Service(executable_path=driver_path), options=options)
    try:
        # The window has a minimum width; the device metrics make the page itself `size`.
        driver.execute_cdp_cmd("Emulation.setDeviceMetricsOverride", {
            "width": size[0], "height": size[1], "deviceScaleFactor": 1, "mobile": mobile})
        if dark:
            driver.execute_cdp_cmd("Emulation.setEmulatedMedia", {
                "features": [{"name": "prefers-color-scheme", "value": "dark"}]})
    except WebDriverException:
        driver.quit()
        raise
    return driver


@pytest.fixture(scope="module")
def browser(tmp_path_factory: pytest.TempPathFactory) -> Iterator[webdriver.Chrome]:
    """A desktop browser (1280x900), shared by a module's tests."""
    driver = chrome(tmp_path_factory.mktemp("chromium-desktop"), DESKTOP)
    yield driver
    driver.quit()


@pytest.fixture(scope="module")
def phone(tmp_path_factory: pytest.TempPathFactory) -> Iterator[webdriver.Chrome]:
    """A phone-sized browser (390x844) preferring the dark colour scheme."""
    driver = chrome(tmp_path_factory.mktemp("chromium-phone"), PHONE, dark=True, mobile=True)
    yield driver
    driver.quit()


def wait_until(driver: webdriver.Chrome, what: str, check: Callable[[webdriver.Chrome], T | None],
               timeout_s: float = 30, every_s: float = 0.1) -> T:
    """The first truthy value of `check(driver)`; fails naming `what` and the page on timeout.
    A check that reloads the page asks every second or so (`every_s`)."""
    try:
        # htmx swaps live parts every second or two: an element read mid-swap is stale, and the
        # check is simply asked again.
        return WebDriverWait(driver, timeout_s, poll_frequency=every_s,
                             ignored_exceptions=(StaleElementReferenceException,)).until(
            lambda d: check(d) or False, message=what)
    except TimeoutException as exc:
        raise AssertionError(
            f"timed out after {timeout_s}s waiting for {what} at {driver.current_url}") from exc


def find(driver: webdriver.Chrome, css: str, timeout_s: float = 30) -> WebElement:
    """The element matching `css`, once it is in the page."""
    def present(d: webdriver.Chrome) -> WebElement | None:
        found = d.find_elements(By.CSS_SELECTOR, css)
        return found[0] if found else None

    return wait_until(driver, f"an element {css!r}", present, timeout_s)


def text_of(driver: webdriver.Chrome, css: str) -> str:
    """The visible text of the first element matching `css` ("" when there is none). Read in one
    step in the page, so a part htmx swaps meanwhile cannot leave a stale element behind."""
    return str(driver.execute_script(
        "const e = document.querySelector(arguments[0]); return e ? e.innerText.trim() : '';", css))


def text(driver: webdriver.Chrome, css: str, timeout_s: float = 30) -> str:
    """The text of the element matching `css`, once it is in the page and says something."""
    return wait_until(driver, f"text in {css!r}", lambda d: text_of(d, css), timeout_s)


def screenshot(driver: webdriver.Chrome, name: str, max_height: int = 0) -> Path:
    """Save the page as docs/screenshots/NAME.png (the README shows these): the viewport, or with
    `max_height` the page from its top down to that many pixels (or its end)."""
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    path = SCREENSHOTS / f"{name}.png"
    # Fonts and images loaded, so the picture is the page a person sees.
    wait_until(driver, "the page's fonts", lambda d: d.execute_script(
        "return document.readyState === 'complete' && document.fonts.status === 'loaded'"))
    if not max_height:
        assert driver.save_screenshot(str(path)), f"could not write {path}"
        return path
    width, height = driver.execute_script(
        "return [document.documentElement.clientWidth, document.documentElement.scrollHeight]")
    shot = driver.execute_cdp_cmd("Page.captureScreenshot", {
        "format": "png", "captureBeyondViewport": True,
        "clip": {"x": 0, "y": 0, "width": width, "height": min(height, max_height), "scale": 1}})
    path.write_bytes(base64.b64decode(shot["data"]))
    return path


def cookies(driver: webdriver.Chrome) -> dict[str, dict[str, Any]]:
    """The browser's cookies for the current site, by name."""
    return {str(c["name"]): dict(c) for c in driver.get_cookies()}


def requested_urls(driver: webdriver.Chrome) -> list[str]:
    """Every URL the browser requested since the last call (documents, scripts, fetches)."""
    urls = []
    for entry in driver.get_log("performance"):
        message = json.loads(entry["message"])["message"]
        if message.get("method") == "Network.requestWillBeSent":
            urls.append(str(message["params"]["request"]["url"]))
    return urls


def console_errors(driver: webdriver.Chrome) -> list[str]:
    """The page console's errors since the last call: a CSP violation, a script error. An HTTP
    error status is not one here (a 403 page is what some tests expect)."""
    return [str(e["message"]) for e in driver.get_log("browser")
            if e["level"] == "SEVERE" and "the server responded with a status of 4" not in e["message"]]


class _Forms(HTMLParser):
    """The CSRF token a page carries: a form's `csrf_token` field or htmx's `hx-headers`."""

    def __init__(self) -> None:
        super().__init__()
        self.token = ""

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        if tag == "input" and a.get("name") == "csrf_token" and a.get("value"):
            self.token = self.token or str(a["value"])
        elif a.get("hx-headers"):
            token = json.loads(str(a["hx-headers"])).get("X-CSRF-Token")
            self.token = self.token or str(token or "")


def csrf_token(html: str) -> str:
    """The CSRF token in a console page ("" when it has none)."""
    parser = _Forms()
    parser.feed(html)
    return parser.token


@dataclass
class Reply:
    status: int
    headers: Message
    text: str

    def cookie_header(self, name: str) -> str:
        """The Set-Cookie header setting `name` ("" when none does)."""
        return next((h for h in self.headers.get_all("Set-Cookie") or []
                     if h.split("=", 1)[0].strip() == name), "")


@dataclass
class Http:
    """Plain HTTP to the console without a browser: cookies kept by name, redirects not followed."""

    base: str
    cookies: dict[str, str] = field(default_factory=dict)

    def call(self, method: str, path: str, form: dict[str, str] | None = None,
             headers: dict[str, str] | None = None) -> Reply:
        host, port = urlsplit(self.base).netloc.split(":")
        conn = http.client.HTTPConnection(host, int(port), timeout=60)
        h = dict(headers or {})
        if self.cookies:
            h["Cookie"] = "; ".join(f"{k}={v}" for k, v in self.cookies.items())
        body = None
        if form is not None:
            body = urlencode(form)
            h["Content-Type"] = "application/x-www-form-urlencoded"
        try:
            conn.request(method, path, body=body, headers=h)
            resp = conn.getresponse()
            reply = Reply(resp.status, resp.headers, resp.read().decode(errors="replace"))
        finally:
            conn.close()
        for header in reply.headers.get_all("Set-Cookie") or []:
            jar: SimpleCookie = SimpleCookie(header)
            for name, morsel in jar.items():
                if morsel["max-age"] == "0" or not morsel.value:
                    self.cookies.pop(name, None)
                else:
                    self.cookies[name] = morsel.value
        return reply

    def sign_in(self, key: str) -> Reply:
        """The sign-in form, filled and posted as a browser would (its CSRF token included)."""
        page = self.call("GET", "/ui/signin")
        assert page.status == 200, page.status
        return self.call("POST", "/ui/signin", {"key": key, "csrf_token": csrf_token(page.text)})


def leaks(server: LlmgwServer, driver: webdriver.Chrome) -> list[str]:
    """Where the admin key shows: in the page, or in any URL the browser requested."""
    found = [u for u in [*requested_urls(driver), driver.current_url] if server.admin_key in u]
    if server.admin_key in driver.page_source:
        found.append(f"the source of {driver.current_url}")
    return found


def visit(driver: webdriver.Chrome, server: LlmgwServer, path: str) -> None:
    """Open `path`; the page loads without console errors (a CSP violation is one) and without
    the admin key in it or in any URL."""
    driver.get(server.url + path)
    wait_until(driver, f"{path} to load", lambda d: d.execute_script(
        "return document.readyState") == "complete")
    assert not leaks(server, driver)
    assert not console_errors(driver), path


def sign_in(driver: webdriver.Chrome, server: LlmgwServer, key: str) -> None:
    """Sign in with `key` through the form, starting from no session."""
    driver.delete_all_cookies()
    visit(driver, server, "/ui/signin")
    find(driver, "#signin-key").send_keys(key)
    find(driver, "#signin-submit").click()
    find(driver, "nav#nav")
    assert not leaks(server, driver)


def post_target(driver: webdriver.Chrome, css: str) -> str:
    """The path a button or form posts to (its hx-post, its formaction, or its form's action)."""
    return str(driver.execute_script(
        "const e = document.querySelector(arguments[0]);"
        "const f = e.closest('form');"
        "const t = e.getAttribute('hx-post') || e.getAttribute('formaction')"
        " || (f && (f.getAttribute('hx-post') || f.getAttribute('action')));"
        "return new URL(t, location.href).pathname;", css))


def confirmed(driver: webdriver.Chrome, css: str, *, accept: bool) -> None:
    """Click the button `css`, which asks to confirm first, and answer the browser's question."""
    find(driver, css).click()
    alert = wait_until(driver, "the confirmation", lambda d: EC.alert_is_present()(d))
    alert.accept() if accept else alert.dismiss()
