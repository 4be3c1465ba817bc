"""A real OpenID provider for tests: `tests/oidc/provider.mjs`, which runs the npm package
`oidc-provider` (an OpenID Certified provider) under Debian's `node`, with one confidential
client and a few test accounts (`scripts/test.sh` installs node and the package, pinned by
`tests/oidc/package-lock.json`).

Each test that needs one starts its own, on a free port of its own with its config in the
test's temp dir: `oidc_provider` is the fixture; `running_provider(dir, ...)` starts one with
another client or accounts (a test that runs llmgw passes llmgw's callback as a redirect URI).
While it runs, a test changes its users through `set_account`, `remove_account` and
`end_sessions` (the script's admin API, see its header). `Browser` is a user agent in plain
HTTP that signs in through the provider's own login and consent pages.

The process runs in its own process group with its stdin on a pipe from this process: teardown
terminates the group, and should the test run itself be killed, the closed pipe ends it."""

from __future__ import annotations

import json
import os
import secrets
import selectors
import shutil
import subprocess
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from html.parser import HTMLParser
from pathlib import Path
from typing import Any
from urllib.parse import quote, urljoin

import httpx2
import pytest

from tests.support.server_process import stop_group

OIDC_DIR = Path(__file__).resolve().parents[1] / "oidc"
SCRIPT = OIDC_DIR / "provider.mjs"
START_TIMEOUT_S = 30.0
ADMIN_TIMEOUT_S = 10.0


@dataclass(frozen=True)
class Account:
    """A user at the provider; `login` on its form takes the sub or the email."""

    sub: str
    password: str
    email: str
    name: str
    groups: tuple[str, ...] = ()
    # None: the ID token carries no email_verified claim at all.
    email_verified: bool | None = True

    def to_json(self) -> dict[str, Any]:
        """The account as the provider's config and admin API take it."""
        account: dict[str, Any] = {"sub": self.sub, "password": self.password,
                                   "email": self.email, "name": self.name,
                                   "groups": list(self.groups)}
        if self.email_verified is not None:
            account["email_verified"] = self.email_verified
        return account


ADMIN = Account("alice", "alice-password", "alice@example.test", "Alice Admin", ("llmgw-admins",))
USER = Account("bob", "bob-password", "bob@example.test", "Bob User", ("llmgw-users",))
DEFAULT_ACCOUNTS = (ADMIN, USER)
DEFAULT_REDIRECT_URI = "http://127.0.0.1:9/console/oidc/callback"  # a test without llmgw never follows it


def node_binary() -> str:
    """`node`, or an assertion failure saying how to get it (tests never skip)."""
    found = shutil.which("node")
    if not found:
        raise AssertionError("node was not found: apt-get install nodejs npm, or run scripts/test.sh "
                             "(it installs them)")
    return found


def check_installed() -> None:
    """Fail clearly when `npm ci` has not been run in tests/oidc."""
    if not (OIDC_DIR / "node_modules" / "oidc-provider" / "package.json").is_file():
        raise AssertionError(f"oidc-provider is not installed in {OIDC_DIR}/node_modules: run "
                             "`npm ci` there, or scripts/test.sh (it does)")


