"""What each role of a person signed in to the console may call: checked on the server for every
endpoint, whatever the page showed."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from llmgw.api.endpoints import Access, Endpoint
from llmgw.api.registry import ENDPOINTS
from llmgw.api.roles import refusal
from llmgw.core.users import Grant, Person, Role, User, acting_key, is_person, who

BY_NAME = {ep.name: ep for ep in ENDPOINTS}
VIEWER, OPERATOR, ADMIN = Grant(role=Role.VIEWER), Grant(role=Role.OPERATOR), Grant(role=Role.ADMIN)
TEAM_ADMIN = Grant(role=Role.TEAM_ADMIN, team="research")


def allowed(grant: Grant | None, name: str) -> bool:
    return refusal(grant, BY_NAME[name]) is None


def user_alice() -> User:
    at = datetime(2026, 1, 1, tzinfo=UTC)
    return User(id="usr-0a1b2c3d4e", issuer="https://idp.example", subject="alice",
                email="alice@example.test", email_verified=True, created_at=at,
                signed_in_at=at)


@pytest.mark.parametrize("name", ["list_models", "list_nodes", "guard_overview", "list_routes",
                                  "list_teams", "list_jobs", "cluster_status", "list_audit"])
def test_a_viewer_reads_the_install(name: str) -> None:
    assert allowed(VIEWER, name)


@pytest.mark.parametrize("name", ["add_model", "scale_model", "start_job", "put_policy",
                                  "cordon_node", "add_route", "add_team", "set_switches"])
def test_a_viewer_changes_nothing(name: str) -> None:
    assert refusal(VIEWER, BY_NAME[name]) == "a viewer changes nothing"


@pytest.mark.parametrize("grant", [VIEWER, OPERATOR])
@pytest.mark.parametrize("name", ["list_keys", "get_key", "create_key", "revoke_key", "usage",
                                  "get_default_limits", "list_users", "set_user_role"])
def test_operators_and_viewers_never_see_keys_usage_or_people(grant: Grant, name: str) -> None:
    assert not allowed(grant, name)


@pytest.mark.parametrize("name", ["add_model", "scale_model", "remove_model", "start_job",
                                  "cancel_job", "put_policy", "enable_judge", "drain_node",
                                  "label_node", "add_route", "judgment"])
def test_an_operator_changes_models_nodes_jobs_guard_and_routes(name: str) -> None:
    assert allowed(OPERATOR, name)


@pytest.mark.parametrize("name", ["add_team", "replace_team", "remove_team", "put_default_limits",
                                  "rotate_key", "remove_user"])
def test_an_operator_does_not_change_money_or_access(name: str) -> None:
    assert not allowed(OPERATOR, name)


@pytest.mark.parametrize("name", ["create_key", "list_keys", "get_key", "revoke_key", "usage",
                                  "list_models", "get_team"])
def test_a_team_admin_manages_its_teams_keys(name: str) -> None:
    assert allowed(TEAM_ADMIN, name)


@pytest.mark.parametrize("name", ["rotate_key", "add_model", "list_nodes", "list_teams",
                                  "replace_team", "list_users", "put_default_limits",
                                  "list_audit", "guard_overview"])
def test_a_team_admin_reaches_nothing_else(name: str) -> None:
    reason = refusal(TEAM_ADMIN, BY_NAME[name])
    assert reason == "a team admin manages team research's keys and usage only"


def test_an_admin_reaches_every_admin_and_key_endpoint_but_no_node_or_scraper_one() -> None:
    for ep in ENDPOINTS:
        if ep.access in (Access.NODE, Access.SCRAPER):
            assert not allowed(ADMIN, ep.name), ep.name
        else:
            assert allowed(ADMIN, ep.name), ep.name


def test_a_person_without_a_role_reaches_only_public_endpoints() -> None:
    for ep in ENDPOINTS:
        assert allowed(None, ep.name) == (ep.access is Access.PUBLIC), ep.name


def test_node_endpoints_are_never_a_persons() -> None:
    nodes: list[Endpoint[Any, Any]] = [ep for ep in ENDPOINTS if ep.access is Access.NODE]
    assert nodes
    for ep in nodes:
        for grant in (ADMIN, OPERATOR, TEAM_ADMIN, VIEWER):
            assert not allowed(grant, ep.name)


def test_a_persons_acting_key_is_no_stored_key_and_names_them_in_the_audit_log() -> None:
    alice = user_alice()
    key = Person(alice, TEAM_ADMIN).key
    assert key == acting_key(alice, TEAM_ADMIN)
    assert is_person(key) and key.hash == "" and key.team == "research" and key.team_admin
    assert who(key) == "alice@example.test (sso)"
    assert Person(alice, OPERATOR).key.scope.value == "admin"
