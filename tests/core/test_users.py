"""Roles from the identity provider's groups, and when a console session lets its browser in."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from pydantic import ValidationError

from llmgw.core.users import ConsoleSession, Grant, Role, grant_for

NOW = datetime(2026, 12, 3, 12, 0, tzinfo=UTC)
MAPPING = {
    "llmgw-admins": Grant.parse("admin"),
    "platform": Grant.parse("operator"),
    "team-b-leads": Grant.parse("team-admin:team-b"),
    "team-a-leads": Grant.parse("team-admin:team-a"),
    "everyone": Grant.parse("viewer"),
}


def test_a_grant_reads_and_writes_the_config_form() -> None:
    assert Grant.parse("team-admin:research") == Grant(role=Role.TEAM_ADMIN, team="research")
    assert str(Grant.parse(" operator ")) == "operator"
    assert str(Grant.parse("team-admin:research")) == "team-admin:research"
    for bad in ("root", "team-admin", "admin:research", ""):
        with pytest.raises((ValueError, ValidationError)):
            Grant.parse(bad)


def test_the_highest_mapped_group_wins() -> None:
    assert grant_for(["everyone", "platform"], MAPPING) == Grant(role=Role.OPERATOR)
    assert grant_for(["everyone", "llmgw-admins", "team-a-leads"], MAPPING) == Grant(role=Role.ADMIN)
    # Two teams: the first in name order, whatever the order of the claim.
    assert grant_for(["team-b-leads", "team-a-leads"], MAPPING) == Grant.parse("team-admin:team-a")


def test_no_mapped_group_is_no_access_unless_there_is_a_default() -> None:
    assert grant_for(["contractors"], MAPPING) is None
    assert grant_for([], MAPPING, Grant.parse("viewer")) == Grant(role=Role.VIEWER)


def session(**kw: object) -> ConsoleSession:
    fields: dict[str, object] = {"id": "ses-1", "user_id": "usr-1", "address": "10.0.0.1",
                                 "created_at": NOW, "last_seen_at": NOW,
                                 "expires_at": NOW + timedelta(hours=12)}
    return ConsoleSession.model_validate({**fields, **kw})


def test_a_session_ends_when_ended_idle_or_past_its_absolute_end() -> None:
    idle_s = 3600
    assert session().live(NOW + timedelta(minutes=59), idle_s)
    assert not session().live(NOW + timedelta(minutes=60), idle_s)  # idle
    busy = session(last_seen_at=NOW + timedelta(hours=11, minutes=59))
    assert busy.live(NOW + timedelta(hours=11, minutes=59, seconds=30), idle_s)
    assert not busy.live(NOW + timedelta(hours=12), idle_s)  # absolute, however busy
    assert not session(ended_at=NOW, end_reason="sign-out").live(NOW, idle_s)
