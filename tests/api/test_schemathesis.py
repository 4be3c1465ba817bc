"""The whole HTTP API, fuzzed from its OpenAPI document against the real app on a real socket.

Two fresh installs (no models, guard off) run in one background event loop: the data-plane
operations go to one that nothing ever changes, the admin operations to the other (adding
models there would make later data-plane answers legitimately 503). Serve jobs and hub models
fetch from an HF_ENDPOINT that refuses connections, so they fail at once instead of downloading.

Checks: no 5xx at all, every 4xx in OpenAI's error shape, and every response's content type (and,
where the document describes it, its body) as the document declares. Generation is derandomized
and the seed fixed, so a failure reproduces; the server's log of a failing case is in pytest's
captured log.
"""

from __future__ import annotations

import asyncio
import socket
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote

import hypothesis
import pytest
import requests
import schemathesis
from aiohttp import web
from huggingface_hub import constants
from huggingface_hub.utils import _detect_agent
from schemathesis import Case, CheckContext, Response
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import content_type_conformance, response_schema_conformance

from llmgw.api.registry import spec
from tests.api.test_openapi import build

CONFIG = schemathesis.Config.from_dict({
    "seed": 20260101,
    "generation": {
        "max-examples": 100,
        "deterministic": True,
        "database": "none",
        "with-security-parameters": False,
    },
})
schema = schemathesis.openapi.from_dict(spec(), config=CONFIG)


def anthropic_error(body: Any) -> bool:
    """`{"type": "error", "error": {"type", "message"}}` and nothing else."""
    error = body.get("error") if isinstance(body, dict) and body.get("type") == "error" else None
    return (isinstance(body, dict) and set(body) == {"type", "error"} and isinstance(error, dict)
            and set(error) == {"type", "message"} and isinstance(error["type"], str)
            and isinstance(error["message"], str) and error["message"] != "")


def jsonrpc_error(body: Any) -> bool:
    """`{"jsonrpc": "2.0", "id", "error": {"code", "message"}}` and nothing else."""
    error = body.get("error") if isinstance(body, dict) else None
    return (isinstance(body, dict) and set(body) == {"jsonrpc", "id", "error"}
            and body["jsonrpc"] == "2.0" and isinstance(error, dict)
            and isinstance(error.get("code"), int) and isinstance(error.get("message"), str)
            and error["message"] != "")


@schemathesis.check
def openai_error_shape(ctx: CheckContext, response: Response, case: Case) -> bool | None:
    """Every 4xx body is `{"error": {"message", "type", "param", "code"}}` and nothing else (on
    Anthropic's paths, Anthropic's shape and nothing else; on `/mcp`, JSON-RPC's)."""
    if not 400 <= response.status_code < 500:
        return None
    try:
        body = response.json()
    except ValueError:
        body = None
    # A method /mcp does not serve (GET, TRACE...) is the router's 405, in OpenAI's shape.
    if case.path.startswith("/mcp") and response.status_code != 405:
        assert jsonrpc_error(body), (
            f"{response.status_code} body is not a JSON-RPC error: {response.text[:500]}")
        return True
    if case.path.startswith("/v1/messages"):
        assert anthropic_error(body), (
            f"{response.status_code} body is not an Anthropic error: {response.text[:500]}")
        return True
    error = body.get("error") if isinstance(body, dict) and set(body) == {"error"} else None
    fine = (
        isinstance(error, dict)
        and set(error) == {"message", "type", "param", "code"}
        and isinstance(error["message"], str) and error["message"] != ""
        and isinstance(error["type"], str)
        and isinstance(error["param"], str | None)
        and isinstance(error["code"], str | None)
    )
    assert fine, f"{response.status_code} body is not an OpenAI error: {response.text[:500]}"
    return True


# The success bodies the document describes are checked too.
CHECKS = [not_a_server_error, openai_error_shape, content_type_conformance, response_schema_conformance]


