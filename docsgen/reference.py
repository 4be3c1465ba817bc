"""The reference pages, made from the code: commands, configuration, HTTP API, metrics, errors."""

from __future__ import annotations


def render(name: str) -> str:
    """The Markdown for the reference part `name`."""
    raise KeyError(f"no generated reference named {name!r}")


def files() -> dict[str, bytes]:
    """Files the reference adds to the site (URI → content)."""
    return {}
