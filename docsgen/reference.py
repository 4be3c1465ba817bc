"""The reference pages, made from the code: commands, configuration, HTTP API, metrics, errors.

A page asks for its part with `<!-- llmgw:reference NAME -->` (see hooks.py); each part is made
by its own module from what the code declares, so a command, key, operation, metric or error
code cannot exist without its entry."""

from __future__ import annotations

from collections.abc import Callable

from docsgen import cli, config, errors, http_api, metrics

PARTS: dict[str, Callable[[], str]] = {
    "cli": cli.render,
    "config": config.render,
    "http-api": http_api.render,
    "metrics": metrics.render,
    "errors": errors.render,
}


def render(name: str) -> str:
    """The Markdown for the reference part `name`."""
    try:
        part = PARTS[name]
    except KeyError:
        raise KeyError(f"no generated reference named {name!r}; there are {sorted(PARTS)}") from None
    return part()


def files() -> dict[str, bytes]:
    """Files the reference adds to the site (URI → content): the OpenAPI document."""
    return {http_api.DOCUMENT_URI: http_api.document_bytes()}
