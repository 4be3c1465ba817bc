"""Who may use which MCP tool (MCP.md's rule): a key's grants, its team's ceiling, its minter's."""

from __future__ import annotations

from llmgw.core.types import ApiKey, KeyScope, Team, ToolGrants
from llmgw.gateway.auth import KeyCache
from llmgw.gateway.mcp.access import may_read, may_use
from tests.factories import KEY_SECRET, admin_key, api_key, user_key


def _key(base: ApiKey, **over: object) -> ApiKey:
    return base.model_copy(update=over)


def _grants(allow: list[str] = (), deny: list[str] = ()) -> ToolGrants:  # type: ignore[assignment]
    return ToolGrants(allow=list(allow), deny=list(deny))


def test_a_user_key_without_grants_or_team_may_use_nothing() -> None:
    key = user_key()[1]
    keys = KeyCache(KEY_SECRET, [key])
    assert not may_use(keys, key, "github", "search")
    assert not may_read(keys, key, "github")


def test_a_user_key_may_use_what_it_allows_and_not_what_it_denies() -> None:
    key = _key(user_key()[1], tools=_grants(["github", "files/read_*"], ["github/delete_*"]))
    keys = KeyCache(KEY_SECRET, [key])
    assert may_use(keys, key, "github", "search")
    assert not may_use(keys, key, "github", "delete_repo")
    assert may_use(keys, key, "files", "read_file")
    assert not may_use(keys, key, "files", "write_file")
    assert may_read(keys, key, "github") and not may_read(keys, key, "files")


def test_an_admin_key_may_use_anything_but_what_its_grants_deny() -> None:
    key = _key(admin_key()[1], tools=_grants(deny=["shell"]))
    keys = KeyCache(KEY_SECRET, [key])
    assert may_use(keys, key, "github", "search")
    assert not may_use(keys, key, "shell", "run")


def test_node_and_metrics_keys_may_use_nothing() -> None:
    for scope in (KeyScope.NODE, KeyScope.METRICS):
        key = _key(api_key(scope=scope)[1], tools=_grants(["*"]))
        assert not may_use(KeyCache(KEY_SECRET, [key]), key, "github", "search")


def test_a_team_grants_its_keys_and_is_their_ceiling() -> None:
    team = Team(name="eng", tools=_grants(["github"], ["github/delete_*"]))
    plain = _key(user_key()[1], team=team.name, team_id=team.id)
    wider = _key(user_key()[1], team=team.name, team_id=team.id, tools=_grants(["github", "shell"]))
    keys = KeyCache(KEY_SECRET, [plain, wider], [team])
    assert may_use(keys, plain, "github", "search")  # the team's allow, no allow of its own
    assert not may_use(keys, plain, "github", "delete_repo")  # the team's deny
    assert may_use(keys, wider, "github", "search")
    assert not may_use(keys, wider, "shell", "run")  # beyond its team's allow list


def test_a_team_deny_holds_over_an_admin_key_of_the_team() -> None:
    team = Team(name="ops", tools=_grants(deny=["shell"]))
    key = _key(admin_key()[1], team=team.name, team_id=team.id)
    keys = KeyCache(KEY_SECRET, [key], [team])
    assert not may_use(keys, key, "shell", "run") and may_use(keys, key, "github", "x")


def test_a_key_of_a_removed_team_may_use_nothing() -> None:
    key = _key(user_key()[1], team="gone", team_id="team-gone", tools=_grants(["*"]))
    assert not may_use(KeyCache(KEY_SECRET, [key]), key, "github", "search")


def test_a_minted_key_stays_within_its_minter() -> None:
    minter = _key(user_key()[1], tools=_grants(["github"]))
    minted = _key(user_key()[1], minted_by=minter.id, tools=_grants(["github", "shell"]))
    keys = KeyCache(KEY_SECRET, [minter, minted])
    assert may_use(keys, minted, "github", "search")
    assert not may_use(keys, minted, "shell", "run")  # its minter may not
