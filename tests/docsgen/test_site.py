"""The docs site as a reader sees it: built with `mkdocs build --strict`, every page rendered in
a real headless Chromium, and the home page and a reference page seen not to be blank."""

from __future__ import annotations

import functools
import io
import os
import re
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import urlsplit

import matplotlib.image
import pytest
from selenium import webdriver
from selenium.webdriver.common.by import By

from tests.support.browser import DESKTOP, chrome, wait_until

ROOT = Path(__file__).resolve().parents[2]


def build_site(out: Path) -> subprocess.CompletedProcess[str]:
    """`mkdocs build --strict` of the repository's site into `out`."""
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    return subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-d", str(out)],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("site")
    done = build_site(out)
    assert done.returncode == 0, f"mkdocs build --strict failed:\n{done.stderr[-4000:]}"
    return out


@pytest.fixture(scope="module")
def served(site: Path) -> Iterator[str]:
    """The built site over HTTP on a free port, as `mkdocs serve` would show it."""

    class Quiet(SimpleHTTPRequestHandler):
        def log_message(self, format: str, *args: object) -> None:
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(Quiet, directory=str(site)))
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}/"
    httpd.shutdown()
    httpd.server_close()


@pytest.fixture(scope="module")
def browser(tmp_path_factory: pytest.TempPathFactory) -> Iterator[webdriver.Chrome]:
    driver = chrome(tmp_path_factory.mktemp("chromium-docs"), DESKTOP)
    yield driver
    driver.quit()


def pages(site: Path) -> list[str]:
    """Every page of the site, as its path below the root ("" for the home page)."""
    found = []
    for html in sorted(site.rglob("index.html")):
        rel = html.parent.relative_to(site).as_posix()
        found.append("" if rel == "." else rel + "/")
    return found


def local_errors(driver: webdriver.Chrome, base: str) -> list[str]:
    """The page's console errors, but for scripts the site loads from the internet (the diagram
    renderer comes from a CDN, which a machine without the internet cannot reach)."""
    host = urlsplit(base).netloc
    return [str(e["message"]) for e in driver.get_log("browser")
            if e["level"] == "SEVERE" and (host in e["message"] or "http" not in e["message"])]


# [diagrams in the page, diagrams drawn]: the theme swaps each `pre.mermaid` for a `div.mermaid`
# holding the drawn SVG in a closed shadow root, so a drawn diagram is seen by its height.
DIAGRAMS = """
const blocks = document.querySelectorAll("pre.mermaid, div.mermaid");
const drawn = [...document.querySelectorAll("div.mermaid")].filter(d => d.offsetHeight > 40);
return [blocks.length, drawn.length];
"""


def diagrams_drawn(driver: webdriver.Chrome) -> bool:
    blocks, drawn = driver.execute_script(DIAGRAMS)
    return bool(blocks == drawn)


def blankness(png: bytes) -> float:
    """How far from one flat colour a screenshot is: the pixels' standard deviation (0 = blank)."""
    pixels = matplotlib.image.imread(io.BytesIO(png), format="png")
    return float(pixels[..., :3].std())


def test_the_site_builds_strict_with_every_section(site: Path) -> None:
    for section in ("getting-started", "concepts", "how-to", "reference"):
        assert (site / section).is_dir(), f"no {section}/ in the built site"
    for page in ("guarantees", "benchmarks", "reference/cli", "reference/config",
                 "reference/http-api", "reference/metrics", "reference/errors"):
        assert (site / page / "index.html").is_file(), f"no page {page}"


def test_a_broken_link_fails_the_build(tmp_path: Path) -> None:
    """The strictness the other tests rely on: a link to a page that does not exist fails."""
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "index.md").write_text("# Home\n\nSee [the missing page](missing.md).\n")
    (tmp_path / "mkdocs.yml").write_text("site_name: t\nstrict: true\n")
    done = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-d",
                           str(tmp_path / "out")], cwd=tmp_path, capture_output=True, text=True,
                          env={**os.environ, "NO_MKDOCS_2_WARNING": "1"}, timeout=120)
    assert done.returncode != 0
    assert "missing.md" in done.stderr


