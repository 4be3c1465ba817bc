"""Fixtures of the gateway's tests."""

from __future__ import annotations

from datetime import timedelta

import pytest

from llmgw.core.clock import FakeClock
from tests.factories import NOW


@pytest.fixture
def clock() -> FakeClock:
    """15 s into a minute (and into the day): 45 s are left of the current window."""
    return FakeClock(NOW + timedelta(seconds=15))
