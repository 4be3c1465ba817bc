"""The benchmark plots, drawn by bench/ from its JSON output."""

from __future__ import annotations


def generated() -> dict[str, bytes]:
    """The plots the benchmarks page shows (URI → PNG)."""
    return {}
