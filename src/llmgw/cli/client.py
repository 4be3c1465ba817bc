"""The admin API client `llmgw ctl` uses: URL and key from flags, env or a config file."""

from __future__ import annotations

import json
import os
import tomllib
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

DEFAULT_URL = "http://127.0.0.1:8080"
# Where ctl finds the URL and the admin key when no flag gives them, as its help names them.
URL_ENV = "LLMGW_URL"
KEY_ENV = "LLMGW_ADMIN_KEY"
CONFIG_ENV = "LLMGW_CTL_CONFIG"
CONFIG_FILE = "~/.config/llmgw/ctl.toml"


class CtlError(Exception):
    """A failure to show the operator as one line, without a traceback."""


def config_path() -> Path:
    """`$LLMGW_CTL_CONFIG`, else `~/.config/llmgw/ctl.toml`."""
    env = os.environ.get(CONFIG_ENV)
    return Path(env) if env else Path(CONFIG_FILE).expanduser()


def write_config(url: str, key: str, path: Path | None = None) -> Path:
    """Save the URL and admin key for later `ctl` calls (readable by the owner only)."""
    path = path or config_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(f'url = "{url}"\nkey = "{key}"\n')
    return path


@dataclass(frozen=True)
class AdminClient:
    url: str
    key: str = field(repr=False)
    timeout_s: float = 30.0

    @classmethod
    def resolve(cls, url: str | None, key: str | None) -> AdminClient:
        """Flags win over env (LLMGW_URL, LLMGW_ADMIN_KEY), env over the config file."""
        file: dict[str, Any] = {}
        path = config_path()
        if path.exists():
            try:
                file = tomllib.loads(path.read_text(encoding="utf-8"))
            except (OSError, tomllib.TOMLDecodeError) as exc:
                raise CtlError(f"cannot read {path}: {exc}") from exc
        url = url or os.environ.get(URL_ENV) or file.get("url") or DEFAULT_URL
        key = key or os.environ.get(KEY_ENV) or file.get("key")
        if not key:
            raise CtlError(f"no admin key: pass --key, set {KEY_ENV}, or write it to {path}")
        key = key.strip()
        if not key.isprintable():
            # http.client would refuse the header with a traceback that quotes the key.
            raise CtlError("the admin key holds a control character (a stray newline?): check "
                           f"--key, {KEY_ENV} or {path}")
        return cls(url.rstrip("/"), key)

    def call(self, method: str, path: str, body: Any = None) -> Any:
        """One admin API call; errors become CtlError with the server's message."""
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(
            self.url + path,
            data=data,
            method=method,
            headers={"Authorization": f"Bearer {self.key}", "Content-Type": "application/json"},
        )
        try:
            with urllib.request.urlopen(req, timeout=self.timeout_s) as resp:
                return json.loads(resp.read() or b"null")
        except urllib.error.HTTPError as exc:
            raise CtlError(f"{exc.code}: {_message(exc.read())}") from exc
        except (urllib.error.URLError, OSError) as exc:
            reason = getattr(exc, "reason", exc)
            raise CtlError(f"cannot reach llmgw at {self.url}: {reason}") from exc


def quote(name: str) -> str:
    """A model name as a path segment ('/' stays, since the admin routes accept it)."""
    return urllib.parse.quote(name, safe="/:")


def _message(raw: bytes) -> str:
    try:
        return str(json.loads(raw)["error"]["message"])
    except (ValueError, KeyError, TypeError):
        return raw.decode("utf-8", "replace")[:500]