def test_every_page_renders_in_chromium(site: Path, served: str, browser: webdriver.Chrome) -> None:
    every = pages(site)
    assert len(every) >= 30, f"the site has only {len(every)} pages"
    browser.get_log("browser")  # from before this test
    drawn = 0
    for path in every:
        browser.get(served + path)
        title = wait_until(browser, f"{path} rendered",
                           lambda d: d.find_element(By.CSS_SELECTOR, "article h1").text.strip())
        body = browser.find_element(By.CSS_SELECTOR, "article").text
        assert len(body) > 40, f"{path or 'home'} ({title}) renders almost nothing: {body!r}"
        wait_until(browser, f"the diagrams of {path or 'home'} drawn", diagrams_drawn)
        assert local_errors(browser, served) == [], f"{path or 'home'} logged errors"
        drawn += browser.execute_script(DIAGRAMS)[1]
    # The concept pages have one or more each: they were drawn here, without the internet.
    assert drawn >= 9, f"only {drawn} diagrams drawn on the whole site"


@pytest.mark.parametrize("path", ["", "reference/cli/"])
def test_the_page_seen_is_not_blank(served: str, browser: webdriver.Chrome, path: str) -> None:
    browser.get(served + path)
    wait_until(browser, "the page's heading", lambda d: d.find_element(By.CSS_SELECTOR, "article h1"))
    shot = browser.get_screenshot_as_png()
    # A page of text, a header bar and a navigation varies; a blank or failed page is one colour.
    assert blankness(shot) > 0.05, f"the screenshot of /{path} is blank"


def test_a_blank_screenshot_is_seen_as_blank(browser: webdriver.Chrome) -> None:
    """The check above can fail: an empty page's screenshot measures as blank."""
    browser.get("about:blank")
    assert blankness(browser.get_screenshot_as_png()) < 0.01


def test_a_pipe_in_a_tables_code_shows_without_the_escape_github_needs(site: Path) -> None:
    page = (site / "how-to" / "teams-and-budgets" / "index.html").read_text(encoding="utf-8")
    assert "<code>--scope user|admin|node|metrics</code>" in page
    escaped = [str(p.relative_to(site)) for p in site.rglob("*.html")
               if re.search(r"<code>[^<]*\\\|", p.read_text(encoding="utf-8"))]
    assert escaped == [], f"code shows a backslash before a pipe in {escaped}"


# The code in tables' first columns (what names the rows: error codes, options, variables) that
# the browser broke inside a word: a line break after a character that is neither a space nor a
# hyphen, found from where each character is drawn.
BROKEN_CODE = """
const broken = [];
for (const code of document.querySelectorAll("article table td:first-child code")) {
  const walker = document.createTreeWalker(code, NodeFilter.SHOW_TEXT);
  let top = null, before = "";
  for (let node = walker.nextNode(); node; node = walker.nextNode()) {
    for (let i = 0; i < node.length; i++) {
      const range = document.createRange();
      range.setStart(node, i);
      range.setEnd(node, i + 1);
      const box = range.getBoundingClientRect();
      const ch = node.data[i];
      if (!/\\s/.test(ch) && box.height > 0) {
        if (top !== null && box.top > top + 2 && !/[\\s-]/.test(before)) broken.push(code.textContent);
        top = box.top;
      }
      before = ch;
    }
  }
}
return broken;
"""


@pytest.mark.parametrize("width", [DESKTOP[0], 900])
def test_no_code_naming_a_table_row_breaks_mid_word(served: str, browser: webdriver.Chrome,
                                                    width: int) -> None:
    browser.execute_cdp_cmd("Emulation.setDeviceMetricsOverride", {
        "width": width, "height": DESKTOP[1], "deviceScaleFactor": 1, "mobile": False})
    try:
        for path in ("reference/errors/", "how-to/guard-a-model/", "reference/config/",
                     "how-to/teams-and-budgets/"):
            browser.get(served + path)
            wait_until(browser, f"{path} rendered",
                       lambda d: d.find_element(By.CSS_SELECTOR, "article table code"))
            assert browser.execute_script(BROKEN_CODE) == [], f"{path} at {width} px"
    finally:
        browser.execute_cdp_cmd("Emulation.setDeviceMetricsOverride", {
            "width": DESKTOP[0], "height": DESKTOP[1], "deviceScaleFactor": 1, "mobile": False})