@dataclass
class Installs:
    """Two fresh installs served from a background thread, and the admin key of each."""

    root: Path
    urls: dict[str, str] = field(default_factory=dict)
    keys: dict[str, str] = field(default_factory=dict)
    key_ids: dict[str, str] = field(default_factory=dict)
    error: BaseException | None = None
    _ready: threading.Event = field(default_factory=threading.Event)
    _loop: asyncio.AbstractEventLoop | None = None
    _stop: asyncio.Event | None = None
    _thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="llmgw-under-test", daemon=True)
        self._thread.start()
        assert self._ready.wait(60), "the servers did not start within 60 s"
        if self.error is not None:
            raise self.error

    def stop(self) -> None:
        if self._loop is not None and self._stop is not None:
            self._loop.call_soon_threadsafe(self._stop.set)
        if self._thread is not None:
            self._thread.join(60)
            assert not self._thread.is_alive(), "the servers did not stop within 60 s"

    def _run(self) -> None:
        try:
            asyncio.run(self._serve())
        except BaseException as exc:
            self.error = exc
            self._ready.set()

    async def _serve(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()
        runners: list[web.AppRunner] = []
        try:
            for name in ("data", "admin"):
                app, store, key = build(self.root / name)
                runner = web.AppRunner(app, access_log=None)
                runners.append(runner)
                await runner.setup()
                site = web.TCPSite(runner, "127.0.0.1", 0)
                await site.start()
                host, port = runner.addresses[0][:2]
                self.urls[name] = f"http://{host}:{port}"
                self.keys[name] = key
                (own,) = store.keys.list()  # init made just the admin key
                self.key_ids[name] = own.id
            self._ready.set()
            await self._stop.wait()
        finally:
            for runner in reversed(runners):
                await runner.cleanup()


@pytest.fixture(scope="module")
def installs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Installs]:
    # A port bound but not listening: every connection to it is refused at once.
    with socket.socket() as closed, pytest.MonkeyPatch.context() as mp:
        closed.bind(("127.0.0.1", 0))
        hub = f"http://127.0.0.1:{closed.getsockname()[1]}"
        mp.setenv("HF_ENDPOINT", hub)
        # huggingface_hub reads HF_ENDPOINT at import, into these two.
        mp.setattr(constants, "ENDPOINT", hub)
        mp.setattr(constants, "HUGGINGFACE_CO_URL_TEMPLATE",
                   hub + "/{repo_id}/resolve/{revision}/{filename}")
        mp.setattr(constants, "HF_HUB_OFFLINE", False)
        mp.setattr(_detect_agent, "_registry", _detect_agent._EMPTY_REGISTRY)
        for var in ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN"):
            mp.delenv(var, raising=False)
        servers = Installs(tmp_path_factory.mktemp("schemathesis"))
        servers.start()
        try:
            yield servers
        finally:
            servers.stop()


@schema.parametrize()
def test_api(case: Case, installs: Installs) -> None:
    which = "admin" if case.path.startswith("/admin/") else "data"
    base = installs.urls[which]
    headers = {"Authorization": f"Bearer {installs.keys[which]}"}
    if case.path in ("/admin/v1/keys/{id}/revoke", "/admin/v1/keys/{id}/rotate"):
        # The one constraint: the run never revokes the key it authenticates with.
        ref = str((case.path_parameters or {}).get("id", ""))
        found = requests.get(f"{base}/admin/v1/keys/{quote(ref, safe='')}", headers=headers, timeout=10)
        if found.status_code == 200 and found.json()["id"] == installs.key_ids[which]:
            hypothesis.reject()
    case.call_and_validate(base_url=base, headers=headers, checks=CHECKS)


def test_the_run_stayed_authenticated(installs: Installs) -> None:
    for which in ("data", "admin"):
        headers = {"Authorization": f"Bearer {installs.keys[which]}"}
        got = requests.get(f"{installs.urls[which]}/admin/v1/keys", headers=headers, timeout=10)
        assert got.status_code == 200, got.text
