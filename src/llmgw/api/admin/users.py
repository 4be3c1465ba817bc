"""People who sign in to the console, in the admin API: `/admin/v1/users`, admins only (an admin
key, or a person with the admin role)."""

from __future__ import annotations

from typing import Any

from llmgw.api.appkeys import PEOPLE
from llmgw.api.endpoints import Call, Endpoint
from llmgw.core.protocol.common import DataList
from llmgw.core.protocol.users import RoleRequest, SessionsEnded, UserOut

TAG = "users"
USER = "{user}"


async def list_users(call: Call[None, None]) -> DataList[UserOut]:
    people = call.app[PEOPLE]
    counts = await people.session_counts()
    return DataList(data=[UserOut.of(u, counts.get(u.id, 0)) for u in await people.users()])


async def get_user(call: Call[None, None]) -> UserOut:
    people = call.app[PEOPLE]
    user = await people.user(call.params["user"])
    return UserOut.of(user, len(await people.sessions(user.id)))


async def set_role(call: Call[RoleRequest, None]) -> UserOut:
    people = call.app[PEOPLE]
    user = await people.set_grant(call.params["user"], call.body.grant)
    return UserOut.of(user, len(await people.sessions(user.id)))


async def end_sessions(call: Call[None, None]) -> SessionsEnded:
    user, ended = await call.app[PEOPLE].end_sessions(call.params["user"])
    return SessionsEnded(user=user.id, ended=ended)


async def remove_user(call: Call[None, None]) -> UserOut:
    return UserOut.of(await call.app[PEOPLE].remove(call.params["user"]))


LIST_USERS = Endpoint("list_users", "GET", "/admin/v1/users",
                      "List people who signed in to the console, with their roles", TAG,
                      list_users, returns=DataList[UserOut])
GET_USER = Endpoint("get_user", "GET", f"/admin/v1/users/{USER}", "Show a user (by id or email)",
                    TAG, get_user, returns=UserOut)
SET_ROLE = Endpoint("set_user_role", "PUT", f"/admin/v1/users/{USER}/role",
                    "Set a user's role by hand (null: no access); their groups no longer change "
                    "it, and their sessions take it at once", TAG, set_role, body=RoleRequest,
                    returns=UserOut, example={"role": "team-admin:research"})
END_SESSIONS = Endpoint("end_user_sessions", "POST", f"/admin/v1/users/{USER}/signout",
                        "End every console session of a user, on every server", TAG,
                        end_sessions, returns=SessionsEnded)
REMOVE_USER = Endpoint("remove_user", "DELETE", f"/admin/v1/users/{USER}",
                       "Forget a user and end their sessions (they may sign in again, as new)",
                       TAG, remove_user, returns=UserOut)

ENDPOINTS: list[Endpoint[Any, Any]] = [LIST_USERS, GET_USER, SET_ROLE, END_SESSIONS, REMOVE_USER]
