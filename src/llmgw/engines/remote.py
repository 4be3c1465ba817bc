"""Remote OpenAI-compatible providers: where requests go and with what credentials."""

from __future__ import annotations

import os

from llmgw.core.errors import ConfigError
from llmgw.core.types import RemoteSource


def endpoint(source: RemoteSource) -> str:
    """The provider's base URL, to which `/chat/completions` etc. are appended."""
    return source.base_url


def auth_headers(source: RemoteSource) -> dict[str, str]:
    """The Authorization header for the provider, read from the server's environment."""
    if not source.api_key_env:
        return {}
    value = os.environ.get(source.api_key_env)
    if not value:
        raise ConfigError(f"environment variable {source.api_key_env} is not set on the server")
    return {"Authorization": f"Bearer {value}"}
