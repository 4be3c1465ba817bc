"""What a secret looks like where it may ride in a value shown to people: fields named for a
secret, and URLs with credentials or a query. The audit log, the admin API's catalog reads and
everything built on them (the console, `ctl`) hide them the same way, here.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any
from urllib.parse import urlsplit, urlunsplit

# Fields never shown, at any depth: key hashes and secrets, provider keys, join tokens,
# passwords. A field is dropped when its name is one of these or ends with one.
SECRET_FIELDS = ("hash", "secret", "api_key", "token", "password", "plaintext", "authorization")
HIDDEN = "***"


def url(value: str) -> str:
    """`value` with its credentials (`user:password@`, sent as Basic auth) and every query value
    (a provider's `?api_key=…`, a signature) replaced by `***`, and without its fragment; the
    scheme, host, port, path and the query's names stay, so a reader still sees where it goes.
    Made without parsing the port, so a URL with a bad one is hidden as well."""
    parts = urlsplit(value)
    if "@" not in parts.netloc and not parts.query and not parts.fragment:
        return value
    host = parts.netloc.rpartition("@")[2]
    netloc = f"{HIDDEN}@{host}" if "@" in parts.netloc else host
    query = "&".join(f"{name}={HIDDEN}" if sep else HIDDEN
                     for name, sep, _ in (p.partition("=") for p in parts.query.split("&")))
    return urlunsplit((parts.scheme, netloc, parts.path, query if parts.query else "", ""))


# Environment variables whose value is hidden where a process's environment is shown (an MCP
# server's): those whose name ends with a secret field's, or with one of these.
SECRET_ENV = (*SECRET_FIELDS, "key", "pat", "credential", "credentials")


def env(values: Mapping[str, str]) -> dict[str, str]:
    """An environment as shown: the values of variables named like a secret (`GITHUB_TOKEN`,
    `OPENAI_API_KEY`, `GH_PAT`) replaced by `***`."""
    return {k: HIDDEN if k.lower().endswith(SECRET_ENV) else v for k, v in values.items()}


def scrubbed(value: Any) -> Any:
    """`value` (JSON-like) without the fields that could hold a secret, and URLs (`…url`
    fields) hidden as `url` hides them."""
    if isinstance(value, Mapping):
        return {k: url(v) if str(k).lower().endswith("url") and isinstance(v, str) else scrubbed(v)
                for k, v in value.items()
                if not any(str(k).lower().endswith(s) for s in SECRET_FIELDS)}
    if isinstance(value, list | tuple):
        return [scrubbed(v) for v in value]
    return value
