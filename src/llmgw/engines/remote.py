"""Remote OpenAI-compatible providers: where requests go and with what credentials."""

from __future__ import annotations

import os
from collections.abc import Collection

from llmgw.core.errors import ConfigError
from llmgw.core.names import PROVIDER_KEY_RULE, provider_key_allowed
from llmgw.core.types import RemoteSource


def endpoint(source: RemoteSource) -> str:
    """The provider's base URL, to which `/chat/completions` etc. are appended."""
    return source.base_url


def auth_headers(source: RemoteSource, allowed: Collection[str] = ()) -> dict[str, str]:
    """The Authorization header for the provider, read from the server's environment, only from
    a variable the rules allow (`allowed`: config's `provider_key_env`)."""
    if not source.api_key_env:
        return {}
    # Checked again here, not only when the model was added: a row stored before the rule
    # existed (or written around the API) must not send another variable upstream.
    if not provider_key_allowed(source.api_key_env, allowed):
        raise ConfigError(f"the model's api_key_env {PROVIDER_KEY_RULE}")
    value = os.environ.get(source.api_key_env)
    if not value:
        raise ConfigError(f"environment variable {source.api_key_env} is not set on the server")
    return {"Authorization": f"Bearer {value}"}