@dataclass
class OidcProvider:
    """One provider process; `issuer` is set once it answers. Fields before `start()` are its
    config: the client, the accounts and the TTLs (seconds) of ID tokens and sessions."""

    dir: Path
    client_id: str = "llmgw-console"
    client_secret: str = field(default_factory=lambda: secrets.token_urlsafe(24))
    redirect_uris: Sequence[str] = (DEFAULT_REDIRECT_URI,)
    post_logout_redirect_uris: Sequence[str] = ()
    token_endpoint_auth_method: str = "client_secret_basic"  # or client_secret_post
    accounts: dict[str, Account] = field(
        default_factory=lambda: {a.sub: a for a in DEFAULT_ACCOUNTS})
    id_token_ttl_s: int = 3600
    session_ttl_s: int = 86400
    admin_token: str = field(default_factory=lambda: secrets.token_urlsafe(24))
    issuer: str = ""
    proc: subprocess.Popen[bytes] | None = None

    @property
    def config_path(self) -> Path:
        """The config file the script reads (written by `start`)."""
        return self.dir / "oidc-provider.json"

    @property
    def log_path(self) -> Path:
        """Where the script's stderr goes."""
        return self.dir / "oidc-provider.log"

    @property
    def discovery_url(self) -> str:
        """The provider's discovery document."""
        return f"{self.issuer}/.well-known/openid-configuration"

    def log(self) -> str:
        """What the provider wrote to stderr so far."""
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def _config(self) -> dict[str, Any]:
        return {
            "client": {"client_id": self.client_id, "client_secret": self.client_secret,
                       "redirect_uris": list(self.redirect_uris),
                       "post_logout_redirect_uris": list(self.post_logout_redirect_uris),
                       "token_endpoint_auth_method": self.token_endpoint_auth_method},
            "accounts": [a.to_json() for a in self.accounts.values()],
            "ttl": {"id_token": self.id_token_ttl_s, "session": self.session_ttl_s},
            "admin_token": self.admin_token,
        }

    def start(self) -> None:
        """Start the process and return once its discovery document answers."""
        node = node_binary()
        check_installed()
        self.dir.mkdir(parents=True, exist_ok=True)
        self.config_path.write_text(json.dumps(self._config(), indent=2))
        with self.log_path.open("ab") as log:
            # Port 0: the script binds a free port itself and reports it, so no other process can
            # take the port between choosing and binding it.
            self.proc = subprocess.Popen(
                [node, str(SCRIPT), "--config", str(self.config_path), "--port", "0",
                 "--exit-with-stdin"],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log, cwd=OIDC_DIR,
                start_new_session=True)
        self.issuer = self._await_ready()
        discovery = httpx2.get(self.discovery_url, timeout=ADMIN_TIMEOUT_S, trust_env=False)
        assert discovery.status_code == 200, f"discovery answered {discovery.status_code}\n{self.log()}"
        assert discovery.json()["issuer"] == self.issuer

    def _await_ready(self) -> str:
        # The script writes one line to stdout once it listens: wait for that line (or its exit).
        assert self.proc is not None and self.proc.stdout is not None
        line = b""
        deadline = time.monotonic() + START_TIMEOUT_S
        with selectors.DefaultSelector() as sel:
            sel.register(self.proc.stdout, selectors.EVENT_READ)
            while not line.endswith(b"\n"):
                left = deadline - time.monotonic()
                if left <= 0 or not sel.select(left):
                    self.stop()
                    raise AssertionError(f"the OIDC provider did not start in {START_TIMEOUT_S}s:\n"
                                         f"{self.log()}")
                chunk = os.read(self.proc.stdout.fileno(), 4096)
                if not chunk:
                    code = self.proc.wait(5)
                    raise AssertionError(f"the OIDC provider exited ({code}) before it answered:\n"
                                         f"{self.log()}")
                line += chunk
        issuer: str = json.loads(line)["issuer"]
        return issuer

    def stop(self) -> None:
        """Terminate its process group and reap it (killed if it has not gone in 5 s)."""
        proc, self.proc = self.proc, None
        if proc is None:
            return
        stop_group(proc)

    def _admin(self, method: str, path: str, body: Mapping[str, Any] | None = None) -> Any:
        response = httpx2.request(
            method, f"{self.issuer}/__test{path}", json=body, timeout=ADMIN_TIMEOUT_S, trust_env=False,
            headers={"Authorization": f"Bearer {self.admin_token}"})
        assert response.status_code == 200, (
            f"{method} /__test{path} answered {response.status_code}: {response.text}\n{self.log()}")
        return response.json()

    def provider_accounts(self) -> list[dict[str, Any]]:
        """The accounts as the running provider holds them."""
        accounts: list[dict[str, Any]] = self._admin("GET", "/accounts")
        return accounts

    def set_account(self, account: Account) -> None:
        """Add or replace an account (to demote one, give it other groups). Its sessions stay;
        the tokens issued from now on carry its new claims."""
        self._admin("PUT", f"/accounts/{quote(account.sub, safe='')}", account.to_json())
        self.accounts[account.sub] = account

    def set_groups(self, sub: str, groups: Sequence[str]) -> Account:
        """Give an account other groups (promote or demote it); returns the new account."""
        account = replace(self.accounts[sub], groups=tuple(groups))
        self.set_account(account)
        return account

    def remove_account(self, sub: str) -> None:
        """Remove an account and end its sessions: its next sign-in fails."""
        self._admin("DELETE", f"/accounts/{quote(sub, safe='')}")
        del self.accounts[sub]

    def end_sessions(self, sub: str) -> int:
        """End an account's sessions at the provider (it must sign in again); how many ended."""
        ended: int = self._admin("POST", f"/accounts/{quote(sub, safe='')}/logout")["ended"]
        return ended


