"""Remote providers: where requests go and with what credentials, in the dialect each speaks."""

from __future__ import annotations

import os
from collections.abc import Collection

from llmgw.core.errors import ConfigError
from llmgw.core.names import PROVIDER_KEY_RULE, provider_key_allowed
from llmgw.core.types import ProviderApi, RemoteSource

# The Messages API version every request names; this one is what the Messages API documents
# and what the translations write.
ANTHROPIC_VERSION = "2023-06-01"


def endpoint(source: RemoteSource) -> str:
    """The provider's base URL, to which `/chat/completions` (or `/messages`) is appended."""
    return source.base_url


def auth_headers(source: RemoteSource, allowed: Collection[str] = ()) -> dict[str, str]:
    """The headers that authenticate to the provider in its dialect, the key read from the server's
    environment, only from a variable the rules allow (`allowed`: config's `provider_key_env`).

    An Anthropic provider always gets `anthropic-version`, with or without a key: the Messages API
    refuses a request without it.
    """
    headers = {"anthropic-version": ANTHROPIC_VERSION} if source.api == ProviderApi.ANTHROPIC else {}
    if not source.api_key_env:
        return headers
    # Checked again here, not only when the model was added: a row stored before the rule
    # existed (or written around the API) must not send another variable upstream.
    if not provider_key_allowed(source.api_key_env, allowed):
        raise ConfigError(f"the model's api_key_env {PROVIDER_KEY_RULE}")
    value = os.environ.get(source.api_key_env)
    if not value:
        raise ConfigError(f"environment variable {source.api_key_env} is not set on the server")
    if source.api == ProviderApi.ANTHROPIC:
        return {"x-api-key": value, **headers}
    return {"Authorization": f"Bearer {value}"}
