"""Remote providers: the headers each dialect authenticates with, and a key that never shows."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from llmgw.core.errors import ConfigError
from llmgw.core.types import ProviderApi, RemoteSource
from llmgw.engines.remote import ANTHROPIC_VERSION, auth_headers, endpoint
from llmgw.gateway.snapshot import build_routes
from tests.factories import remote_model

SECRET = "sk-provider-s3cret"


@pytest.fixture(autouse=True)
def provider_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LLMGW_PROVIDER_EXAMPLE", SECRET)


def source(**over: Any) -> RemoteSource:
    src = remote_model(**over).source
    assert isinstance(src, RemoteSource)
    return src


def test_an_openai_provider_gets_a_bearer_key() -> None:
    assert auth_headers(source()) == {"Authorization": f"Bearer {SECRET}"}


def test_an_anthropic_provider_gets_its_key_in_x_api_key_with_a_version() -> None:
    assert auth_headers(source(api=ProviderApi.ANTHROPIC)) == {
        "x-api-key": SECRET, "anthropic-version": "2023-06-01"}


def test_an_anthropic_provider_without_a_key_still_names_the_version() -> None:
    # The Messages API refuses a request without a version, key or no key.
    assert auth_headers(source(api=ProviderApi.ANTHROPIC, api_key_env=None)) == {
        "anthropic-version": ANTHROPIC_VERSION}
    assert auth_headers(source(api_key_env=None)) == {}


def test_the_base_url_is_where_each_dialect_appends_its_path() -> None:
    anthropic = source(base_url="https://api.anthropic.com/v1/", api=ProviderApi.ANTHROPIC)
    assert endpoint(anthropic) == "https://api.anthropic.com/v1"


@pytest.mark.parametrize("api", list(ProviderApi))
def test_a_variable_outside_the_rules_is_refused_without_its_value(
    api: ProviderApi, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SOME_OTHER_SECRET", "do-not-send")
    with pytest.raises(ConfigError) as caught:
        auth_headers(source(api=api, api_key_env="SOME_OTHER_SECRET"))
    assert "do-not-send" not in caught.value.message


@pytest.mark.parametrize("api", list(ProviderApi))
def test_the_key_is_sent_but_never_shows_in_a_repr_or_the_log(
    api: ProviderApi, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    routes = build_routes([remote_model("m", api=api)], [], {}, addresses={})
    [upstream] = routes["m"].upstreams
    assert SECRET in "".join(upstream.headers.values())
    assert SECRET not in repr(routes) and SECRET not in repr(upstream)
    assert SECRET not in caplog.text