@contextmanager
def running_provider(dir: Path, **config: Any) -> Iterator[OidcProvider]:
    """A started provider (`config`: OidcProvider's fields), stopped and reaped on exit."""
    provider = OidcProvider(dir, **config)
    try:
        provider.start()
        yield provider
    finally:
        provider.stop()


@pytest.fixture
def oidc_provider(tmp_path: Path) -> Iterator[OidcProvider]:
    """A fresh provider with the default client and accounts, stopped at the end of the test."""
    with running_provider(tmp_path / "oidc") as provider:
        yield provider


@dataclass
class Form:
    """A form of a page: where it posts, its named inputs' values, and its buttons by id with the
    name and value each adds to the submission."""

    id: str
    action: str
    fields: dict[str, str] = field(default_factory=dict)
    buttons: dict[str, tuple[str, str]] = field(default_factory=dict)


class _Forms(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.forms: list[Form] = []
        self.open: Form | None = None
        self.outside: list[dict[str, str]] = []  # buttons naming their form with form="ID"

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = {k: v or "" for k, v in attrs}
        if tag == "form":
            self.open = Form(a.get("id", ""), a.get("action", ""))
            self.forms.append(self.open)
        elif tag == "button" and a.get("form"):
            self.outside.append(a)
        elif self.open is not None and tag == "button":
            self.open.buttons[a.get("id", "")] = (a.get("name", ""), a.get("value", ""))
        elif self.open is not None and tag == "input" and a.get("name"):
            self.open.fields[a["name"]] = a.get("value", "")

    def handle_endtag(self, tag: str) -> None:
        if tag == "form":
            self.open = None


def forms(html: str) -> list[Form]:
    """The forms of an HTML page."""
    parser = _Forms()
    parser.feed(html)
    by_id = {f.id: f for f in parser.forms if f.id}
    for a in parser.outside:
        if a["form"] in by_id:
            by_id[a["form"]].buttons[a.get("id", "")] = (a.get("name", ""), a.get("value", ""))
    return parser.forms


class Browser:
    """A user agent in plain HTTP: keeps the provider's cookies and follows its redirects, but
    stops at a redirect that leaves the provider (to the client's redirect URI, say)."""

    def __init__(self, provider: OidcProvider) -> None:
        self.issuer = provider.issuer
        self.http = httpx2.Client(trust_env=False, timeout=ADMIN_TIMEOUT_S)

    def close(self) -> None:
        """Close its connections."""
        self.http.close()

    def __enter__(self) -> Browser:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _follow(self, response: httpx2.Response) -> httpx2.Response:
        while response.is_redirect:
            target = urljoin(str(response.url), response.headers["location"])
            if not target.startswith(self.issuer + "/"):
                break
            response = self.http.get(target)
        return response

    def open(self, url: str) -> httpx2.Response:
        """GET `url`; the provider's page it ends on, or the redirect that leaves it."""
        return self._follow(self.http.get(url))

    def press(self, page: httpx2.Response, button_id: str, **values: str) -> httpx2.Response:
        """Fill the form holding button `button_id` with `values` and submit it."""
        form = next((f for f in forms(page.text) if button_id in f.buttons), None)
        assert form is not None, f"no button #{button_id} on {page.url}:\n{page.text}"
        data = {**form.fields, **values}
        name, value = form.buttons[button_id]
        if name:  # a browser sends the pressed button's name and value too
            data[name] = value
        return self._follow(self.http.post(urljoin(str(page.url), form.action), data=data))

    def sign_in(self, authorization_url: str, login: str, password: str) -> httpx2.Response:
        """Open the authorization URL, sign in if the provider asks, consent if it asks; the
        response it ends on (a redirect to the client when it all went through)."""
        page = self.open(authorization_url)
        if 'name="password"' in page.text:
            page = self.press(page, "sign-in", login=login, password=password)
        if page.status_code == 200 and 'id="consent"' in page.text:
            page = self.press(page, "consent")
        return page
