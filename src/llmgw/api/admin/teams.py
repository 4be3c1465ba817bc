"""Teams in the admin API: `/admin/v1/teams`, admin keys only (a team admin key reaches its team
through `/admin/v1/keys` and `/admin/v1/usage?team=`; a team admin signed in to the console also
reads its own team here)."""

from __future__ import annotations

from typing import Any

from llmgw.api.admin.keys import live_counts
from llmgw.api.admin.models import by
from llmgw.api.appkeys import TEAMS
from llmgw.api.endpoints import Call, Endpoint
from llmgw.core.errors import NotFound
from llmgw.core.protocol.common import DataList, Removed
from llmgw.core.protocol.keys import TeamOut, TeamRequest
from llmgw.core.types import KeyScope

TAG = "teams"


def _named(payload: dict[str, Any], params: object) -> dict[str, Any]:
    """A team body without what the server sets, named by the path when it has a name."""
    drop = ("id", "by", "created_at", "updated_at", "keys", "tokens_today", "tokens_this_month")
    out = {k: v for k, v in payload.items() if k not in drop}
    if isinstance(params, dict) and "name" in params:
        out["name"] = params["name"]
    return out


async def list_teams(call: Call[None, None]) -> DataList[TeamOut]:
    return DataList(data=await call.app[TEAMS].teams())


async def add_team(call: Call[TeamRequest, None]) -> TeamOut:
    return await call.app[TEAMS].put(call.body, by(call.key))


async def replace_team(call: Call[TeamRequest, None]) -> TeamOut:
    return await call.app[TEAMS].put(call.body, by(call.key), replace=True)


async def get_team(call: Call[None, None]) -> TeamOut:
    name, caller = call.params["name"], call.caller
    mine = caller.scope == KeyScope.ADMIN or caller.team == name
    team = await call.app[TEAMS].get(name) if mine else None
    if team is None or (caller.team_id is not None and caller.team_id != team.id):
        # A team admin reaches its own team only (not a later one of its name); another is as
        # unknown as one that is not.
        raise NotFound(f"team {name!r} does not exist", param="name")
    return team.model_copy(update={"live": await live_counts(call, team.limiter_id)})


async def remove_team(call: Call[None, None]) -> Removed:
    name = call.params["name"]
    await call.app[TEAMS].remove(name)
    return Removed(name=name)


_EXAMPLE = {"name": "research", "models": ["gemma*"],
            "limits": {"rpm": 600, "tokens_per_day": 2_000_000, "tokens_per_month": 40_000_000}}

LIST_TEAMS = Endpoint("list_teams", "GET", "/admin/v1/teams",
                      "List teams with their keys and tokens used", TAG, list_teams,
                      returns=DataList[TeamOut])
ADD_TEAM = Endpoint("add_team", "POST", "/admin/v1/teams", "Add a team", TAG, add_team,
                    body=TeamRequest, shape=_named, returns=TeamOut, status=201, example=_EXAMPLE)
REPLACE_TEAM = Endpoint("replace_team", "PUT", "/admin/v1/teams/{name}", "Change a team's models, "
                        "limits, weight and note", TAG, replace_team, body=TeamRequest, shape=_named,
                        returns=TeamOut, example={k: v for k, v in _EXAMPLE.items() if k != "name"})
GET_TEAM = Endpoint("get_team", "GET", "/admin/v1/teams/{name}", "Show a team", TAG, get_team,
                    returns=TeamOut)
REMOVE_TEAM = Endpoint("remove_team", "DELETE", "/admin/v1/teams/{name}",
                       "Remove a team (refused while it has live keys)", TAG, remove_team,
                       returns=Removed)

ENDPOINTS: list[Endpoint[Any, Any]] = [LIST_TEAMS, ADD_TEAM, REPLACE_TEAM, GET_TEAM, REMOVE_TEAM]
